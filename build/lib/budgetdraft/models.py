"""Public name: ``budgetdraft.models.load_model`` / ``load_tokenizer`` (budgetdraft.decoding.loading)."""

from budgetdraft.decoding.export import export
from budgetdraft.decoding.loading import load_model, load_tokenizer

__all__ = ["export", "load_model", "load_tokenizer"]
