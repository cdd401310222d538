"""Evaluation: one grid cell run (``cells``: the ``eval-cell`` command) and its sealed file (``cellfile``), the
verifier's prefill shared by a dataset × context (``prefill``), and the grid of measured cells that the report reads
(``grid``: speedup, acceptance, the lossless check). Imports ``training``, ``decoding`` and ``base``."""
