"""Probe ``prefix_reuse``: does the server reuse the prefix of the application's own prompt?

The largest chat request of ``--request`` is sent `PREFIX_REPEATS` times as it is (its messages, with
``max_tokens`` 1, streamed, temperature 0): a server that caches prefixes (vLLM's automatic prefix
caching, SGLang's radix cache, llama.cpp's ``cache_prompt``) prefills it once, and the later times to
first token fall to about the floor; one that does not (vLLM ``--no-enable-prefix-caching``) pays the
whole prefill every time. Measured on vLLM 0.32 CPU with a 739-token system prompt: 570-690 ms first,
110-170 ms after with caching on; ~600 ms every time with it off.

Where the server exports its prefix-cache counters (vLLM ``vllm:prefix_cache_queries_total`` and
``vllm:prefix_cache_hits_total``, tokens, ``vllm/v1/metrics/loggers.py`` of 0.32; normalised by
``llmdoctor.probes.metrics``), they are scraped before and after the repeats (2 requests): hits
over queries is the server's own word on reuse, valid when no other traffic moved them.

It also reads the request texts, locally, for a volatile prefix: a date, time or id near the top of
the first message (a timestamp at the top of a system prompt), or first messages that differ only in
their first characters across requests. Such a prompt never repeats, so no cache can serve what
follows it, however well the cache works for the identical prompt sent here. Only sizes and
positions are kept, never the texts.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from llmdoctor.context import Context, ProbeUnavailable
from llmdoctor.inputs.request_files import RequestFileError, iter_bodies
from llmdoctor.probes.catalog import BASELINE, DISCOVERY, REQUESTS, SERVER_METRICS
from llmdoctor.probes.sizes import PREFIX_REPEATS

__all__ = ["PrefixReuseResult", "VOLATILE_HEAD_CHARS", "prefix_reuse", "volatile_prefix"]

#: A volatile value this close to the start of the first message spoils the prefix behind it.
VOLATILE_HEAD_CHARS = 80
#: Only a first message this long has a prefix worth caching.
VOLATILE_MIN_CHARS = 400
_VOLATILE = (
    (r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}", "a date and time"),
    (r"\b\d{1,2}:\d{2}:\d{2}\b", "a time of day"),
    (r"\b\d{4}-\d{2}-\d{2}\b", "a date"),
    (r"\b1[6-9]\d{8}(?:\.\d+)?\b", "a Unix timestamp"),
    (r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "a UUID"),
)


@dataclass
class PrefixReuseResult:
    """The times to first token of the same prompt sent again and again, and the server's cache counters."""

    source: str
    prompt_chars: int
    #: Prompt tokens of the first answer's usage (None: the stream reported none).
    prompt_tokens: int | None
    #: Times to first token, the first request first (client clock, ms).
    ttfts_ms: list[float] = field(default_factory=list)
    #: The warm "Say ok." median time to first token (the floor) and its p90 (ms).
    floor_ttft_ms: float = 0.0
    floor_ttft_p90_ms: float = 0.0
    #: llmdoctor's worst scheduling lag during the repeats (ms; None: not measured).
    lag_ms: float | None = None
    #: Deltas of the server's prefix-cache counters over the repeats (tokens; None: not exported).
    cache_queries: float | None = None
    cache_hits: float | None = None
    metrics_note: str = ""
    #: What looks volatile near the top of the first message ("" when nothing), without its text.
    volatile: str = ""

    @property
    def first_ms(self) -> float:
        """Time to first token of the first sending."""
        return self.ttfts_ms[0]

    @property
    def repeat_ms(self) -> float:
        """Median time to first token of the repeats."""
        return statistics.median(self.ttfts_ms[1:])

    @property
    def noise_ms(self) -> float:
        """What identical requests vary by here: the floor's p90 − p50, the repeats' spread, our own lag."""
        spread = max(self.ttfts_ms[1:]) - min(self.ttfts_ms[1:])
        return max(self.floor_ttft_p90_ms - self.floor_ttft_ms, spread, self.lag_ms or 0.0, 5.0)


def volatile_prefix(first_messages: list[str]) -> str:
    """What is volatile at the top of the requests' first messages, or "" (texts are not kept)."""
    long = [m for m in first_messages if len(m) >= VOLATILE_MIN_CHARS]
    for text in long:
        head = text[:VOLATILE_HEAD_CHARS]
        for pattern, what in _VOLATILE:
            found = re.search(pattern, head)
            if found:
                return (f"{what} at characters {found.start()}-{found.end()} of a {len(text):,}-character first "
                        "message")
    distinct = sorted(set(long))
    if len(distinct) >= 2:
        a, b = distinct[0], distinct[1]
        common = len(_common_prefix(a, b))
        tail = len(_common_prefix(a[::-1], b[::-1]))
        if common < VOLATILE_HEAD_CHARS and tail >= 0.8 * min(len(a), len(b)) - VOLATILE_HEAD_CHARS:
            return (f"first messages that differ at character {common} and then agree for {tail:,} characters "
                    f"(of {min(len(a), len(b)):,})")
    return ""


def _common_prefix(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return a[:n]


def _bodies(ctx: Context) -> list[tuple[str, dict[str, Any]]]:
    try:
        return [(source, body) for source, body in iter_bodies(ctx.options.workload.request_files)
                if isinstance(body.get("messages"), list) and body["messages"]]
    except RequestFileError as exc:
        raise ProbeUnavailable(f"bad request file: {exc}") from None


def _first_text(body: dict[str, Any]) -> str:
    content = body["messages"][0].get("content") if isinstance(body["messages"][0], dict) else None
    if isinstance(content, list):
        content = " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def _counters(ctx: Context, url: str, backend: str) -> tuple[float | None, float | None]:
    from llmdoctor.probes.metrics import fetch_text, normalize

    text = fetch_text(ctx, url)
    if text is None:
        return None, None
    scraped = normalize(text, url, backend)
    return scraped.prefix_cache_queries, scraped.prefix_cache_hits


def prefix_reuse(ctx: Context) -> PrefixReuseResult:
    """Send the largest ``--request`` chat prompt `PREFIX_REPEATS` times (and scrape the cache counters)."""
    requests = ctx.get(REQUESTS)
    base = ctx.get(BASELINE)
    bodies = _bodies(ctx)
    if not bodies:
        raise ProbeUnavailable("no chat request among --request: nothing to repeat")
    chats = {r.source: r for r in requests.chat}
    source, body = max(bodies, key=lambda sb: chats[sb[0]].prompt_chars if sb[0] in chats else 0)
    info = ctx.optional(DISCOVERY)
    model = getattr(info, "model", None) or body.get("model")
    extra: dict[str, Any] = {"temperature": 0, **({"model": model} if model else {})}
    if body.get("tools"):
        extra["tools"] = body["tools"]
    metrics = ctx.optional(SERVER_METRICS)
    counted = metrics is not None and metrics.latest.prefix_cache_queries is not None
    before = _counters(ctx, metrics.url, metrics.backend) if metrics is not None and counted else (None, None)
    timings = []
    for _ in range(PREFIX_REPEATS):
        timing = ctx.client.chat(body["messages"], max_tokens=1, stream=True, extra=extra)
        if not timing.ok or timing.ttft_ms is None:
            from llmdoctor.measurements.latency_samples import describe_failure

            raise ProbeUnavailable(f"the repeated request ({source}) failed: {describe_failure(timing)}")
        timings.append(timing)
    after = _counters(ctx, metrics.url, metrics.backend) if metrics is not None and counted else (None, None)
    queries = hits = None
    note = "the server exports no prefix-cache counters" if not counted else ""
    if before[0] is not None and after[0] is not None:
        queries = after[0] - before[0]
        hits = (after[1] or 0.0) - (before[1] or 0.0)
    elif counted:
        note = "a scrape around the repeats failed"
    lags = [t.client_lag_ms for t in timings if t.client_lag_ms is not None]
    return PrefixReuseResult(
        source, chats[source].prompt_chars if source in chats else 0, timings[0].prompt_tokens,
        [t.ttft_ms for t in timings if t.ttft_ms is not None], base.ttft_p50_ms or 0.0, base.ttft_p90_ms or 0.0,
        max(lags) if lags else None, queries, hits, note, volatile_prefix([_first_text(b) for _, b in bodies]),
    )
