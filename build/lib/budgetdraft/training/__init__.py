"""Training: prompts and training sequences (``data``), the verifier's teacher targets (``targets``), the
hyper-parameters (``hparams``), the drafter trained with L_A + λ·L_C (``train``, Algorithm 1) and the EAGLE-3 head
(``eagle3``). Imports ``budgetdraft.decoding`` and ``budgetdraft.base``."""
