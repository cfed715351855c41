"""Which phase of a request the server's own clock places a fixed cost in, and the cause that phase names.

The flat-latency fit (LD702) says *how much* every request pays whatever its length; the waterfall of
the typical request, joined with the server's clocks (`llmdoctor.analysis.waterfall`), says *where* that
time goes. When one phase by a server clock holds at least `EXPLAINS_SHARE` of the fixed cost, that
phase is its cause:

- ``queue`` (vLLM ``metrics.queue_time_ms``, TGI ``x-queue-time``, a queue histogram over our
  requests): requests wait for a slot — `Cause.QUEUEING`;
- ``prefill`` (vLLM ``metrics.time_to_first_token_ms``, llama.cpp ``prompt_ms``, a prefill histogram
  over our requests): fixed work in the server's prompt processing of even a tiny prompt —
  `Cause.SERVER_FLOOR`;
- time *in front of the model server* (the client's wait less the server's own time to first token):
  a gateway, balancer, auth or distance — `Cause.GATEWAY_OVERHEAD`.

A clock averaged over other clients' requests (shared traffic) places nothing: it is not ours.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmdoctor.analysis.waterfall import IN_FRONT, Clock, Joined
from llmdoctor.causes import EXPLAINS_SHARE, Cause

__all__ = ["FloorPhase", "floor_phase"]

_CAUSES = {"queue": Cause.QUEUEING, "prefill": Cause.SERVER_FLOOR, IN_FRONT: Cause.GATEWAY_OVERHEAD}
_SERVER = (Clock.SERVER_HEADER, Clock.SERVER_BODY, Clock.SERVER_METRICS, Clock.INFERRED)


@dataclass(frozen=True)
class FloorPhase:
    """The phase holding a fixed cost by the server's clock, in the typical request."""

    phase: str
    ms: float
    total_ms: float
    source: str
    cause: Cause

    @property
    def phase_words(self) -> str:
        """``in prefill``, ``in the queue``, ``in front of the model server``."""
        return {"prefill": "in prefill", "queue": "in the queue"}.get(self.phase, "in front of the model server")

    @property
    def words(self) -> str:
        """``356 of 392 ms is prefill`` (the typical request)."""
        name = "in front of the model server" if self.phase == IN_FRONT else self.phase
        verb = "is spent" if self.phase == IN_FRONT else "is"
        return f"{self.ms:,.0f} of the typical request's {self.total_ms:,.0f} ms {verb} {name}"


def floor_phase(joined: Joined, fixed_ms: float) -> FloorPhase | None:
    """The phase of `joined` that a server clock says holds at least `EXPLAINS_SHARE` of `fixed_ms`, or None."""
    if fixed_ms <= 0 or joined.in_front_ms is None:
        return None
    candidates = [p for p in joined.phases if p.name in _CAUSES and p.clock in _SERVER and p.source
                  and "shared traffic" not in p.source]
    if not candidates:
        return None
    best = max(candidates, key=lambda p: p.ms)
    if best.ms < EXPLAINS_SHARE * fixed_ms:
        return None
    return FloorPhase(best.name, best.ms, joined.total_ms, best.source, _CAUSES[best.name])
