"""Follow-up probes the diagnosis planner orders (they never run unless it asks).

- ``followup_concurrency``: the bounded concurrency step (2 requests alone, then 2 at once),
  the ``concurrency`` probe run with a fixed, small N instead of the opt-in ``--concurrency``;
- ``followup_idle``: the after-idle test (``idle``) with a short wait chosen by the planner;
- ``lone_request``: backend metrics scraped around one lone "Say ok." request, so the server's
  own queue time and time to first token can be set against the client's; read from the
  checklist's own scrapes around the baseline instead (nothing sent) when they hold exactly the
  baseline's requests, each sent alone (`baseline_bracket`);
- ``repeat_prompt``: the same long prompt sent twice: a faster second answer means the server
  reuses the prompt's KV cache (prefix caching); its first send also prices prefill.

Every request goes through the probe client (timed, budgeted, redacted). The first two run
the existing probes' code with the planner's settings (`concurrency_step`, `after_idle`).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmdoctor.measurements.timing import RequestTiming
from llmdoctor.probes.catalog import BASELINE, SERVER_METRICS
from llmdoctor.probes.sizes import CONCURRENCY_N, DEFAULT_IDLE_S

if TYPE_CHECKING:
    from llmdoctor.context import Context
    from llmdoctor.measurements.server_metrics import Histogram
    from llmdoctor.probes.client_limits import ConcurrencyResult
    from llmdoctor.probes.idle import IdleResult

__all__ = [
    "CONCURRENCY_N",
    "DEFAULT_IDLE_S",
    "REPEAT_WORDS",
    "LoneRequestResult",
    "RepeatPromptResult",
    "followup_concurrency",
    "followup_idle",
    "baseline_bracket",
    "lone_request",
    "repeat_prompt",
]

#: Words of the repeated prompt (about 500 tokens; fewer when they would fill half a small window).
REPEAT_WORDS = 400


def followup_concurrency(ctx: Context) -> ConcurrencyResult:
    """The ``concurrency`` probe with N = `CONCURRENCY_N` (4 requests), whatever ``--concurrency`` says."""
    from llmdoctor.probes.client_limits import concurrency_step

    return concurrency_step(ctx, CONCURRENCY_N)


def followup_idle(ctx: Context) -> IdleResult:
    """The ``idle`` probe with ``--idle-test`` seconds, or `DEFAULT_IDLE_S` without it (1 request)."""
    from llmdoctor.probes.idle import after_idle

    return after_idle(ctx, ctx.options.request.idle_test_s or DEFAULT_IDLE_S)


@dataclass
class LoneRequestResult:
    """One "Say ok." request between two metrics scrapes: what the server saw of it."""

    backend: str
    request: RequestTiming
    requests_seen: float | None = None
    server_ttft_ms: float | None = None
    server_queue_ms: float | None = None
    waiting_before: float | None = None
    running_before: float | None = None
    #: Read from the scrapes around the baseline: how many of its requests (0: one lone request was sent).
    from_baseline: int = 0
    #: The client's mean time to first token over those requests (the server's figures are means too).
    client_mean_ttft_ms: float | None = None

    @property
    def client_ttft_ms(self) -> float | None:
        """Time to first token as the client saw it (the mean over the baseline's requests when read from them)."""
        return self.client_mean_ttft_ms if self.from_baseline else self.request.ttft_ms

    @property
    def outside_server_ms(self) -> float | None:
        """Client TTFT minus server TTFT: network, proxies, connection set-up."""
        if self.client_ttft_ms is None or self.server_ttft_ms is None:
            return None
        return max(0.0, self.client_ttft_ms - self.server_ttft_ms)


def _mean_delta_ms(before: Histogram | None, after: Histogram | None) -> tuple[float | None, float | None]:
    """(mean ms, count) of a histogram over the window; None where absent or reset."""
    if before is None or after is None or after.count <= before.count or after.sum < before.sum:
        return None, None
    count = after.count - before.count
    return (after.sum - before.sum) / count * 1000, count


def baseline_bracket(ctx: Context) -> LoneRequestResult | None:
    """The lone-request reading from the scrapes around the baseline, or None where they cannot serve.

    The baseline sends its requests one after the other, each alone, between the checklist's two
    scrapes: where the server's TTFT (or queue-time) histogram moved by exactly the number of those
    requests, every one of them succeeded and no counter was reset, the histograms hold our requests
    and nothing else, and their means say what one lone request would (from more requests).
    """
    metrics = ctx.optional(SERVER_METRICS)
    base = ctx.optional(BASELINE)
    if metrics is None or base is None or metrics.after is None or metrics.delta is None:
        return None
    window = [*base.warmup[1:], *base.samples]  # the first request ran before the first scrape
    if metrics.delta.counter_reset or not window or not all(t.ok and t.ttft_ms is not None for t in window):
        return None
    ttft_ms, seen = _mean_delta_ms(metrics.before.ttft, metrics.after.ttft)
    queue_ms, queued = _mean_delta_ms(metrics.before.queue_time, metrics.after.queue_time)
    counts = [c for c in (seen, queued) if c is not None]
    if not counts or any(c != len(window) for c in counts):
        return None  # other traffic (or requests the server did not record) moved the histograms
    client = sum(t.ttft_ms or 0.0 for t in window) / len(window)
    return LoneRequestResult(
        backend=metrics.after.backend, request=window[-1], requests_seen=counts[0], server_ttft_ms=ttft_ms,
        server_queue_ms=queue_ms, from_baseline=len(window), client_mean_ttft_ms=client)
    # No gauges before "ours": the first pass read that scrape's queue already (counted once).


def lone_request(ctx: Context) -> LoneRequestResult:
    """Scrape the backend's Prometheus metrics, send one minimal request, scrape again (3 requests).

    Nothing is sent where the scrapes around the baseline already serve (`baseline_bracket`).
    """
    from llmdoctor.context import ProbeUnavailable
    from llmdoctor.probes.baseline import BASELINE_MAX_TOKENS, SAY_OK
    from llmdoctor.probes.metrics import fetch_text, normalize

    metrics = ctx.optional(SERVER_METRICS)
    if metrics is None:
        raise ProbeUnavailable("no backend metrics to read around a request")
    if metrics.before.ttft is None and metrics.before.queue_time is None:
        raise ProbeUnavailable(f"{metrics.backend} exports no TTFT or queue-time histogram")
    reused = baseline_bracket(ctx)
    if reused is not None:
        return reused
    base = ctx.get(BASELINE)
    url = ctx.options.evidence.metrics_url or metrics.url or "/metrics"
    text = fetch_text(ctx, url)
    if text is None:
        raise ProbeUnavailable(f"GET {url} failed")
    before = normalize(text, url)
    timing = ctx.client.chat(SAY_OK, max_tokens=BASELINE_MAX_TOKENS, stream=True, extra={"model": base.model})
    # The server observes TTFT when it emits the first token; give the histogram a moment to settle.
    time.sleep(0.02)
    text = fetch_text(ctx, url)
    if text is None:
        raise ProbeUnavailable(f"second GET {url} failed")
    after = normalize(text, url)
    ttft_ms, seen = _mean_delta_ms(before.ttft, after.ttft)
    queue_ms, queued = _mean_delta_ms(before.queue_time, after.queue_time)
    return LoneRequestResult(
        backend=after.backend,
        request=timing,
        requests_seen=seen if seen is not None else queued,
        server_ttft_ms=ttft_ms,
        server_queue_ms=queue_ms,
        waiting_before=before.requests_waiting,
        running_before=before.requests_running,
    )


@dataclass
class RepeatPromptResult:
    """The same long prompt twice: time to first token of the first and of the repeat."""

    words: int
    first: RequestTiming
    second: RequestTiming

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens (server usage, else 1.3 a word)."""
        return self.first.prompt_tokens or round(self.words * 1.3)

    @property
    def saved_ms(self) -> float | None:
        """How much faster the repeat's first token came (positive: the cache helped)."""
        if self.first.ttft_ms is None or self.second.ttft_ms is None:
            return None
        return self.first.ttft_ms - self.second.ttft_ms


def repeat_prompt(ctx: Context) -> RepeatPromptResult:
    """Send one long prompt (fresh random prefix) twice with ``max_tokens=1`` (2 requests)."""
    from llmdoctor.context import ProbeUnavailable
    from llmdoctor.measurements.latency_samples import describe_failure
    from llmdoctor.probes.prompt_size import filler_prompt, long_prompt_words
    from llmdoctor.probes.window import send_fitting

    base = ctx.get(BASELINE)
    rng = random.Random()
    extra = {"model": base.model, "temperature": 0}
    # A prompt larger than a window the server does not publish is refused: learn the window, resize.
    sent = send_fitting(ctx, long_prompt_words(ctx, REPEAT_WORDS + 12) - 12, lambda n: filler_prompt(n, rng),
                        "repeated-prompt", extra, min_words=48)
    timings = [sent.timing]
    if sent.timing.ok and sent.timing.ttft_ms is not None:
        timings.append(ctx.client.chat(sent.prompt, max_tokens=1, stream=True, extra=extra))
    for timing in timings:
        if not timing.ok or timing.ttft_ms is None:
            raise ProbeUnavailable(f"repeated-prompt request failed: {describe_failure(timing)}")
    return RepeatPromptResult(sent.words, timings[0], timings[1])
