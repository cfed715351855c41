"""The server's own clocks for one request: where each backend reports them, and which to believe.

Sources (each value is kept as a `ServerClock` with its origin and the field it came from):

- **OpenAI-style** ``openai-processing-ms`` (whole ms): the server's time until it sent its response
  headers. For a non-streamed answer that is all its work; llama-cpp-python (0.3.36, recorded in
  fixtures/llamacpp) sends it on streams too, where it is the time to *start* the stream (0–2 ms).
- **TGI** (huggingface/text-generation-inference v3.3.7, ``router/src/server.rs`` ``generate_internal``):
  ``x-total-time``, ``x-validation-time``, ``x-queue-time``, ``x-inference-time``, ``x-time-per-token``
  (``Duration::as_millis()``: whole ms; ``x-time-per-token`` is inference time over generated tokens,
  prefill included). Sent by ``/generate`` and by the non-streamed OpenAI route (``chat_completions``
  takes ``generate_internal``'s headers); streamed routes (``generate_stream_internal``) send only
  ``x-compute-type``, ``x-compute-characters`` and ``X-Accel-Buffering: no``.
- **llama.cpp** ``llama-server`` (ggml-org/llama.cpp ``tools/server/server-task.cpp``
  ``result_timings::to_json``): a ``timings`` object in non-streamed answers and the final stream
  chunk — ``prompt_ms`` (prompt processing through the first token's sampling), ``predicted_ms``
  (first to last token), ``prompt_n``, ``predicted_n``, ``cache_n`` (prompt tokens reused from the
  cache). llama-cpp-python's server sends no ``timings``.
- **Ollama** (ollama/ollama v0.33 ``docs/api.md``, ``api/types.go`` ``Metrics``): the final object of
  ``/api/chat`` and ``/api/generate`` carries ``total_duration``, ``load_duration``,
  ``prompt_eval_duration``, ``eval_duration`` in nanoseconds; its OpenAI-compatible routes do not.
- **Metrics** (vLLM, SGLang, TGI histograms): deltas between two scrapes (`llmdoctor.probes.metrics`),
  means over the requests the server saw in between — ours only when the request counter moved by
  exactly our requests, else "shared traffic", marked on each clock (`ServerClock.requests`).

`judge` sets aside what cannot be true for the client's own measurement of the same request (a
negative time, a server time longer than the client's, NaN) and says why, so no impossible clock
ever reaches the waterfall.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llmdoctor.analysis.send_stall import client_bound
from llmdoctor.measurements.timing import ClockKind, ClockOrigin, RequestTiming, ServerClock

__all__ = [
    "ClockSet",
    "TOLERANCE_MS",
    "header_clocks",
    "judge",
    "llamacpp_clocks",
    "metrics_clocks",
    "ollama_clocks",
]

#: Slack allowed when a server time is compared with the client's (whole-ms headers, clock grain).
TOLERANCE_MS = 2.0
#: ... and as a share of the client's span, for long requests.
TOLERANCE_SHARE = 0.02

# Header -> what it measures. Whole milliseconds unless listed in _HEADER_SECONDS.
_HEADERS: dict[str, str] = {
    "openai-processing-ms": ClockKind.HEADERS,
    "x-total-time": ClockKind.TOTAL,
    "x-validation-time": ClockKind.VALIDATION,
    "x-queue-time": ClockKind.QUEUE,
    "x-inference-time": ClockKind.INFERENCE,
    "x-time-per-token": ClockKind.PER_TOKEN,
}
# llama.cpp ``timings`` fields that are durations.
_LLAMACPP: dict[str, str] = {"prompt_ms": ClockKind.PREFILL, "predicted_ms": ClockKind.DECODE}
# Ollama durations (ns) of the final object.
_OLLAMA: dict[str, str] = {
    "total_duration": ClockKind.TOTAL,
    "load_duration": ClockKind.LOAD,
    "prompt_eval_duration": ClockKind.PREFILL,
    "eval_duration": ClockKind.DECODE,
}
# MetricsDelta attribute -> kind (the histogram behind it is named in the source).
_METRICS: dict[str, str] = {
    "queue_ms": ClockKind.QUEUE,
    "prefill_ms": ClockKind.PREFILL,
    "decode_ms": ClockKind.DECODE,
    "inference_ms": ClockKind.INFERENCE,
    "ttft_ms": ClockKind.TTFT,
    "e2e_ms": ClockKind.TOTAL,
    "inter_token_ms": ClockKind.INTER_TOKEN,
}


def _number(value: Any) -> float | None:
    """A finite number from a header or JSON value; None for anything else (booleans too)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def header_clocks(headers: Mapping[str, str]) -> list[ServerClock]:
    """The server clocks in a response's headers (names compared case-insensitively)."""
    lower = {k.lower(): v for k, v in headers.items()}
    out: list[ServerClock] = []
    for name, kind in _HEADERS.items():
        if (value := _number(lower.get(name))) is not None:
            out.append(ServerClock(kind, value, name, ClockOrigin.HEADER))
    return out


def llamacpp_clocks(timings: Any) -> list[ServerClock]:
    """The durations of a llama.cpp ``timings`` object (empty if it is not one)."""
    if not isinstance(timings, dict):
        return []
    return [ServerClock(kind, value, f"timings.{key}", ClockOrigin.BODY)
            for key, kind in _LLAMACPP.items() if (value := _number(timings.get(key))) is not None]


def ollama_clocks(final: Any) -> list[ServerClock]:
    """The durations (ns → ms) of Ollama's final ``/api/chat`` or ``/api/generate`` object."""
    if not isinstance(final, dict):
        return []
    return [ServerClock(kind, value / 1e6, key, ClockOrigin.BODY)
            for key, kind in _OLLAMA.items() if (value := _number(final.get(key))) is not None]


def metrics_clocks(delta: Any, sources: Mapping[str, str], ours: int) -> list[ServerClock]:
    """Mean per-request clocks from a metrics delta (`llmdoctor.measurements.server_metrics.MetricsDelta`).

    `sources` names the histogram behind each attribute; `ours` is how many of the requests the
    server saw in the window were ours (the others are other clients' traffic).
    """
    seen = getattr(delta, "requests", None)
    requests = int(seen) if isinstance(seen, int | float) and seen > 0 else ours
    out = []
    for attr, kind in _METRICS.items():
        value = _number(getattr(delta, attr, None))
        if value is not None:
            out.append(ServerClock(kind, value, sources.get(attr, attr), ClockOrigin.METRICS, requests, ours))
    return out


@dataclass
class ClockSet:
    """The clocks of one request that survived `judge`, by kind, and why the others were set aside."""

    accepted: dict[str, ServerClock] = field(default_factory=dict)
    set_aside: list[str] = field(default_factory=list)

    def ms(self, kind: str) -> float | None:
        """The accepted value of `kind`, or None."""
        clock = self.accepted.get(kind)
        return clock.ms if clock is not None else None

    def own(self, kind: str) -> ServerClock | None:
        """The accepted clock of `kind` that the request itself carried (its headers or body), not a metrics mean."""
        clock = self.accepted.get(kind)
        return clock if clock is not None and clock.origin != ClockOrigin.METRICS else None

    def source(self, *kinds: str) -> str:
        """The sources of the accepted clocks among `kinds`, joined with ' + '."""
        return " + ".join(dict.fromkeys(_describe(c) for k in kinds if (c := self.accepted.get(k)))) or ""

    def origin(self, *kinds: str) -> str | None:
        """The origin shared by the accepted clocks among `kinds` (the first one's), or None."""
        for kind in kinds:
            if kind in self.accepted:
                return self.accepted[kind].origin
        return None

    @property
    def shared(self) -> ServerClock | None:
        """A metrics clock averaged over other clients' requests too, if any was accepted."""
        return next((c for c in self.accepted.values() if c.requests > c.ours), None)


def _describe(clock: ServerClock) -> str:
    if clock.origin != ClockOrigin.METRICS:
        return clock.source
    if clock.requests > clock.ours:
        return f"{clock.source} (shared traffic: averaged over {clock.requests} requests, {clock.ours} ours)"
    return f"{clock.source} (mean of our {clock.requests} request{'s' if clock.requests != 1 else ''})"


# What a server does before the first token of a streamed answer can be seen.
_BEFORE_FIRST_TOKEN = (ClockKind.VALIDATION, ClockKind.QUEUE, ClockKind.LOAD, ClockKind.PREFILL, ClockKind.TTFT)


def _limit_ms(t: RequestTiming, kind: str) -> float | None:
    """The longest the server could truly have spent on `kind`, by the client's own clock."""
    setup = t.setup_ms if not t.reused_connection else 0.0
    # A send that came back late with the answer waiting (`client_bound`) says nothing of when the server
    # got the request: it could have from the first byte on.
    sent = setup if t.sent_ms is None or client_bound(t) else t.sent_ms
    if kind == ClockKind.HEADERS:
        end = t.ttfb_ms
    elif kind in _BEFORE_FIRST_TOKEN and t.streamed and t.token_times_ms:
        end = t.ttft_ms
    else:
        end = t.total_ms
    if end is None:
        return None
    return max(0.0, end - sent)


def judge(t: RequestTiming, extra: Iterable[ServerClock] = ()) -> ClockSet:
    """Keep the clocks of `t` (and `extra`, e.g. metrics means) that can be true; say why not for the others.

    A clock is set aside when it is negative, or longer than the client's own time for the span it
    covers (beyond `TOLERANCE_MS` / `TOLERANCE_SHARE`): the server cannot have worked longer on a
    request than the client waited for it. The first clock of each kind wins (the request's own
    headers and body before metrics means).
    """
    out = ClockSet()
    for clock in (*t.server_clocks, *extra):
        if clock.kind in out.accepted:
            continue
        what = f"{_describe(clock)} = {clock.ms:g} ms"
        if not math.isfinite(clock.ms):
            out.set_aside.append(f"{clock.source}: not a number, set aside")
            continue
        if clock.ms < 0:
            out.set_aside.append(f"{what}: negative, set aside")
            continue
        limit = _limit_ms(t, clock.kind) if clock.kind not in (ClockKind.PER_TOKEN, ClockKind.INTER_TOKEN) else None
        if limit is not None and clock.ms > limit + max(TOLERANCE_MS, TOLERANCE_SHARE * limit):
            out.set_aside.append(f"{what}: longer than the {limit:,.1f} ms the client measured for it, set aside")
            continue
        out.accepted[clock.kind] = clock
    return out
