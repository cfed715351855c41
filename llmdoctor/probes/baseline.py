"""The baseline probes: the first request, the "Say ok." floor, the output-length sweep.

These are the article's measurement recipe: warm up, repeat a minimal request
to find the floor the endpoint cannot go below, then vary only the output
length so total ≈ fixed + per_token × tokens separates the fixed cost from
the per-token cost.
"""

from __future__ import annotations

import time

from llmdoctor.context import Context, ProbeUnavailable
from llmdoctor.measurements.latency_samples import (
    BaselineResult,
    SweepPoint,
    SweepResult,
    describe_failure,
    failures_line,
)
from llmdoctor.measurements.stats import LinearFit, robust_fit
from llmdoctor.measurements.timing import RequestTiming
from llmdoctor.probes.catalog import BASELINE, DISCOVERY, FIRST_REQUEST
from llmdoctor.probes.client import parse_retry_after
from llmdoctor.probes.discovery import EndpointInfo

__all__ = ["SAY_OK", "SWEEP_PROMPT", "first_request", "baseline", "sweep"]

SAY_OK = [{"role": "user", "content": "Say ok."}]
BASELINE_MAX_TOKENS = 8
SWEEP_PROMPT = [
    {"role": "user", "content": "Count from 1 to 1000, one number per line. Do not stop early."}
]
# Statuses after which sending more requests would only add load or noise.
_STOP_STATUSES = {401, 403, 404}
# Refusals (rate limits, a busy or limiting front): a limit that lets every other request through still
# gives samples, so after a refusal the probes pause (Retry-After, else PAUSE_S; at most MAX_PAUSE_S,
# MAX_PAUSES times) and stop only when refused this many times in a row.
_REFUSALS = {429, 503}
MAX_REFUSALS_IN_A_ROW = 2
PAUSE_S = 1.0
MAX_PAUSE_S = 2.0
MAX_PAUSES = 3


class _Refusals:
    """Counts refusals in a row and pauses after one; `stop` says when a probe should stop sending."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.in_a_row = 0
        self.pauses = MAX_PAUSES

    def stop(self, timing: RequestTiming) -> bool:
        if timing.status in _STOP_STATUSES:
            return True
        if timing.status not in _REFUSALS:
            self.in_a_row = 0
            return False
        self.in_a_row += 1
        if self.in_a_row >= MAX_REFUSALS_IN_A_ROW or self.pauses <= 0:
            return True
        asked = parse_retry_after(timing.response_headers.get("retry-after"))
        wait = min(PAUSE_S if asked is None else asked, MAX_PAUSE_S)
        left = self.ctx.time_left()
        if left is not None and wait + 1.0 > left:
            return True
        self.pauses -= 1
        time.sleep(wait)
        return False


def _model(ctx: Context) -> EndpointInfo:
    info = ctx.get(DISCOVERY)
    if not info.reachable:
        raise ProbeUnavailable(f"endpoint not reachable: {describe_failure(info.models_timing)}")
    if info.models_timing.status in (401, 403):
        raise ProbeUnavailable(f"authentication failed: {describe_failure(info.models_timing)}")
    if info.model is None:
        raise ProbeUnavailable("no model to probe: /v1/models listed none; pass --model")
    if info.model_served is False:
        raise ProbeUnavailable(f"model {info.model!r} is not served by the endpoint")
    return info


def _say_ok(ctx: Context, model: str) -> RequestTiming:
    return ctx.client.chat(SAY_OK, max_tokens=BASELINE_MAX_TOKENS, stream=True, extra={"model": model})


def first_request(ctx: Context) -> RequestTiming:
    """The first generation request of the run (cold-start evidence)."""
    info = _model(ctx)
    assert info.model is not None
    return _say_ok(ctx, info.model)


def baseline(ctx: Context) -> BaselineResult:
    """Warm up, then send `options.request.samples` minimal requests."""
    first = ctx.get(FIRST_REQUEST)
    if not first.ok:
        raise ProbeUnavailable(f"the first generation request failed: {describe_failure(first)}")
    info = _model(ctx)
    assert info.model is not None
    result = BaselineResult(model=info.model, max_tokens=BASELINE_MAX_TOKENS, warmup=[first],
                            asked=ctx.options.request.samples)
    for _ in range(max(0, ctx.options.request.warmup - 1)):
        result.warmup.append(_say_ok(ctx, info.model))
    refusals = _Refusals(ctx)
    for _ in range(ctx.options.request.samples):
        timing = _say_ok(ctx, info.model)
        result.samples.append(timing)
        if refusals.stop(timing):
            break  # refused again and again, or not allowed at all: stop rather than hammer
    if not result.ok_samples:
        failure = describe_failure(result.samples[-1]) if result.samples else "no samples requested"
        counted = failures_line(result.samples)
        raise ProbeUnavailable(f"no baseline request succeeded ({counted}): {failure}" if counted
                               else f"no baseline request succeeded: {failure}")
    return result


def _rejects_ignore_eos(timing: RequestTiming) -> bool:
    detail = timing.error_detail
    return timing.status in (400, 422) and ("ignore_eos" in detail or "min_tokens" in detail)


def _force_length(extra: dict[str, object], max_tokens: int) -> None:
    """Ask for exactly `max_tokens`: ``ignore_eos`` (vLLM, SGLang, TGI) and ``min_tokens``.

    llama.cpp's servers accept ``ignore_eos`` silently and do nothing with it (llama-cpp-python
    0.3.36, recorded in fixtures/llamacpp/README.md) but honour ``min_tokens``; vLLM and SGLang
    honour both.
    """
    extra["ignore_eos"] = True
    extra["min_tokens"] = max_tokens


def sweep(ctx: Context) -> SweepResult:
    """Vary max_tokens (interleaved repeats, so drift hits every length alike) and fit a line."""
    base = ctx.get(BASELINE)
    policy = ctx.options.request
    result = SweepResult(asked=policy.sweep_repeats * len(policy.sweep_max_tokens))
    refusals = _Refusals(ctx)
    for _ in range(ctx.options.request.sweep_repeats):
        for max_tokens in ctx.options.request.sweep_max_tokens:
            extra = {"model": base.model, "temperature": 0}
            if result.ignore_eos:
                _force_length(extra, max_tokens)
            timing = ctx.client.chat(SWEEP_PROMPT, max_tokens=max_tokens, stream=True, extra=extra)
            if result.ignore_eos and _rejects_ignore_eos(timing):
                result.ignore_eos = False
                extra.pop("ignore_eos")
                extra.pop("min_tokens")
                timing = ctx.client.chat(SWEEP_PROMPT, max_tokens=max_tokens, stream=True, extra=extra)
            result.points.append(SweepPoint(max_tokens, timing))
            if refusals.stop(timing):
                result.fit = _fit(result)
                return result
    result.fit = _fit(result)
    return result


def _fit(result: SweepResult) -> LinearFit | None:
    ok = result.ok_points
    return robust_fit([p.timing.output_tokens for p in ok], [p.timing.total_ms or 0.0 for p in ok])
