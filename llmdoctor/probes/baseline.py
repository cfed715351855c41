"""The baseline probes: the first request, the "Say ok." floor, the output-length sweep.

These are the article's measurement recipe: warm up, repeat a minimal request
to find the floor the endpoint cannot go below, then vary only the output
length so total ≈ fixed + per_token × tokens separates the fixed cost from
the per-token cost.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from llmdoctor.context import Context, ProbeUnavailable
from llmdoctor.probes.catalog import BASELINE, DISCOVERY, FIRST_REQUEST
from llmdoctor.probes.client import parse_retry_after
from llmdoctor.probes.discovery import EndpointInfo
from llmdoctor.probes.timing import ErrorKind, RequestTiming
from llmdoctor.stats import LinearFit, Split, percentile, robust_fit, two_clusters

__all__ = [
    "SAY_OK",
    "SWEEP_PROMPT",
    "BaselineResult",
    "SweepPoint",
    "SweepResult",
    "describe_failure",
    "failures_line",
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


def failures_line(timings: list[RequestTiming]) -> str:
    """What failed among `timings`, counted by outcome: ``"2 × HTTP 429, 1 × read timeout"`` ("" if none)."""
    counts: dict[str, int] = {}
    for t in timings:
        if not t.ok:
            label = f"HTTP {t.status}" if t.status is not None else (t.error or "error").replace("_", " ")
            counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{n} × {label}" for label, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


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
    #: Samples asked for (``--samples``); 0 in recordings made before it was kept.
    asked: int = 0

    @property
    def ok_samples(self) -> list[RequestTiming]:
        """Samples that completed successfully."""
        return [s for s in self.samples if s.ok]

    @property
    def samples_asked(self) -> int:
        """How many samples were asked for (the samples sent, for old recordings)."""
        return self.asked or len(self.samples)

    @property
    def short(self) -> bool:
        """Fewer successful samples than asked: statistics on them say so and are trusted less."""
        return len(self.ok_samples) < self.samples_asked

    @property
    def warm(self) -> list[RequestTiming]:
        """Every successful warm request (warm-up after the first, then the samples), in the order sent."""
        return [t for t in (*self.warmup[1:], *self.samples) if t.ok and t.total_ms is not None]

    def mixed(self) -> Split | None:
        """Two populations among the warm requests' totals (one slow replica), or None."""
        return two_clusters([t.total_ms or 0.0 for t in self.warm])

    def alternating(self, split: Split) -> bool:
        """Slow and fast warm requests take turns (round-robin over two replicas): never two of a kind in a row."""
        order = [split.is_slow(t.total_ms or 0.0) for t in sorted(self.warm, key=lambda t: t.started_at)]
        return len(order) >= 4 and all(a != b for a, b in zip(order, order[1:]))

    def samples_note(self) -> str:
        """``"5 samples"``, or ``"2 of 5 samples asked (3 × HTTP 429)"`` when some failed or were not sent."""
        got, asked = len(self.ok_samples), self.samples_asked
        if got >= asked:
            return f"{got} sample{'' if got == 1 else 's'}"
        failed = failures_line(self.samples)
        return f"{got} of {asked} samples asked" + (f" ({failed})" if failed else "")

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
    #: Requests asked for (repeats × lengths); 0 in recordings made before it was kept.
    asked: int = 0

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

    @property
    def short(self) -> bool:
        """Fewer successful requests than asked."""
        return len(self.ok_points) < (self.asked or len(self.points))

    def samples_note(self) -> str:
        """``"6 requests"``, or ``"3 of 6 requests asked (3 × HTTP 429)"``."""
        got, asked = len(self.ok_points), self.asked or len(self.points)
        if got >= asked:
            return f"{got} requests"
        failed = failures_line([p.timing for p in self.points])
        return f"{got} of {asked} requests asked" + (f" ({failed})" if failed else "")

    def residuals(self) -> list[float]:
        """Each successful request's total minus the fit's line (in the order sent); empty without a fit."""
        if self.fit is None:
            return []
        fit = self.fit
        return [(p.timing.total_ms or 0.0) - fit.predict(p.timing.output_tokens) for p in self.ok_points]

    def mixed(self) -> Split | None:
        """Two populations among the residuals of the fit (some requests far above the line), or None."""
        return two_clusters(self.residuals(), min_ratio=None)

    def not_separable_reason(self) -> str:
        """Why fixed and per-token cost cannot be told apart: the true reason, from what happened.

        Too few requests succeeded (failures, a budget or deadline cut the sweep short), or they did
        succeed at several lengths and the server still generated the same number of tokens.
        """
        ok = self.ok_points
        asked_lengths = {p.max_tokens for p in self.points}
        ok_lengths = {p.max_tokens for p in ok}
        if len(ok_lengths) < 2:
            failed = failures_line([p.timing for p in self.points])
            what = f"only {len(ok)} of {self.asked or len(self.points)} sweep requests succeeded"
            if failed:
                what += f" ({failed})"
            elif len(asked_lengths) < 2:
                what += " (the budget or deadline stopped the sweep)"
            return f"{what}: too few output lengths to separate fixed and per-token cost"
        tokens = sorted({p.timing.output_tokens for p in ok})
        return (f"every sweep request generated {tokens[0]} tokens whatever max_tokens asked (the server "
                "ignores ignore_eos and min_tokens and stops early): fixed and per-token cost cannot be separated")


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
