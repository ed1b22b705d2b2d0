"""generate() calls: tokens, time to first token, per-token latency.

The agent sends one ``generation`` event per Hugging Face ``generate()`` call
whose forward was compiled (ctmon/agent/generation.py). Its decode calls are
step boundaries ``i0 .. i1`` of one step series, so a token's latency is the
step interval that ends at a decode boundary after the first: read from the
series when asked, device-timed where CUDA events resolved it, and so never
copied or stale. Intervals that paid for a compile are left out: the
latency is the steady one, and the compile findings account for the rest.
The prefill's token is counted (``decode_calls + 1`` new
tokens per sequence) but has no interval of its own: the time to it is
``ttft_ms``.

A call the agent saw run no compiled graph at all (``eager``) is kept apart:
the finding ctmon/findings/generate_eager.py speaks of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ctmon.store.step_sources import StepSources
from ctmon.store.step_stats import percentile
from ctmon.wire import events as E


@dataclass(frozen=True, slots=True)
class GenerationStats:
    calls: int  # generate() calls seen
    tokens: int  # new tokens per sequence, summed over calls
    prefill_compiled: bool  # the prefill ran through the compiled forward
    ttft_ms: float | None  # median over the calls whose start is known
    ttft_max_ms: float | None
    token_p50_ms: float | None
    token_p90_ms: float | None
    token_samples: int  # decode intervals the latencies come from


EAGER_KEPT = 1000  # eager generate() calls kept (the finding names a few; the count is all)


class GenerationState:
    def __init__(self) -> None:
        self.calls: list[E.Generation] = []
        # generate() calls that ran no compiled graph while the job had some
        # (``eager`` events): kept apart, they have no tokens or steps of their own
        self.eager: list[E.Generation] = []
        self.eager_count = 0
        self.eager_seen_ms = 0.0  # summed over all of them
        self._cache: tuple[tuple[int, ...], GenerationStats] | None = None

    def on_generation(self, ev: E.Generation) -> bool:
        if ev.eager:
            return self._on_eager(ev)
        if ev.decode_calls < 0 or ev.prefill_calls < 0 or ev.decode_calls + ev.prefill_calls == 0:
            return False
        self.calls.append(ev)
        return True

    def _on_eager(self, ev: E.Generation) -> bool:
        if ev.seen_ms is None or ev.seen_ms < 0:
            return False
        self.eager_count += 1
        self.eager_seen_ms += ev.seen_ms
        if len(self.eager) < EAGER_KEPT:
            self.eager.append(ev)
        return True

    def __len__(self) -> int:
        return len(self.calls)

    def stats(
        self, steps: StepSources, compile_spans: Sequence[tuple[float, float]] = (), last: int | None = None
    ) -> GenerationStats | None:
        """Over all calls, or the ``last`` ones (a live view's recent window);
        ``compile_spans``: (start, end) of every compile, whose steps are left out."""
        if not self.calls:
            return None
        calls = self.calls if last is None else self.calls[-last:]
        series = steps.series.get(calls[0].src)
        key = (
            len(self.calls),
            last or 0,
            len(series) if series else 0,
            series.device_windows if series else 0,
            len(compile_spans),
        )
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        token_ms: list[float] = []
        marked = series.compile_marked(list(compile_spans)) if series is not None and compile_spans else set()
        for ev in calls:
            if series is None or ev.src != series.source or ev.i0 < 0 or ev.i1 <= ev.i0:
                continue
            # the interval ending at decode boundary k: token k-1's forward and sampling
            a, b = ev.i0 + 1, ev.i1 + 1
            if marked and any(k in marked for k in range(a, b)):
                token_ms.extend(v for k in range(a, b) if k not in marked for v in series.known_intervals(k, k + 1))
            else:
                token_ms.extend(series.known_intervals(a, b))
        token_ms.sort()
        ttfts = sorted(ev.ttft_ms for ev in calls if ev.ttft_ms is not None)
        st = GenerationStats(
            calls=len(calls),
            tokens=sum(ev.decode_calls + 1 for ev in calls),
            prefill_compiled=any(ev.prefill_calls for ev in calls),
            ttft_ms=percentile(ttfts, 0.5),
            ttft_max_ms=ttfts[-1] if ttfts else None,
            token_p50_ms=percentile(token_ms, 0.5),
            token_p90_ms=percentile(token_ms, 0.9),
            token_samples=len(token_ms),
        )
        self._cache = (key, st)
        return st
