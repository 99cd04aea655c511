from dataclasses import dataclass

import torch

from ..cache import CacheState, Candidates
from ..capture import Capture
from ..fields import flag, number, whole
from ..models import layer_windows, within_window
from .base import Policy
from .layerwise import LayerRows, attention_scale, layer_rows, on_candidates, prerope_queries, rope, rotated

_COUNT, _SUM, _OUTER = (f"expected_attention:{name}" for name in ("count", "sum", "outer"))  # state.totals


@dataclass
class ExpectedAttention(Policy):
    """Expected attention (kvpress's ExpectedAttentionPress): the attention future queries are expected to
    pay each key, from the statistics of recent queries, times the value's norm.

    Why: it asks what the *next* queries will read without seeing them. Per layer and query head the
    recent queries (before RoPE, ``[heads, w, d]``) give a mean mu and covariance Sigma; both are turned
    by the RoPE rotation averaged over the next ``n_future_positions`` positions (R = mean_t R_t, from the
    position after the last processed one; kvpress starts at the prefill's length, the same place). For
    q ~ N(R mu, R Sigma R^T), E[exp(s q.k)] = exp(s k.R mu + s^2 k^T R Sigma R^T k / 2) (s: the attention
    scale, 1/sqrt(d)), so each cached key ``[kv_heads, rows, d]`` (as cached, after RoPE) gets that logit
    (the second term only with ``use_covariance``), softmaxed over the layer's keys, averaged over its
    group of query heads, then ``(p + epsilon) * ||v||`` with ``use_vnorm``. The first ``n_sink`` rows of
    each layer are left out of the softmax and score the layer's largest score + 1, as in kvpress (they are
    attention sinks), and their queries are left out of the statistics.

    The queries are those of every token the run has processed, evicted ones included (``history``, the
    default), as kvpress's are of a whole prefill: :meth:`observe` adds each pass's new queries to running
    sums (float64, ``[layers, heads, d]`` and ``[layers, heads, d, d]``, in ``state.totals``). With
    ``history=false`` (the former default: it answered fewer retention cases, docs/policies.md#query-agnostic-baselines)
    they are those of the newest ``window`` cached entries (kvpress's decoding buffer holds up to
    256). Either way they are formed from each layer's input H^(l) (``residual_layers``: every layer, one
    row per cached entry, so this policy stores L x d_model floats per entry next to the K/V, more than the
    K/V bytes on SmolLM2; the running sums need only each pass's new rows).

    kvpress ranks each layer's heads separately; one decision for every layer and head (``uniform``) takes
    each candidate's mean over layers and KV heads; under a per-layer allocation the scores are
    ``[candidates, layers, kv_heads]``.
    """

    name = "expected_attention"
    title = "Expected attention"
    summary = "Expected attention: attention future queries are expected to pay, from recent query statistics"
    signal = "expected_attention"
    head_scores = True

    n_future_positions: int = whole("n_future_positions", 1, default=512)
    n_sink: int = whole("n_sink", 0, default=4)
    use_covariance: bool = flag("use_covariance", default=True)
    use_vnorm: bool = flag("use_vnorm", default=True)
    epsilon: float = number("epsilon", 0, default=0.0)
    window: int = whole("window", 1, default=256)
    history: bool = flag("history", default=True)

    def residual_layers(self, num_layers: int) -> tuple[int, ...]:
        return tuple(range(num_layers))

    def keeps_pass_state(self) -> bool:
        return self.history

    def observe(self, model: torch.nn.Module, state: CacheState, capture: Capture) -> None:
        """With ``history``: add the queries of the entries this pass appended (those at cache rows of at
        least ``n_sink``: the sinks' queries are left out, as from the window) to the run's sums."""
        if not self.history:
            return
        added = next(iter(capture.residuals.values())).shape[0]
        skip = max(0, self.n_sink - (len(state) - added))  # the new rows that are sinks
        if skip >= added:  # a pass of sinks only (a short first chunk): no query to count
            return
        queries = torch.stack(
            [prerope_queries(model, layer, rows[skip:]).double() for layer, rows in sorted(capture.residuals.items())]
        )  # [layers, heads, m, d]
        sums = {
            _COUNT: torch.tensor(float(queries.shape[2]), dtype=torch.float64),
            _SUM: queries.sum(dim=2).cpu(),
            _OUTER: (queries.transpose(2, 3) @ queries).cpu(),
        }
        for name, value in sums.items():
            state.totals[name] = value + state.totals[name] if name in state.totals else value

    def score_candidates(self, model: torch.nn.Module, candidates: Candidates) -> torch.Tensor:
        cache = candidates.cache
        views = layer_rows(cache)
        start = int(cache.pos[-1]) + 1  # the next position: the future starts here
        future = torch.arange(start, start + self.n_future_positions)
        windows = layer_windows(model.config) or (None,) * len(views)
        scale = attention_scale(model)
        scores = []
        for layer, view in enumerate(views):
            cos, sin = rope(model, future, view.keys, layer)
            turn = rotated(torch.eye(view.keys.shape[-1], device=view.keys.device), cos.mean(dim=0), sin.mean(dim=0))
            # a local layer's next query reads only the keys within its window (R^T above is per layer too)
            near = within_window(torch.tensor(start), cache.pos[view.entries.cpu()], windows[layer])
            statistics = self._statistics(model, layer, cache)
            scores.append(self._layer(view, statistics, turn, scale, near.to(view.keys.device)))
        return on_candidates(candidates, views, scores, "mean")

    def _statistics(
        self, model: torch.nn.Module, layer: int, cache: CacheState
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Layer ``layer``'s query mean ``[heads, d]`` and covariance ``[heads, d, d]`` (float32, before RoPE):
        of the newest ``window`` cached entries, or with ``history`` of every token processed; None when
        there are no queries (nothing but sinks)."""
        if self.history:
            count = cache.totals.get(_COUNT)
            if count is None or float(count) == 0:
                return None
            mean = cache.totals[_SUM][layer] / count
            outer = cache.totals[_OUTER][layer] / count
            device = cache.residuals[layer].device
            return mean.float().to(device), (outer - mean[:, :, None] * mean[:, None, :]).float().to(device)
        entries = len(cache)
        queried = torch.arange(min(max(self.n_sink, entries - self.window), entries), entries)  # the "recent" ones
        hidden = cache.residuals[layer][queried.to(cache.residuals[layer].device)]
        if hidden.shape[0] == 0:
            return None
        queries = prerope_queries(model, layer, hidden)  # [heads, w, d]
        mean = queries.mean(dim=1)
        centred = queries - mean[:, None]
        return mean, centred.transpose(1, 2) @ centred / queries.shape[1]

    def _layer(
        self,
        view: LayerRows,
        statistics: tuple[torch.Tensor, torch.Tensor] | None,
        turn: torch.Tensor,
        scale: float,
        near: torch.Tensor,
    ) -> torch.Tensor:
        """One layer's scores ``[kv_heads, rows]`` from its query ``statistics`` (:meth:`_statistics`);
        ``near`` bool ``[rows]``: the rows within the layer's window of the next position."""
        kv_heads, rows, d = view.keys.shape
        sink = torch.arange(rows, device=view.keys.device) < self.n_sink
        if statistics is None or bool(sink.all()):  # nothing but sinks
            return view.keys.new_ones(kv_heads, rows)
        mean, covariance = statistics  # [heads, d], [heads, d, d]
        groups = mean.shape[0] // kv_heads
        logits = torch.einsum("krd,kgd->kgr", view.keys, (mean @ turn).view(kv_heads, groups, d)) * scale
        if self.use_covariance:
            covariance = turn.T @ covariance @ turn  # [heads, d, d]
            spread = torch.einsum("krd,kgde,kre->kgr", view.keys, covariance.view(kv_heads, groups, d, d), view.keys)
            logits = logits + spread * scale**2 / 2
        visible = view.seen & ~sink & near  # [kv_heads, rows]
        expected = torch.softmax(logits.masked_fill(~visible[:, None], float("-inf")), dim=-1)
        expected = expected.nan_to_num(0.0).mean(dim=1)  # a head that sees no key beyond the sinks: zeros
        if self.use_vnorm:
            expected = (expected + self.epsilon) * view.values.norm(dim=-1)
        expected[:, sink] = torch.where(visible, expected, 0.0).max() + 1  # scores are >= 0: the largest seen one
        return expected
