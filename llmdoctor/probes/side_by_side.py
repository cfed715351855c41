"""The side-by-side probe: the same minimal requests to two endpoints, interleaved A, B, A, B …

It runs in endpoint A's context (``ctx``) and measures endpoint B through B's own context
(``ctx.beside``), entered with `Context.measuring_as`: B's reads are held to this probe's
declaration, and B's requests are stamped with its name, counted against B's budget and held
to its plan (per endpoint: the warm-up and the samples) just as A's are. Each side first
discovers its model and warms up; then the samples alternate, so drift over time (load,
thermal state, the network) hits both alike. It never raises for endpoint trouble: a side
that cannot be measured carries its error, and Ctrl-C ends it with what it has.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llmdoctor.measurements.latency_samples import describe_failure
from llmdoctor.measurements.timing import RequestTiming
from llmdoctor.probes.baseline import BASELINE_MAX_TOKENS, SAY_OK
from llmdoctor.probes.catalog import DISCOVERY, SIDE_BY_SIDE
from llmdoctor.probes.errors import PlanExceeded

if TYPE_CHECKING:
    from llmdoctor.context import Context

__all__ = ["Interleaved", "Side", "side_by_side"]


@dataclass
class Side:
    """One endpoint's samples (warm-up excluded)."""

    label: str
    endpoint: str
    model: str | None = None
    samples: list[RequestTiming] = field(default_factory=list)
    error: str = ""
    requests_sent: int = 0
    #: The requests each probe sent to this endpoint (discovery, side_by_side), retries aside.
    requests_by_probe: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> list[RequestTiming]:
        """Samples that completed."""
        return [s for s in self.samples if s.ok and s.total_ms is not None]


@dataclass
class Interleaved:
    """Both sides' samples, sent A, B, A, B …"""

    a: Side
    b: Side


def _warm_up(side: Side, ctx: Context) -> None:
    """Discover the side's model and send its warm-up requests; the side's error when it cannot."""
    from llmdoctor.context import ProbeUnavailable

    try:
        info = ctx.get(DISCOVERY)
        if not info.reachable or info.model is None:
            raise ProbeUnavailable(f"not usable: {describe_failure(info.models_timing)}"
                                   if not info.reachable else "no model; pass --model")
        side.model = info.model
        for _ in range(max(1, ctx.options.request.warmup)):
            ctx.client.chat(SAY_OK, max_tokens=BASELINE_MAX_TOKENS, extra={"model": info.model})
    except ProbeUnavailable as exc:
        side.error = exc.reason
    except PlanExceeded:
        raise  # strict mode: sending beyond the declared plan is a bug, never the endpoint's
    except Exception as exc:  # noqa: BLE001 - report, never crash
        side.error = f"{type(exc).__name__}: {exc}"


def side_by_side(ctx: Context) -> Interleaved:
    """Discover both endpoints, warm each up, then alternate single "Say ok." requests A, B, A, B …"""
    from llmdoctor.context import ProbeUnavailable

    other = ctx.beside
    if ctx.target is None or other is None or other.target is None:
        raise ProbeUnavailable("side by side needs two endpoints (llmdoctor compare)")
    sides = [Side("A", ctx.target.base_url), Side("B", other.target.base_url)]
    ctxs = [ctx, other]
    with other.measuring_as(SIDE_BY_SIDE):
        try:
            for side, sent_by in zip(sides, ctxs):
                _warm_up(side, sent_by)
            if not any(s.error for s in sides):
                for _ in range(ctx.options.request.samples):
                    for side, sent_by in zip(sides, ctxs):
                        try:
                            side.samples.append(sent_by.client.chat(SAY_OK, max_tokens=BASELINE_MAX_TOKENS,
                                                                    extra={"model": side.model}))
                        except PlanExceeded:
                            raise
                        except Exception as exc:  # noqa: BLE001 - budget or deadline: stop both sides
                            side.error = f"{type(exc).__name__}: {exc}"
                    if any(s.error for s in sides):
                        break
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the comparison is incomplete, say so (exit 3)
            for side in sides:
                side.error = side.error or f"interrupted (Ctrl-C) after {len(side.samples)} samples"
    return Interleaved(sides[0], sides[1])
