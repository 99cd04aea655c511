"""Model loading: the embedded SmolLM2, local checkpoints, and a tiny random model for tests."""

from .loading import DEFAULT_MODEL, TINY_MODEL, LoadedModel, cache_dir, load_model

__all__ = ["DEFAULT_MODEL", "TINY_MODEL", "LoadedModel", "cache_dir", "load_model"]
