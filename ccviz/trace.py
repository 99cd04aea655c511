"""The trace of one run: what was processed, and what survived each cache refresh.

A trace is plain data (no tensors) so the app, the CLI and other tools can read it without the model.
It is saved as strict JSON: infinite scores are written as the strings ``"inf"`` / ``"-inf"`` because
JSON has no literal for them, and are turned back into floats on load.

Schema version 2 added what a per-layer allocation keeps (``Cycle.layer_kept`` / ``head_kept``) and
``Trace.peak_cache_bytes``; version-1 files load with those absent (every layer kept ``kept``).
``Trace.answer_reads`` (what each generated token read, recorded when asked) is optional: files
without it load with None.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .choices import PHASES, SOURCES, STATUSES, Phase, Source, Status
from .envvars import env_int
from .errors import CcvizError
from .fields import is_number, is_whole

if TYPE_CHECKING:
    from .engine.config import RunConfig

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
MAX_TRACE_MB_ENV = "CCVIZ_MAX_TRACE_MB"
DEFAULT_MAX_TRACE_MB = 64  # larger files are refused before parsing: a trace of an 8k-token run is a few MB


def max_trace_bytes() -> int:
    return env_int(MAX_TRACE_MB_ENV, DEFAULT_MAX_TRACE_MB) * 2**20


@dataclass
class TokenRecord:
    """One processed (or generated) token: ``t`` is its original absolute position."""

    t: int
    id: int
    text: str
    source: Source


@dataclass
class Cycle:
    """One refresh: the candidates scored, every score signal, and the cache content afterwards.

    ``kept`` lists every surviving timestep in position order, frozen entries included, so it is
    exactly the cache after the refresh; ``candidates`` excludes the frozen prefix and a kept question. ``units`` (word
    or sentence granularity only): each candidate's unit number, 0, 1, ... in candidate order.

    Under a per-layer allocation ``kept`` is what at least one layer holds, and ``layer_kept[l]`` says
    which of it layer l holds: a bit per entry of ``kept`` in order, packed most significant bit first
    into bytes, written in hex (:func:`pack_members`). ``head_kept[l][h]`` (allocation "adaptive"): the
    same for KV head h of layer l. None: every layer and head holds all of ``kept``.
    """

    index: int
    step: int
    phase: Phase
    candidates: list[int]
    kept: list[int]
    scores: dict[str, list[float]]
    seconds: float
    units: list[int] | None = None
    layer_kept: list[str] | None = None
    head_kept: list[list[str]] | None = None

    @property
    def num_layers(self) -> int | None:
        """Layers recorded separately (None: one set for all)."""
        return None if self.layer_kept is None else len(self.layer_kept)

    @property
    def num_heads(self) -> int | None:
        """KV heads recorded separately per layer (None: each layer's heads share its set)."""
        return None if self.head_kept is None else len(self.head_kept[0])

    def kept_by(self, layer: int | None = None, head: int | None = None) -> list[int]:
        """The timesteps layer ``layer`` (KV head ``head`` of it) holds after the refresh; None: ``kept``."""
        if layer is None or self.layer_kept is None:
            return self.kept
        bits = self.layer_kept[layer] if head is None or self.head_kept is None else self.head_kept[layer][head]
        return np.asarray(self.kept)[unpack_members(bits, len(self.kept))].tolist()

    def layer_counts(self) -> list[int]:
        """For each entry of ``kept``, how many layers hold it (all of them without per-layer sets)."""
        if self.layer_kept is None:
            return [1] * len(self.kept)
        return np.stack([unpack_members(bits, len(self.kept)) for bits in self.layer_kept]).sum(axis=0).tolist()


def pack_members(bits: Any) -> str:
    """A bool sequence as hex: bit i of the packed bytes (most significant first) is ``bits[i]``."""
    return np.packbits(np.asarray(bits, dtype=bool)).tobytes().hex()


def unpack_members(text: str, n: int) -> np.ndarray:
    """The inverse of :func:`pack_members` for ``n`` bits: bool ``[n]``."""
    return np.unpackbits(np.frombuffer(bytes.fromhex(text), dtype=np.uint8))[:n].astype(bool)


@dataclass
class AnswerRead:
    """What the last layer read when one generated token was picked, compactly: ``present`` marks, over the
    positions 0..q (q: the query's position), the entries the cache held then (:func:`pack_members`);
    ``max_levels`` / ``mean_levels`` give each present entry's attention, the max and the mean over query
    heads, in position order, as one byte each (hex) on a square-root scale of that step's own maximum
    ``max_scale`` / ``mean_scale``: value = scale * (level / 255) ** 2 (:meth:`encode`, :meth:`values`)."""

    present: str
    max_scale: float
    max_levels: str
    mean_scale: float
    mean_levels: str

    @classmethod
    def encode(cls, positions: np.ndarray, max_read: np.ndarray, mean_read: np.ndarray) -> AnswerRead:
        """From the cached ``positions`` (int ``[entries]``, ascending, the last one the query's) and the
        attention each got (float ``[entries]``, the max and the mean over query heads)."""
        present = np.zeros(int(positions[-1]) + 1, dtype=bool)
        present[positions] = True
        max_scale, max_levels = _quantise(max_read)
        mean_scale, mean_levels = _quantise(mean_read)
        return cls(pack_members(present), max_scale, max_levels, mean_scale, mean_levels)

    def values(self, query: int) -> tuple[np.ndarray, np.ndarray]:
        """Float64 ``[query + 1]`` each: per position, the max and the mean over query heads of the attention
        it got (NaN where the cache did not hold it)."""
        present = unpack_members(self.present, query + 1)
        reads = np.full((2, query + 1), np.nan)
        reads[0, present] = _dequantise(self.max_scale, self.max_levels)
        reads[1, present] = _dequantise(self.mean_scale, self.mean_levels)
        return reads[0], reads[1]


@dataclass(frozen=True)
class AnswerReading:
    """What generated token ``step`` (0: the answer's first) read: it was picked from the pass whose newest
    query sat at ``query`` (the last prompt token for step 0, then the previous generated token), and
    ``max`` / ``mean`` (float64 ``[query + 1]``) give, per position, the last layer's attention over
    the cache then, the max and the mean over query heads; NaN where the entry was no longer cached."""

    step: int
    query: int
    max: np.ndarray
    mean: np.ndarray

    @property
    def token(self) -> int:
        """The generated token's own timestep."""
        return self.query + 1

    @property
    def evicted(self) -> np.ndarray:
        """The timesteps already processed that the cache no longer held (unreadable), ascending."""
        return np.flatnonzero(np.isnan(self.max))


@dataclass
class Trace:
    config: dict[str, Any]
    tokens: list[TokenRecord] = field(default_factory=list)
    cycles: list[Cycle] = field(default_factory=list)
    output_text: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    peak_cache_length: int = 0
    peak_cache_bytes: int = 0  # K/V bytes at the fullest point (every layer's own length); 0 in version-1 files
    status: Status = "complete"
    stop_reason: str = ""
    error: str | None = None
    # One per generated token, in order, when the run recorded them (``record_reads``); None otherwise
    answer_reads: list[AnswerRead] | None = None
    schema_version: int = SCHEMA_VERSION

    # ----- derived views -------------------------------------------------------------------
    @property
    def run_config(self) -> RunConfig:
        """The run's settings, typed: ``config`` read as a :class:`ccviz.RunConfig`, every field a trace
        written before it existed lacks at its default. Its policy is taken as recorded (not built), so a
        trace of a policy this installation lacks still describes itself."""
        from .engine.config import RunConfig  # the engine imports this module: imported when first asked

        return RunConfig.from_trace(self)

    @property
    def prompt_length(self) -> int:
        return sum(1 for tok in self.tokens if tok.source == "prompt")

    @property
    def question_start(self) -> int | None:
        """The first token of a question given apart from the document (None: none was)."""
        start = self.config.get("question_start")
        return start if is_whole(start) else None

    @property
    def kept_question(self) -> range:
        """The positions the run kept apart from eviction: the question given apart and the template's turn
        suffix after it, under ``protect_question`` (empty otherwise)."""
        start = self.question_start
        if start is None or self.config.get("protect_question") is not True:
            return range(0)
        return range(start, max(start, self.config.get("prompt_tokens") or self.prompt_length))

    @property
    def final_kept(self) -> list[int]:
        """Timesteps in the cache at the end of the run (all processed tokens if nothing was evicted)."""
        return self.cycles[-1].kept if self.cycles else [tok.t for tok in self.tokens]

    def eviction_refreshes(self) -> np.ndarray:
        """For every token, the index of the refresh that evicted it, or -1 (never evicted): a token is
        evicted when it is a candidate of a refresh but not kept by it, and it never comes back."""
        evicted_at = np.full(len(self.tokens), -1, dtype=np.int32)
        for cycle in self.cycles:
            gone = np.setdiff1d(np.asarray(cycle.candidates, dtype=np.int64), np.asarray(cycle.kept, dtype=np.int64))
            evicted_at[gone[evicted_at[gone] == -1]] = cycle.index
        return evicted_at

    def answer_reading(self, step: int) -> AnswerReading:
        """What generated token ``step`` (0: the first) read (:class:`AnswerReading`); a one-line error when the
        run did not record it or ``step`` is not one of its generated tokens."""
        if self.answer_reads is None:
            raise CcvizError("this trace has no record of what the answer read: re-run with --record-reads")
        if not 0 <= step < len(self.answer_reads):
            raise CcvizError(f"the step must be 0 to {len(self.answer_reads) - 1} (a generated token), got {step}")
        query = self.prompt_length - 1 + step
        return AnswerReading(step, query, *self.answer_reads[step].values(query))

    # ----- serialisation -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.answer_reads is None:  # traces that did not record it look as they did before it existed
            del data["answer_reads"]
        for cycle in data["cycles"]:
            cycle["scores"] = {
                name: [_encode_float(float(v)) for v in values] for name, values in cycle["scores"].items()
            }
        return {"schema_version": data.pop("schema_version"), **data}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=True, allow_nan=False, separators=(",", ":"))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(), encoding="utf-8")

    @classmethod
    def from_json(cls, text: str | bytes) -> Trace:
        _expect_size(len(text))
        try:
            data = json.loads(text, parse_constant=_reject_constant)
        except (UnicodeDecodeError, ValueError) as err:
            raise CcvizError(f"not a ccviz trace: invalid JSON ({err})") from None
        except RecursionError:
            raise CcvizError("not a ccviz trace: JSON nested too deeply") from None
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        path = Path(path)
        try:
            _expect_size(path.stat().st_size)
            raw = path.read_bytes()
        except OSError as err:
            raise CcvizError(f"cannot read trace {str(path)!r}: {err.strerror or err}") from None
        return cls.from_json(raw)

    @classmethod
    def from_dict(cls, data: Any) -> Trace:
        """Validate everything before building: a bad file fails here, never half-way through a figure."""
        _expect(isinstance(data, dict), "the top level must be a JSON object")
        try:  # a lone surrogate escape ("\ud800") is valid JSON but no text can be shown or saved
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            _expect(False, "it contains an unpaired UTF-16 surrogate escape (\\ud800-\\udfff)")
        version = data.get("schema_version")
        _expect(
            version in READABLE_VERSIONS,
            f"schema_version is {version!r}, this ccviz reads versions {' and '.join(map(str, READABLE_VERSIONS))}",
        )
        for key in (
            "config",
            "tokens",
            "cycles",
            "output_text",
            "timings",
            "peak_cache_length",
            "status",
            "stop_reason",
        ):
            _expect(key in data, f"missing field {key!r}")
        config = data["config"]
        _expect(isinstance(config, dict), "'config' must be an object")
        for key in ("prompt_tokens", "question_start"):  # positions the views index by
            value = config.get(key, 0)
            _expect(is_whole(value) and value >= 0, f"config.{key} must be a non-negative integer")
        tokens = [_token(i, raw) for i, raw in enumerate(_list(data["tokens"], "tokens"))]
        n_tokens = len(tokens)
        cycles = [_cycle(i, raw, n_tokens) for i, raw in enumerate(_list(data["cycles"], "cycles"))]
        timings = data["timings"]
        _expect(isinstance(timings, dict), "'timings' must be an object")
        for name, value in timings.items():
            _expect(is_number(value) and math.isfinite(value), f"timings.{name} must be a finite number")
        _expect(isinstance(data["output_text"], str), "'output_text' must be a string")
        _expect(
            is_whole(data["peak_cache_length"]) and data["peak_cache_length"] >= 0,
            "'peak_cache_length' must be a non-negative integer",
        )
        peak_bytes = data.get("peak_cache_bytes", 0)
        _expect(is_whole(peak_bytes) and peak_bytes >= 0, "'peak_cache_bytes' must be a non-negative integer")
        _expect(data["status"] in STATUSES, f"'status' must be one of {', '.join(STATUSES)}")
        _expect(isinstance(data["stop_reason"], str), "'stop_reason' must be a string")
        error = data.get("error")
        _expect(error is None or isinstance(error, str), "'error' must be a string or null")
        prompt = sum(1 for tok in tokens if tok.source == "prompt")
        reads = data.get("answer_reads")
        if reads is not None:
            reads = _list(reads, "answer_reads")
            generated = n_tokens - prompt if prompt else 0  # step 0's query is the last prompt token
            _expect(len(reads) <= generated, "answer_reads has more steps than generated tokens")
            reads = [_answer_read(i, raw, prompt + i) for i, raw in enumerate(reads)]
        trace = cls(
            config=config,
            tokens=tokens,
            cycles=cycles,
            output_text=data["output_text"],
            timings={k: float(v) for k, v in timings.items()},
            peak_cache_length=data["peak_cache_length"],
            peak_cache_bytes=peak_bytes,
            status=data["status"],
            stop_reason=data["stop_reason"],
            error=error,
            answer_reads=reads,
        )
        try:  # every view reads the config as a RunConfig: a bad one fails here, not half-way through a page
            _ = trace.run_config
        except CcvizError as err:
            _expect(False, f"config: {err}")
        return trace


# ----- helpers ---------------------------------------------------------------------------------
def _quantise(values: np.ndarray) -> tuple[float, str]:
    """Non-negative values as (their max, one byte each in hex on a square-root scale of it): attention spans
    orders of magnitude, and the root keeps a token read a thousandth as much as the top one above zero."""
    scale = float(values.max()) if values.size else 0.0
    levels = np.rint(255 * np.sqrt(np.clip(values, 0, None) / scale)) if scale > 0 else np.zeros(values.shape)
    return scale, levels.astype(np.uint8).tobytes().hex()


def _dequantise(scale: float, levels: str) -> np.ndarray:
    """The inverse of :func:`_quantise`, to half a level: float64 ``[entries]``."""
    return scale * (np.frombuffer(bytes.fromhex(levels), dtype=np.uint8) / 255.0) ** 2


def _encode_float(value: float) -> float | str:
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def _expect_size(size: int) -> None:
    limit = max_trace_bytes()
    _expect(size <= limit, f"the file is larger than {limit // 2**20} MB ({MAX_TRACE_MB_ENV})")


def _reject_constant(name: str) -> None:
    raise ValueError(f'{name} is not allowed (write infinite scores as "inf")')


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise CcvizError(f"not a valid ccviz trace: {message}")


def _list(value: Any, where: str) -> list:
    _expect(isinstance(value, list), f"{where!r} must be a list")
    return value


def _token(i: int, raw: Any) -> TokenRecord:
    _expect(isinstance(raw, dict), f"tokens[{i}] must be an object")
    for key in ("t", "id", "text", "source"):
        _expect(key in raw, f"tokens[{i}] is missing {key!r}")
    _expect(raw["t"] == i and is_whole(raw["t"]), f"tokens[{i}].t must be {i} (tokens are stored in position order)")
    _expect(is_whole(raw["id"]) and raw["id"] >= 0, f"tokens[{i}].id must be a non-negative integer")
    _expect(isinstance(raw["text"], str), f"tokens[{i}].text must be a string")
    _expect(raw["source"] in SOURCES, f"tokens[{i}].source must be 'prompt' or 'generated'")
    return TokenRecord(t=raw["t"], id=raw["id"], text=raw["text"], source=raw["source"])


def _timesteps(value: Any, where: str, n_tokens: int) -> list[int]:
    items = _list(value, where)
    _expect(
        all(is_whole(t) and 0 <= t < n_tokens for t in items),
        f"{where} must hold timesteps between 0 and {n_tokens - 1}",
    )
    _expect(all(a < b for a, b in zip(items, items[1:])), f"{where} must be in increasing position order")
    return items


def _score(value: Any, where: str) -> float:
    if value in ("inf", "-inf"):
        return float(value)
    _expect(is_number(value) and math.isfinite(value), f'{where} must be a finite number, "inf" or "-inf"')
    return float(value)


def _cycle(i: int, raw: Any, n_tokens: int) -> Cycle:
    where = f"cycles[{i}]"
    _expect(isinstance(raw, dict), f"{where} must be an object")
    for key in ("index", "step", "phase", "candidates", "kept", "scores", "seconds"):
        _expect(key in raw, f"{where} is missing {key!r}")
    _expect(raw["index"] == i and is_whole(raw["index"]), f"{where}.index must be {i}")
    _expect(is_whole(raw["step"]) and 0 < raw["step"] <= n_tokens, f"{where}.step must be between 1 and {n_tokens}")
    _expect(raw["phase"] in PHASES, f"{where}.phase must be 'prefill' or 'decode'")
    candidates = _timesteps(raw["candidates"], f"{where}.candidates", n_tokens)
    kept = _timesteps(raw["kept"], f"{where}.kept", n_tokens)
    scores_raw = raw["scores"]
    _expect(isinstance(scores_raw, dict), f"{where}.scores must be an object")
    scores = {}
    for name, values in scores_raw.items():
        values = _list(values, f"{where}.scores.{name}")
        _expect(
            len(values) == len(candidates),
            f"{where}.scores.{name} has {len(values)} values for {len(candidates)} candidates",
        )
        scores[name] = [_score(v, f"{where}.scores.{name}[{j}]") for j, v in enumerate(values)]
    _expect(
        is_number(raw["seconds"]) and math.isfinite(raw["seconds"]) and raw["seconds"] >= 0,
        f"{where}.seconds must be a non-negative number",
    )
    units = raw.get("units")
    if units is not None:
        units = _list(units, f"{where}.units")
        _expect(
            len(units) == len(candidates)
            and all(is_whole(u) for u in units)
            and all(b - a in (0, 1) for a, b in zip([-1, *units], units)),
            f"{where}.units must number the {len(candidates)} candidates' units 0, 1, ... in order",
        )
    layer_kept, head_kept = _members(raw, where, len(kept))
    return Cycle(
        index=raw["index"],
        step=raw["step"],
        phase=raw["phase"],
        candidates=candidates,
        kept=kept,
        scores=scores,
        seconds=float(raw["seconds"]),
        units=units,
        layer_kept=layer_kept,
        head_kept=head_kept,
    )


def _bits(value: Any, where: str, n: int) -> np.ndarray:
    size = -(-n // 8)
    _expect(isinstance(value, str) and len(value) == 2 * size, f"{where} must be {size} bytes in hex, a bit per entry")
    try:
        bits = unpack_members(value, 8 * size)
    except ValueError:
        _expect(False, f"{where} must be hexadecimal")
    _expect(not bits[n:].any(), f"{where} sets bits past the {n} kept entries")
    return bits[:n]


def _answer_read(i: int, raw: Any, size: int) -> AnswerRead:
    """Step ``i``'s record: ``size`` positions (up to its query's) and a level per entry present, both scales."""
    where = f"answer_reads[{i}]"
    _expect(isinstance(raw, dict), f"{where} must be an object")
    for key in ("present", "max_scale", "max_levels", "mean_scale", "mean_levels"):
        _expect(key in raw, f"{where} is missing {key!r}")
    present = _bits(raw["present"], f"{where}.present", size)
    _expect(bool(present[-1]), f"{where}.present must hold its query, position {size - 1}")
    for name in ("max", "mean"):
        scale, levels = raw[f"{name}_scale"], raw[f"{name}_levels"]
        _expect(is_number(scale) and math.isfinite(scale) and scale >= 0, f"{where}.{name}_scale must be a number >= 0")
        _expect(
            isinstance(levels, str) and len(levels) == 2 * int(present.sum()),
            f"{where}.{name}_levels must be a byte in hex per present entry",
        )
        try:
            bytes.fromhex(levels)
        except ValueError:
            _expect(False, f"{where}.{name}_levels must be hexadecimal")
    return AnswerRead(
        raw["present"], float(raw["max_scale"]), raw["max_levels"], float(raw["mean_scale"]), raw["mean_levels"]
    )


def _members(raw: dict, where: str, n: int) -> tuple[list[str] | None, list[list[str]] | None]:
    """A cycle's per-layer (and per-head) sets: each a subset of ``kept``, together covering it."""
    layer_kept, head_kept = raw.get("layer_kept"), raw.get("head_kept")
    if layer_kept is None:
        _expect(head_kept is None, f"{where}.head_kept needs layer_kept")
        return None, None
    layers = [
        _bits(bits, f"{where}.layer_kept[{layer}]", n)
        for layer, bits in enumerate(_list(layer_kept, f"{where}.layer_kept"))
    ]
    covered = bool(layers) and bool(np.stack(layers).any(axis=0).all())
    _expect(covered, f"{where}.layer_kept must cover every kept entry")
    if head_kept is not None:
        heads = _list(head_kept, f"{where}.head_kept")
        _expect(len(heads) == len(layers), f"{where}.head_kept needs one list per layer")
        for layer, row in enumerate(heads):
            sets = [
                _bits(bits, f"{where}.head_kept[{layer}][{h}]", n)
                for h, bits in enumerate(_list(row, f"{where}.head_kept[{layer}]"))
            ]
            _expect(bool(sets) and len(sets) == len(heads[0]), f"{where}.head_kept[{layer}] needs one set per KV head")
            _expect(
                np.array_equal(np.stack(sets).any(axis=0), layers[layer]),
                f"{where}.head_kept[{layer}] must cover exactly layer_kept[{layer}]",
            )
    return layer_kept, head_kept
