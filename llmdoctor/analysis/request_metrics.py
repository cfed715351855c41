"""vLLM's per-request ``metrics`` object: one request's own server clocks, read as `ServerClock`s.

vLLM 0.32 started with ``--enable-per-request-metrics`` adds a ``metrics`` object to each answer:
top level of a non-streamed completion, and of the final usage chunk of a stream (sent only when the
request asks ``stream_options.include_usage``, or the server runs with ``--enable-force-include-usage``).
Its fields (vllm-project/vllm 0.32.0, ``vllm/entrypoints/generate/base/protocol.py`` ``PerRequestMetrics``,
computed by ``build_per_request_timing_metrics`` in ``generate/base/serving.py`` from the engine's
``RequestStateStats`` timestamps), all milliseconds, each left out when its timestamps are missing:

==========================  ===================================  ==============================
field                       engine span                          read as
==========================  ===================================  ==============================
``queue_time_ms``           queued → scheduled                   `ClockKind.QUEUE`
``time_to_first_token_ms``  scheduled → first token (no queue)   `ClockKind.PREFILL`
``generation_time_ms``      first → last output token            `ClockKind.DECODE`
``mean_itl_ms``             decode time / (tokens − 1)           `ClockKind.INTER_TOKEN`
==========================  ===================================  ==============================

``tokens_per_second`` (tokens over scheduled → last token) is a rate, not a span, and is not read.
vLLM's ``time_to_first_token_ms`` starts at scheduling, not at the request's arrival: it is the
prefill (with the first token's sampling), and the queue before it is its own field. The engine's
clock starts when the engine core queues the request, so the API server's own work before that
(parsing, chat template, tokenization) is outside every field: it counts in front of the model.
The object is ``null`` or absent for ``n > 1`` and when the flag is off.
"""

from __future__ import annotations

import math
from typing import Any

from llmdoctor.analysis.clocks import judge
from llmdoctor.measurements.timing import ClockKind, ClockOrigin, RequestTiming, ServerClock

__all__ = ["FLAG", "FIELDS", "queued_ms", "vllm_request_clocks"]

#: The vLLM server flag that makes it send the object.
FLAG = "--enable-per-request-metrics"

#: ``metrics`` field -> what it measures (milliseconds).
FIELDS: dict[str, str] = {
    "queue_time_ms": ClockKind.QUEUE,
    "time_to_first_token_ms": ClockKind.PREFILL,
    "generation_time_ms": ClockKind.DECODE,
    "mean_itl_ms": ClockKind.INTER_TOKEN,
}


def vllm_request_clocks(obj: Any) -> list[ServerClock]:
    """The server clocks in a vLLM answer or final chunk `obj` (its ``metrics`` object); [] when none.

    Values are kept as sent (a negative one too: `llmdoctor.analysis.clocks.judge` sets it aside with the
    reason); a missing, null, boolean or non-numeric field is no clock.
    """
    metrics = obj.get("metrics") if isinstance(obj, dict) else None
    if not isinstance(metrics, dict):
        return []
    out = []
    for key, kind in FIELDS.items():
        value = metrics.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            continue
        out.append(ServerClock(kind, float(value), f"metrics.{key}", ClockOrigin.BODY))
    return out


def queued_ms(t: RequestTiming) -> float:
    """How long the server's own clock on `t` (its header or body, judged as the waterfall judges it) says
    the request waited in the server's queue; 0 when it carries no such clock.

    Time spent behind other requests is not the server warming up: the cold-start checks take it out of
    a first request's penalty (measured on vLLM 0.32 with ``--max-num-seqs 1`` behind two streams: a
    first request 3,791 ms slower than warm ones had waited 1,568 ms in the queue by vLLM's clock).
    """
    clock = judge(t).own(ClockKind.QUEUE)
    return clock.ms if clock is not None else 0.0
