"""Side by side: the same probes against two endpoints, interleaved, compared phase by phase.

The article's isolation test: run the production endpoint and the same model
in a clean environment (or two backends) with identical minimal requests,
alternating A, B, A, B … so that drift over time (load, thermal state, the
network) hits both alike. Every phase of the waterfall, time to first token
and total are then compared with the same noise-aware test as baselines
(`llmdoctor.regress`): a difference counts only when the rank test and the
bootstrap interval both say so, and it is larger than the minimum effect. Its output, text or
JSON, is `llmdoctor.render.compare`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from llmdoctor.breakdown import waterfall
from llmdoctor.options import Options
from llmdoctor.probes.baseline import BASELINE_MAX_TOKENS, SAY_OK, describe_failure
from llmdoctor.probes.timing import RequestTiming
from llmdoctor.regress import Comparison, compare_samples
from llmdoctor.target import Target

__all__ = ["SideBySide", "Side", "run_side_by_side"]


@dataclass
class Side:
    """One endpoint's samples (warm-up excluded)."""

    label: str
    endpoint: str
    model: str | None = None
    samples: list[RequestTiming] = field(default_factory=list)
    error: str = ""
    requests_sent: int = 0

    @property
    def ok(self) -> list[RequestTiming]:
        """Samples that completed."""
        return [s for s in self.samples if s.ok and s.total_ms is not None]


@dataclass
class SideBySide:
    """Both sides and the per-metric comparisons (B relative to A)."""

    a: Side
    b: Side
    comparisons: list[Comparison] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0: no significant difference; 1: a significant difference; 3: could not measure."""
        if self.a.error or self.b.error:
            return 3
        return 1 if any(c.significant for c in self.comparisons) else 0


def _phase_samples(side: Side) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"ttft": [], "total": []}
    for t in side.ok:
        if t.ttft_ms is not None:
            out["ttft"].append(t.ttft_ms)
        out["total"].append(t.total_ms or 0.0)
        for p in waterfall(t):
            out.setdefault(p.name, []).append(p.ms)
    return out


def run_side_by_side(
    targets: Sequence[Target], options: Options, *, min_rel: float = 0.10, min_abs_ms: float = 5.0
) -> SideBySide:
    """Discover both endpoints, warm each up, then alternate single "Say ok." requests A, B, A, B …

    Ctrl-C stops it with what it has: both sides marked interrupted, no comparison (exit 3).
    """
    from llmdoctor.context import Context, ProbeUnavailable
    from llmdoctor.probes.catalog import DISCOVERY

    sides = [Side(label, t.base_url) for label, t in zip("AB", targets)]
    ctxs = [Context(target=t, options=options) for t in targets]
    try:
        models: list[str | None] = []
        for side, ctx in zip(sides, ctxs):
            try:
                info = ctx.get(DISCOVERY)
                if not info.reachable or info.model is None:
                    raise ProbeUnavailable(f"not usable: {describe_failure(info.models_timing)}"
                                           if not info.reachable else "no model; pass --model")
                side.model = info.model
                for _ in range(max(1, options.request.warmup)):
                    ctx.client.chat(SAY_OK, max_tokens=BASELINE_MAX_TOKENS, extra={"model": info.model})
            except ProbeUnavailable as exc:
                side.error = exc.reason
            except Exception as exc:  # noqa: BLE001 - report, never crash
                side.error = f"{type(exc).__name__}: {exc}"
            models.append(side.model)
        if not any(s.error for s in sides):
            for _ in range(options.request.samples):
                for side, ctx in zip(sides, ctxs):
                    try:
                        side.samples.append(ctx.client.chat(SAY_OK, max_tokens=BASELINE_MAX_TOKENS,
                                                            extra={"model": side.model}))
                    except Exception as exc:  # noqa: BLE001 - budget or deadline: stop both sides
                        side.error = f"{type(exc).__name__}: {exc}"
                if any(s.error for s in sides):
                    break
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the comparison is incomplete, say so (exit 3)
        for side in sides:
            side.error = side.error or f"interrupted (Ctrl-C) after {len(side.samples)} samples"
    finally:
        for side, ctx in zip(sides, ctxs):
            side.requests_sent = ctx.requests_sent
            ctx.close()
    result = SideBySide(sides[0], sides[1])
    if not any(s.error for s in sides):
        pa, pb = _phase_samples(sides[0]), _phase_samples(sides[1])
        for metric in ("ttft", "total", *[k for k in pa if k not in ("ttft", "total")]):
            if metric in pb:
                result.comparisons.append(compare_samples(metric, pa[metric], pb[metric], min_rel=min_rel,
                                                          min_abs_ms=min_abs_ms))
    return result
