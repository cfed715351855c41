"""LD212: the server prefills the application's prompt again every time (prefix caching off, or a volatile prefix)."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.catalog import PREFIX_REUSE
from llmdoctor.probes.prefix_reuse import PrefixReuseResult

SOURCE = "prefix_reuse"
#: A prompt whose prefill costs less than this above the floor (or 3x the noise) has nothing worth caching.
MIN_MS = 20.0
#: From this cost a request the finding is a warning; below it, information.
WORTH_MS = 100.0
#: The repeats are "reused" when they save this share of the first's prefill (and more than the noise).
REUSED_SHARE = 0.3
#: Counters: a hit share at or below this over the repeats is no reuse.
NO_HITS_SHARE = 0.05

FIX = Fix("Let the server reuse the prompt's prefix.", (
    "vLLM: prefix caching is on by default (V1); remove --no-enable-prefix-caching "
    "(--enable-prefix-caching on older versions).",
    "SGLang: keep the radix cache on (drop --disable-radix-cache); llama.cpp server: cache_prompt true "
    "(the default) and enough slots; TGI 3: prefix caching is on by default.",
    "Put what is stable first and what changes last: no timestamp, date, request id or user name at the top "
    "of the system prompt; put them in the last message.",
    "Behind a balancer, route requests that share a prefix to the same replica (session or prefix affinity).",
))


class PrefixReuse(Check):
    """Prefix reuse: a repeated prompt prefilled again every time.

    ## What it checks
    Sends the largest ``--request`` chat prompt three times as it is (probe
    ``prefix_reuse``) and compares the later times to first token with the
    first and with the floor (the warm "Say ok." requests), against the
    noise the run measured; reads the server's prefix-cache counters around
    the repeats where it exports them (vLLM ``vllm:prefix_cache_queries`` /
    ``vllm:prefix_cache_hits``). Fires when the repeats pay the prefill
    again (20 ms and 3x the noise or more above the floor; a warning from
    100 ms) and the counters saw no query (caching off) or no hit, or,
    without counters, the repeats saved less than 30% of the first's prefill. Also reads the request
    texts for a volatile prefix: a date, time, timestamp or id in the first
    80 characters of a long first message, or first messages that differ
    only in their first characters.

    ## Why it adds latency
    Prefill is one pass over every prompt token before the first answer
    token. A server that caches prefixes computes a prompt's shared start
    once and serves the repeats from its KV cache; with the cache off, or
    with a prefix that changes on every request, every request pays the whole
    prefill again.

    ## Example
    vLLM 0.32 CPU with ``--no-enable-prefix-caching`` and a 648-token system
    prompt: 81, 74, 73 ms to the first token against a 14 ms floor, and no
    query in its prefix-cache counters; with caching on, 181 ms, then 48 and
    20 ms, 1,280 of 1,944 queried tokens hit. (A 739-token prompt on a busier
    host: ~600 ms every time off; 570-690 ms first, 110-170 ms after on.)

    ## Fix
    Turn prefix caching on (vLLM: remove ``--no-enable-prefix-caching``;
    SGLang: keep the radix cache; llama.cpp: ``cache_prompt``), and keep the
    prompt's start stable: move timestamps and per-request ids from the top
    of the system prompt to the last message.

    ## Caveats
    Three requests: a server busy with other traffic, or one that evicts the
    prefix between two requests, can look like no reuse; the counters, when
    exported, are only ours when no other traffic moved them. Behind a
    balancer the repeats may reach different replicas, each with its own
    cache. A volatile prefix is found by patterns; the identical prompt
    sent here may still be reused.
    """

    id = "LD212"
    name = "prefix-reuse"
    title = "Prompt prefilled again on every request (prefix caching)"
    category = Category.SERVER
    requires = (PREFIX_REUSE,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        r = ctx.get(PREFIX_REUSE)
        evidence = _evidence(r)
        paid = r.repeat_ms - r.floor_ttft_ms  # what each repeat still pays above the floor
        saved = r.first_ms - r.repeat_ms
        worth = max(MIN_MS, 3 * r.noise_ms)
        # vLLM 0.32 with --no-enable-prefix-caching exports the counters and never queries the cache
        # (measured: 0 queries over the 3 sendings); with caching on, 3 x 648 queried, 2 x 640 hit.
        never_queried = r.cache_queries is not None and r.cache_queries <= 0
        counted = r.cache_queries is not None and r.cache_queries > 0
        no_hits = counted and (r.cache_hits or 0.0) <= NO_HITS_SHARE * (r.cache_queries or 0.0)
        hits = counted and not no_hits
        timed_miss = saved <= max(r.noise_ms, REUSED_SHARE * (r.first_ms - r.floor_ttft_ms))
        tokens = f"{r.prompt_tokens:,}-token" if r.prompt_tokens else f"{r.prompt_chars:,}-character"
        if paid >= worth and (never_queried or no_hits or (timed_miss and not hits)):
            if never_queried:
                why = (f"the server's prefix-cache counters saw no query over the {len(r.ttfts_ms)} requests: "
                       "its prefix caching is off")
            elif no_hits:
                why = "the server's counters saw its prefix queried and never hit"
            else:
                why = f"the repeats saved {max(0.0, saved):,.0f} ms, within the noise (±{r.noise_ms:,.0f} ms)"
            yield Finding(
                Severity.WARNING if paid >= WORTH_MS else Severity.INFO,
                Confidence.HIGH if never_queried or no_hits else Confidence.MEDIUM,
                f"Prefix caching off or prefix not reused: {paid:,.0f} ms of prefill on every request",
                f"Your {tokens} prompt ({r.source}) sent {len(r.ttfts_ms)} times: first token "
                f"{r.first_ms:,.0f} ms, then {r.repeat_ms:,.0f} ms (median), against a floor of "
                f"{r.floor_ttft_ms:,.0f} ms: {why}. The server prefills the whole prompt again each time.",
                FIX, impact_ms=round(paid, 1),
                impact_basis="repeats' median time to first token − the floor's: the prefill a cache would save",
                evidence=tuple(evidence), frequency=Frequency.EVERY_REQUEST, cause=Cause.PREFIX_CACHE_MISS,
            )
        elif r.volatile and r.first_ms - r.floor_ttft_ms >= worth:
            cost = r.first_ms - r.floor_ttft_ms
            yield Finding(
                Severity.WARNING if cost >= WORTH_MS else Severity.INFO, Confidence.MEDIUM,
                f"Volatile prefix: {r.volatile.split(' at ')[0]} at the top of the prompt",
                f"Your requests start with {r.volatile}: every request's prefix differs, so the cache that served "
                f"this identical prompt again ({r.first_ms:,.0f} → {r.repeat_ms:,.0f} ms) cannot serve your real "
                f"ones, and each pays the first request's {cost:,.0f} ms of prefill.",
                FIX, impact_ms=round(cost, 1),
                impact_basis="first time to first token of the prompt − the floor's: the prefill each new prefix pays",
                evidence=tuple(evidence), frequency=Frequency.EVERY_REQUEST, cause=Cause.PREFIX_CACHE_MISS,
            )


def _evidence(r: PrefixReuseResult) -> list[Evidence]:
    out = [Evidence("times to first token", ", ".join(f"{t:,.0f}" for t in r.ttfts_ms), "ms", SOURCE),
           Evidence("floor (warm 'Say ok.' median time to first token)", round(r.floor_ttft_ms, 1), "ms", "baseline"),
           Evidence("noise", round(r.noise_ms, 1), "ms", "floor p90 − p50, repeats' spread, llmdoctor's lag")]
    if r.prompt_tokens:
        out.append(Evidence("prompt tokens", r.prompt_tokens, "tokens", "the first answer's usage"))
    if r.cache_queries is not None:
        out += [Evidence("prefix-cache queries over the repeats", r.cache_queries, "tokens", "server metrics"),
                Evidence("prefix-cache hits over the repeats", r.cache_hits, "tokens", "server metrics")]
    elif r.metrics_note:
        out.append(Evidence("prefix-cache counters", r.metrics_note, "", "server metrics"))
    if r.volatile:
        out.append(Evidence("volatile prefix", r.volatile, "", "--request"))
    return out
