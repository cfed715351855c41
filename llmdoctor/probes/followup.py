"""Follow-up probes the diagnosis planner orders (they never run unless it asks).

- ``followup_concurrency``: the bounded concurrency step (2 requests alone, then 2 at once),
  the ``concurrency`` probe run with a fixed, small N instead of the opt-in ``--concurrency``;
- ``followup_idle``: the after-idle test (``idle``) with a short wait chosen by the planner;
- ``lone_request``: backend metrics scraped around one lone "Say ok." request, so the server's
  own queue time and time to first token can be set against the client's;
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

from llmdoctor.probes.catalog import BASELINE, SERVER_METRICS
from llmdoctor.probes.sizes import CONCURRENCY_N, DEFAULT_IDLE_S
from llmdoctor.probes.timing import RequestTiming

if TYPE_CHECKING:
    from llmdoctor.context import Context
    from llmdoctor.probes.client_limits import ConcurrencyResult
    from llmdoctor.probes.idle import IdleResult
    from llmdoctor.probes.metrics import Histogram

__all__ = [
    "CONCURRENCY_N",
    "DEFAULT_IDLE_S",
    "REPEAT_WORDS",
    "LoneRequestResult",
    "RepeatPromptResult",
    "followup_concurrency",
    "followup_idle",
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

    @property
    def client_ttft_ms(self) -> float | None:
        """Time to first token as the client saw it."""
        return self.request.ttft_ms

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


def lone_request(ctx: Context) -> LoneRequestResult:
    """Scrape the backend's Prometheus metrics, send one minimal request, scrape again (3 requests)."""
    from llmdoctor.context import ProbeUnavailable
    from llmdoctor.probes.baseline import BASELINE_MAX_TOKENS, SAY_OK
    from llmdoctor.probes.metrics import fetch_text, normalize

    metrics = ctx.optional(SERVER_METRICS)
    if metrics is None:
        raise ProbeUnavailable("no backend metrics to read around a request")
    if metrics.before.ttft is None and metrics.before.queue_time is None:
        raise ProbeUnavailable(f"{metrics.backend} exports no TTFT or queue-time histogram")
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
    from llmdoctor.probes.baseline import describe_failure
    from llmdoctor.probes.prompt_size import filler_prompt, long_prompt_words

    base = ctx.get(BASELINE)
    rng = random.Random()
    words = long_prompt_words(ctx, REPEAT_WORDS + 12) - 12
    prompt = filler_prompt(words, rng)
    timings = []
    for _ in range(2):
        timing = ctx.client.chat(prompt, max_tokens=1, stream=True, extra={"model": base.model, "temperature": 0})
        if not timing.ok or timing.ttft_ms is None:
            raise ProbeUnavailable(f"repeated-prompt request failed: {describe_failure(timing)}")
        timings.append(timing)
    return RepeatPromptResult(words, timings[0], timings[1])
