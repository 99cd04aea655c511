"""Model loading: the embedded SmolLM2, local checkpoints, and a tiny random model for tests."""

from .embedded import DEFAULT_MODEL, cache_dir
from .loaded import TINY_MODEL, LoadedModel
from .loading import load_model, load_tokenizer, model_name

__all__ = ["DEFAULT_MODEL", "TINY_MODEL", "LoadedModel", "cache_dir", "load_model", "load_tokenizer", "model_name"]
