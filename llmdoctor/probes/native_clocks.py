"""Probe ``native_timings``: one request through the backend's native API, for the server's own clocks.

Ollama reports how long it spent on a request (model load, prompt evaluation, generation, in
nanoseconds) only on its native routes (``/api/chat``, ``/api/generate``; ollama/ollama v0.33
``docs/api.md``), never on the OpenAI-compatible ones the baseline uses. When the backend is Ollama,
this probe sends the baseline's "Say ok." once more to ``/api/chat`` (not streamed, the same
``max_tokens`` as ``num_predict``), so the attribution can join those durations with the client's
clock. Other backends report their clocks on the OpenAI routes or in their metrics: nothing is sent.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmdoctor.analysis.clocks import ollama_clocks
from llmdoctor.context import Context, ProbeUnavailable
from llmdoctor.measurements.timing import RequestTiming
from llmdoctor.probes.catalog import BASELINE, SERVER_METRICS

__all__ = ["NativeTimings", "native_timings"]


@dataclass
class NativeTimings:
    """A sibling of the baseline request sent through the backend's native API, with its server clocks."""

    backend: str
    route: str
    request: RequestTiming


def native_timings(ctx: Context) -> NativeTimings:
    """Ollama: one ``POST /api/chat`` ("Say ok.", not streamed); any other backend: unavailable, nothing sent."""
    from llmdoctor.measurements.latency_samples import describe_failure
    from llmdoctor.probes.baseline import SAY_OK

    metrics = ctx.optional(SERVER_METRICS)
    backend = metrics.backend if metrics is not None else "unknown"
    if backend != "ollama":
        raise ProbeUnavailable(f"only Ollama needs its native API for its clocks (backend: {backend})")
    base = ctx.get(BASELINE)
    body = {"model": base.model, "messages": SAY_OK, "stream": False, "options": {"num_predict": base.max_tokens}}
    timing, data = ctx.client.post_json("/api/chat", body, root=True)
    if not timing.ok or not isinstance(data, dict):
        raise ProbeUnavailable(f"POST /api/chat failed: {describe_failure(timing)}")
    clocks = ollama_clocks(data)
    if not clocks:
        raise ProbeUnavailable("POST /api/chat answered without Ollama's durations")
    for clock in clocks:
        clock.source = f"/api/chat {clock.source} (a sibling request)"
    timing.server_clocks.extend(clocks)
    if isinstance(data.get("eval_count"), int):
        timing.completion_tokens = data["eval_count"]
    if isinstance(data.get("prompt_eval_count"), int):
        timing.prompt_tokens = data["prompt_eval_count"]
    return NativeTimings(backend, "/api/chat", timing)
