"""The baseline probes: the first request, the "Say ok." floor, the output-length sweep.

These are the article's measurement recipe: warm up, repeat a minimal request
to find the floor the endpoint cannot go below, then vary only the output
length so total ≈ fixed + per_token × tokens separates the fixed cost from
the per-token cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmdoctor.context import Context, ProbeUnavailable
from llmdoctor.probes.catalog import BASELINE, DISCOVERY, FIRST_REQUEST
from llmdoctor.probes.discovery import EndpointInfo
from llmdoctor.probes.timing import ErrorKind, RequestTiming
from llmdoctor.stats import LinearFit, fit_line, percentile

__all__ = [
    "SAY_OK",
    "SWEEP_PROMPT",
    "BaselineResult",
    "SweepPoint",
    "SweepResult",
    "describe_failure",
    "first_request",
    "baseline",
    "sweep",
]

SAY_OK = [{"role": "user", "content": "Say ok."}]
BASELINE_MAX_TOKENS = 8
SWEEP_PROMPT = [
    {"role": "user", "content": "Count from 1 to 1000, one number per line. Do not stop early."}
]
# Statuses after which sending more requests would only add load or noise.
_STOP_STATUSES = {401, 403, 404, 429, 503}


def describe_failure(timing: RequestTiming) -> str:
    """One line saying how a request failed."""
    if timing.error == ErrorKind.HTTP_STATUS:
        head = f"HTTP {timing.status}"
        if timing.error_detail.startswith(head):
            return timing.error_detail  # the client already names the status ("HTTP 401: ...")
        detail = f": {timing.error_detail}" if timing.error_detail else ""
        return f"{head}{detail}"
    kind = (timing.error or "unknown error").replace("_", " ")
    detail = timing.error_detail
    if not detail or detail.lower().startswith(kind):
        return detail or kind
    return f"{kind}: {detail}"


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


@dataclass
class BaselineResult:
    """Warm-up and measured samples of the minimal "Say ok." request."""

    model: str
    max_tokens: int
    warmup: list[RequestTiming] = field(default_factory=list)
    samples: list[RequestTiming] = field(default_factory=list)

    @property
    def ok_samples(self) -> list[RequestTiming]:
        """Samples that completed successfully."""
        return [s for s in self.samples if s.ok]

    def _pct(self, attr: str, q: float) -> float | None:
        return percentile([getattr(s, attr) for s in self.ok_samples if getattr(s, attr) is not None], q)

    @property
    def ttft_p50_ms(self) -> float | None:
        """Median time to first token."""
        return self._pct("ttft_ms", 50)

    @property
    def ttft_p90_ms(self) -> float | None:
        """90th percentile time to first token."""
        return self._pct("ttft_ms", 90)

    @property
    def total_p50_ms(self) -> float | None:
        """Median total latency."""
        return self._pct("total_ms", 50)

    @property
    def total_p90_ms(self) -> float | None:
        """90th percentile total latency."""
        return self._pct("total_ms", 90)


def baseline(ctx: Context) -> BaselineResult:
    """Warm up, then send `options.request.samples` minimal requests."""
    first = ctx.get(FIRST_REQUEST)
    if not first.ok:
        raise ProbeUnavailable(f"the first generation request failed: {describe_failure(first)}")
    info = _model(ctx)
    assert info.model is not None
    result = BaselineResult(model=info.model, max_tokens=BASELINE_MAX_TOKENS, warmup=[first])
    for _ in range(max(0, ctx.options.request.warmup - 1)):
        result.warmup.append(_say_ok(ctx, info.model))
    for _ in range(ctx.options.request.samples):
        timing = _say_ok(ctx, info.model)
        result.samples.append(timing)
        if timing.status in _STOP_STATUSES:
            break  # rate limited or unavailable: stop rather than hammer
    if not result.ok_samples:
        failure = describe_failure(result.samples[-1]) if result.samples else "no samples requested"
        raise ProbeUnavailable(f"no baseline request succeeded: {failure}")
    return result


@dataclass
class SweepPoint:
    """One request of the output-length sweep."""

    max_tokens: int
    timing: RequestTiming


@dataclass
class SweepResult:
    """The output-length sweep and its fit total ≈ fixed + per_token × n."""

    points: list[SweepPoint] = field(default_factory=list)
    ignore_eos: bool = True
    fit: LinearFit | None = None

    @property
    def ok_points(self) -> list[SweepPoint]:
        """Points whose request completed."""
        return [p for p in self.points if p.timing.ok and p.timing.total_ms is not None]

    @property
    def distinct_lengths(self) -> int:
        """How many different output lengths were actually generated."""
        return len({p.timing.output_tokens for p in self.ok_points})

    @property
    def separable_fit(self) -> LinearFit | None:
        """The fit, when at least two output lengths make fixed and per-token cost separable."""
        return self.fit if self.fit is not None and self.distinct_lengths >= 2 else None


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
    result = SweepResult()
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
            if timing.status in _STOP_STATUSES:
                break
    ok = result.ok_points
    result.fit = fit_line([p.timing.output_tokens for p in ok], [p.timing.total_ms or 0.0 for p in ok])
    return result
