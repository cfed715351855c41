"""The after-idle test (probe ``idle``, opt-in with ``--idle-test SECONDS``).

After the baseline, wait the given seconds without sending anything, then send the same
minimal "Say ok." request once and compare it with the warm median. Scale-to-zero, model
unloading (Ollama's keep_alive, llama.cpp's sleep), idle connection timeouts and CPU/GPU
power states all show up as an after-idle penalty.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmdoctor.measurements.timing import RequestTiming
from llmdoctor.probes.catalog import BASELINE, IDLE

if TYPE_CHECKING:
    from llmdoctor.context import Context

__all__ = ["IdleResult", "idle_test"]


@dataclass
class IdleResult:
    """One request after an idle wait, next to the warm baseline."""

    idle_s: float
    after_idle: RequestTiming
    warm_ttft_p50_ms: float | None = None
    warm_total_p50_ms: float | None = None

    @property
    def penalty_ms(self) -> float | None:
        """Extra latency of the after-idle request over the warm median (TTFT, else total)."""
        after = self.after_idle
        if after.ttft_ms is not None and self.warm_ttft_p50_ms is not None:
            return after.ttft_ms - self.warm_ttft_p50_ms
        if after.total_ms is not None and self.warm_total_p50_ms is not None:
            return after.total_ms - self.warm_total_p50_ms
        return None


def idle_test(ctx: Context) -> IdleResult:
    """Wait `options.request.idle_test_s`, send one minimal request, compare with the warm baseline."""
    from llmdoctor.context import ProbeUnavailable

    off = IDLE.off_reason(ctx.options)
    if off:
        raise ProbeUnavailable(off)
    return after_idle(ctx, float(ctx.options.request.idle_test_s))


def after_idle(ctx: Context, idle_s: float) -> IdleResult:
    """Wait `idle_s` seconds, send one minimal request, compare with the warm baseline (1 request).

    Within the run's deadline: a wait that would not leave time for its request before
    ``--deadline`` is not started (unavailable, "deadline reached").
    """
    from llmdoctor.context import ProbeUnavailable
    from llmdoctor.probes.baseline import BASELINE_MAX_TOKENS, SAY_OK

    base = ctx.get(BASELINE)
    left = ctx.time_left()
    request_s = max(1.0, 2 * (base.total_p50_ms or 0.0) / 1000)  # room for the request after the wait
    if left is not None and left < idle_s + request_s:
        raise ProbeUnavailable(f"deadline reached: the idle wait of {idle_s:g} s and its request do not fit in "
                               f"the {left:.1f} s left to --deadline {ctx.options.request.deadline_s:g} s")
    time.sleep(idle_s)
    after = ctx.client.chat(SAY_OK, max_tokens=BASELINE_MAX_TOKENS, stream=True, extra={"model": base.model})
    return IdleResult(
        idle_s=idle_s,
        after_idle=after,
        warm_ttft_p50_ms=base.ttft_p50_ms,
        warm_total_p50_ms=base.total_p50_ms,
    )
