"""Public name: ``budgetdraft.models.load_model`` / ``load_tokenizer`` (budgetdraft.decoding.models)."""

from budgetdraft.decoding.models import export, load_model, load_tokenizer

__all__ = ["export", "load_model", "load_tokenizer"]
