"""Per-forward capture of internal tensors (H^(L-1) now; attention signals later).

A :class:`Capture` travels through the model's ``**kwargs`` (transformers hands them down to every
decoder layer), so the hooks installed once on the shared model only ever write into the capture of
the call that is running. Concurrent runs in different threads therefore never see each other's data.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

CAPTURE_KWARG = "ccviz_capture"
_install_lock = threading.Lock()


@dataclass
class Capture:
    """What one forward pass should record, and what it recorded."""

    hidden: bool = False
    hidden_states: torch.Tensor | None = None  # [chunk, d_model]: the residual stream entering the last layer


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    return model.model.layers


def _record_last_layer_input(module, args, kwargs) -> None:
    capture = kwargs.get(CAPTURE_KWARG)
    if capture is not None and capture.hidden:
        hidden = args[0] if args else kwargs["hidden_states"]
        capture.hidden_states = hidden[0]


def install_hooks(model: torch.nn.Module) -> None:
    """Install ccviz's capture hooks once per model; they do nothing for calls without a Capture."""
    with _install_lock:
        if getattr(model, "_ccviz_hooks_installed", False):
            return
        decoder_layers(model)[-1].register_forward_pre_hook(_record_last_layer_input, with_kwargs=True)
        model._ccviz_hooks_installed = True
