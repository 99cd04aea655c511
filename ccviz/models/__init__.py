"""Model loading: the embedded SmolLM2, Gemma 3 270M, local checkpoints, and a tiny random model for tests."""

from .embedded import DEFAULT_MODEL, GEMMA_MODEL, cache_dir, installed_models
from .loaded import TINY_MODEL, LoadedModel
from .loading import load_model, load_tokenizer, model_name
from .windows import layer_windows, within_window

__all__ = [
    "DEFAULT_MODEL",
    "GEMMA_MODEL",
    "TINY_MODEL",
    "LoadedModel",
    "cache_dir",
    "installed_models",
    "layer_windows",
    "load_model",
    "load_tokenizer",
    "model_name",
    "within_window",
]
