"""Load a causal LM and its tokenizer: the embedded SmolLM2 by default, Gemma 3 270M (``gemma-3-270m``), the
tiny random Llama, or a local checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..choices import DTYPES, Device, Dtype
from ..errors import CcvizError
from .embedded import DEFAULT_MODEL, EMBEDDED, converted, quiet_transformers
from .loaded import TINY_MODEL, LoadedModel

SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3", "mistral", "gemma3_text")
_TORCH_DTYPES = {name: getattr(torch, name) for name in DTYPES}


def _check_checkpoint(path: Path) -> None:
    if not path.exists():
        raise CcvizError(f"model path {str(path)!r} does not exist: pass a local Hugging Face checkpoint folder")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise CcvizError(
            f"{str(path)!r} has no config.json: pass a Hugging Face checkpoint folder (Llama, Qwen2, Mistral, Gemma 3)"
        )
    try:
        model_type = json.loads(config_file.read_text()).get("model_type")
    except (OSError, ValueError) as err:
        raise CcvizError(f"cannot read {config_file}: {err}") from None
    if model_type not in SUPPORTED_ARCHITECTURES:
        raise CcvizError(
            f"unsupported architecture {model_type!r} in {path}: ccviz supports {', '.join(SUPPORTED_ARCHITECTURES)}"
        )


def _resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise CcvizError("device 'cuda' was asked for but no CUDA GPU is available: use --device cpu")
    if device != "cpu" and not device.startswith("cuda"):
        raise CcvizError(f"unknown device {device!r}: use cpu, cuda or auto")
    return torch.device(device)


def model_name(name_or_path: str | None = None) -> str:
    """The name :func:`load_model` gives a model (what result files record), checked without loading it:
    a missing or unsupported checkpoint folder fails here, in one line."""
    if name_or_path == TINY_MODEL:
        return TINY_MODEL
    if not name_or_path:
        return DEFAULT_MODEL
    if name_or_path in EMBEDDED:
        return name_or_path
    path = Path(name_or_path).expanduser()
    _check_checkpoint(path)
    return path.name


def load_tokenizer(name_or_path: str | None = None):
    """The tokenizer :func:`load_model` would load, without the weights (the tiny model's is SmolLM2's):
    for counting tokens where the model itself lives in another process."""
    from transformers import AutoTokenizer

    quiet_transformers()
    model_name(name_or_path)  # a bad folder fails here, in one line
    path = _source(None if name_or_path == TINY_MODEL else name_or_path)  # the tiny model's is SmolLM2's
    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise CcvizError(f"cannot load the tokenizer from {path}: {_first_line(err)}") from None


def _source(name_or_path: str | None) -> Path:
    """Where a model loads from: an embedded model's converted copy (converting it the first time), else
    the checkpoint folder."""
    if not name_or_path or name_or_path in EMBEDDED:
        return converted(name_or_path or DEFAULT_MODEL)
    return Path(name_or_path).expanduser()


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def load_model(
    name_or_path: str | None = None, *, device: Device | str = "cpu", dtype: Dtype = "float32"
) -> LoadedModel:
    """Load a model for ccviz: ``None`` is the embedded SmolLM2, ``"gemma-3-270m"`` Gemma 3 270M (the extra
    ``gemma``), ``"tiny-random"`` the tiny random Llama of the tests, else a local checkpoint folder.

    ``dtype`` applies to the weights only; every score ccviz computes is float32 regardless.

    Parameters
    ----------
    name_or_path : str, optional
        None, ``"gemma-3-270m"``, ``"tiny-random"`` or a local checkpoint folder.
    device : {"cpu", "cuda", "auto"}
        Where the weights go.
    dtype : {"float32", "float16", "bfloat16"}
        The weights' dtype.

    Returns
    -------
    LoadedModel
        ``model`` (a transformers causal LM in eval mode), ``tokenizer``, ``name`` and ``windows`` (each
        layer's sliding window, or None).
    """
    quiet_transformers()
    if dtype not in _TORCH_DTYPES:
        raise CcvizError(f"unknown dtype {dtype!r}: use one of {', '.join(_TORCH_DTYPES)}")
    target_device = _resolve_device(device)
    if name_or_path == TINY_MODEL:
        from .tiny import build_tiny_model

        loaded = build_tiny_model()
        loaded.model.to(device=target_device, dtype=_TORCH_DTYPES[dtype])
        return loaded
    name = model_name(name_or_path)
    path = _source(name_or_path)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=_TORCH_DTYPES[dtype], attn_implementation="sdpa")
    except (OSError, ValueError) as err:
        raise CcvizError(f"cannot load the model from {path}: {_first_line(err)}") from None
    model.to(target_device).eval().requires_grad_(False)  # type: ignore[arg-type]  # @wraps'd .to loses self binding
    return LoadedModel(model=model, tokenizer=tokenizer, name=name)
