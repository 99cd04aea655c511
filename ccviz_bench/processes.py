"""Fresh processes for measurements whose peak memory must be their own."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing import get_context

# What loading a model imports (the embedded SmolLM2 and the tiny model are Llamas): seconds per process otherwise.
MODEL_MODULES = ("transformers.models.auto.tokenization_auto", "transformers.models.llama.modeling_llama")


@contextmanager
def fresh_processes(preload: str) -> Iterator[ProcessPoolExecutor]:
    """A pool that runs each task in a new process: a process's heap never shrinks back, so only a new one
    has an honest peak. Forked from a server that has imported the module ``preload`` and what loading a
    model imports (torch, ccviz, transformers' Llama, but run nothing): starting one costs ~1 s, not ~5-8."""
    context = get_context("forkserver")
    context.set_forkserver_preload([preload, *MODEL_MODULES])  # a module that is not there is skipped
    with ProcessPoolExecutor(max_workers=1, mp_context=context, max_tasks_per_child=1) as pool:
        yield pool
