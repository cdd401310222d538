"""Public name: ``budgetdraft.hf.generate`` for transformers' ``generate(custom_generate=...)``, and the
``generate_with_drafter`` that published ``custom_generate/generate.py`` files import (budgetdraft.decoding.hf_generate)."""

from budgetdraft.decoding.hf_generate import export_generate, generate, generate_with_drafter

__all__ = ["export_generate", "generate", "generate_with_drafter"]
