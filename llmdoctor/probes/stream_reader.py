"""The OpenAI/SSE stream reader: what a response's headers and body say, turned into a `RequestTiming`.

The client (`llmdoctor.probes.client`) sends and times; this module interprets. It knows the
OpenAI chunk, usage and reasoning semantics, llama.cpp's ``timings``, TGI's and OpenAI's timing
headers, the error bodies of the usual servers, and where a stream ends:

- `read_stream` feeds the body's chunks (with their arrival instants) through the SSE parser and
  `on_event`, then decides how the stream ended (`finish_stream`);
- `apply_final_chunk` reads what a server sends with its last chunk or its whole answer (usage,
  llama.cpp ``timings``): the one place to read a further per-request object of a server;
- `apply_completion` reads a non-streamed completion;
- `generation_body` builds the request body of a chat or text completion.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

from llmdoctor.analysis.clocks import llamacpp_clocks
from llmdoctor.analysis.request_metrics import vllm_request_clocks
from llmdoctor.measurements.timing import ErrorKind, RequestTiming
from llmdoctor.probes.errors import BodyStop
from llmdoctor.probes.sse import SSEError, SSEEvent, SSEParser
from llmdoctor.redact import Redactor

__all__ = [
    "MAX_READS_KEPT",
    "TEXT_KEEP_CHARS",
    "StreamState",
    "apply_completion",
    "apply_final_chunk",
    "error_message",
    "finish_stream",
    "generation_body",
    "header_timings",
    "ms",
    "on_event",
    "peer",
    "read_stream",
    "snippet",
    "tokens_from_headers",
]

TEXT_KEEP_CHARS = 200
# Body reads of a stream whose arrival is kept (`RequestTiming.read_times_ms`); the rest are not.
MAX_READS_KEPT = 4096

# Server timing hints sent as response headers.
# TGI (huggingface/text-generation-inference, router/src/server.rs, `generate`): x-total-time,
# x-validation-time, x-queue-time, x-inference-time and x-time-per-token are
# `Duration::as_millis()` integers (ms); x-compute-time is `as_secs_f64()` (seconds);
# x-prompt-tokens, x-generated-tokens and x-compute-characters are counts. The streaming route
# only sends x-compute-type and x-compute-characters. OpenAI sends `openai-processing-ms`.
_HEADER_MS = {
    "x-total-time": "tgi.total_ms",
    "x-validation-time": "tgi.validation_ms",
    "x-queue-time": "tgi.queue_ms",
    "x-inference-time": "tgi.inference_ms",
    "x-time-per-token": "tgi.time_per_token_ms",
    "openai-processing-ms": "openai.processing_ms",
}
_HEADER_SECONDS = {"x-compute-time": "tgi.compute_ms"}
_HEADER_COUNTS = {
    "x-prompt-tokens": "tgi.prompt_tokens",
    "x-generated-tokens": "tgi.generated_tokens",
    "x-compute-characters": "tgi.compute_characters",
}


@dataclass
class StreamState:
    """What the reader has seen of one event stream so far."""

    done: bool = False
    valid: int = 0
    malformed: int = 0
    last_event_ms: float | None = None
    #: When the first finish_reason came: the last token's time if no token event showed it.
    finish_ms: float | None = None
    content: list[str] = field(default_factory=list)
    content_len: int = 0
    reasoning: list[str] = field(default_factory=list)
    reasoning_len: int = 0

    def keep(self, kind: str, piece: str) -> None:
        """Keep the first `TEXT_KEEP_CHARS` of the answer's content or reasoning."""
        if kind == "content" and self.content_len < TEXT_KEEP_CHARS:
            self.content.append(piece)
            self.content_len += len(piece)
        elif kind == "reasoning" and self.reasoning_len < TEXT_KEEP_CHARS:
            self.reasoning.append(piece)
            self.reasoning_len += len(piece)

    def text(self) -> str:
        """The kept text: the content, or the reasoning when there is no content."""
        return "".join(self.content or self.reasoning)[:TEXT_KEEP_CHARS]


def ms(seconds: float) -> float:
    """Seconds as milliseconds, to the microsecond."""
    return round(seconds * 1000.0, 3)


def _num(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _int(value: Any) -> int | None:
    n = _num(value)
    return int(n) if n is not None and n >= 0 else None


def _empty_token_delta(delta: Any, choice: dict[str, Any], *, first: bool) -> bool:
    """True for ``delta: {"content": ""}`` without a role: a token whose text is not out yet.

    A role chunk (vLLM/OpenAI send ``{"role": "assistant", "content": ""}`` first) is not a token.
    A final chunk (with a finish_reason) is one only when it is the `first` token of the answer:
    after tokens, an empty closing delta is bookkeeping; before any, the answer still finished, so
    the model generated its token. vLLM 0.32 streams a ``max_tokens=1`` answer whose token is half
    a UTF-8 character as a role chunk and then ``{"content": ""}`` with ``finish_reason: "length"``
    (fixtures/vllm/chat_stream_1token_empty.sse; the detokenizer holds the partial bytes back,
    ``vllm/v1/engine/detokenizer.py``); its ``completion_tokens`` is 1.
    """
    return (
        isinstance(delta, dict)
        and delta.get("content") == ""
        and "role" not in delta
        and not delta.get("tool_calls")
        and (first or not choice.get("finish_reason"))
    )


def header_timings(headers: httpx.Headers) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, key in _HEADER_MS.items():
        if (v := _num(headers.get(name))) is not None:
            out[key] = v
    for name, key in _HEADER_SECONDS.items():
        if (v := _num(headers.get(name))) is not None:
            out[key] = v * 1000.0
    for name, key in _HEADER_COUNTS.items():
        if (v := _num(headers.get(name))) is not None:
            out[key] = v
    # W3C Server-Timing: "name;dur=12.3;desc=..., other;dur=4"
    for entry in ",".join(headers.get_list("server-timing")).split(","):
        name, *params = (p.strip() for p in entry.split(";"))
        for p in params:
            k, _, val = p.partition("=")
            if name and k.strip().lower() == "dur" and (v := _num(val.strip('"'))) is not None:
                out[f"server-timing.{name}"] = v
    return out


def error_message(obj: Any) -> str | None:
    """The message of an error body: OpenAI ``{"error": {"message"}}``, TGI ``{"error": "..."}``, ..."""
    if not isinstance(obj, dict):
        return None
    err = obj.get("error")
    if isinstance(err, dict):
        parts = [str(err[k]) for k in ("message", "type", "code") if err.get(k) not in (None, "")]
        if parts:
            return " / ".join(dict.fromkeys(parts))
        return json.dumps(err)[:TEXT_KEEP_CHARS]
    if isinstance(err, str) and err:
        return err
    for key in ("message", "detail", "msg"):
        val = obj.get(key)
        if isinstance(val, str) and val:
            return val
        if val:
            return json.dumps(val)[:TEXT_KEEP_CHARS]
    return None


def peer(response: httpx.Response) -> str:
    """``ip:port`` of the connection the response came on ("" when the transport does not say)."""
    stream = response.extensions.get("network_stream")
    try:
        addr = stream.get_extra_info("server_addr") if stream is not None else None
    except Exception:  # noqa: BLE001 - a transport without the information
        return ""
    if isinstance(addr, tuple) and len(addr) >= 2:
        host = str(addr[0])
        return f"[{host}]:{addr[1]}" if ":" in host else f"{host}:{addr[1]}"
    return ""


def tokens_from_headers(timing: RequestTiming) -> None:
    """Token counts from TGI headers when the body carried no usage."""
    if timing.prompt_tokens is None and "tgi.prompt_tokens" in timing.server_timing:
        timing.prompt_tokens = int(timing.server_timing["tgi.prompt_tokens"])
    if timing.completion_tokens is None and "tgi.generated_tokens" in timing.server_timing:
        timing.completion_tokens = int(timing.server_timing["tgi.generated_tokens"])


def snippet(data: bytes, redactor: Redactor) -> str:
    """The body's first 200 characters, whitespace squeezed; redacted *before* the cut."""
    return redactor.text(" ".join(data.decode("utf-8", errors="replace").split()))[:TEXT_KEEP_CHARS]


def generation_body(model: str | None, base: dict[str, Any], max_tokens: int, stream: bool,
                    extra: dict[str, Any] | None) -> dict[str, Any]:
    """The body of a chat or text completion; keys of `extra` go in last, a None value removes a key."""
    body: dict[str, Any] = {}
    if model:
        body["model"] = model
    body.update(base)
    body["max_tokens"] = max_tokens
    body["stream"] = stream
    if stream:
        body["stream_options"] = {"include_usage": True}
    for key, value in (extra or {}).items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    return body


#: Chunks of a body with the instant each arrived; raises `BodyStop`, `httpx.HTTPError`.
Chunks = Iterable[tuple[bytes, float]]


def read_stream(chunks: Chunks, timing: RequestTiming, t0: float, ctype: str, redactor: Redactor, *,
                now: Callable[[], float], on_done: Callable[[float], None],
                cut: Callable[[httpx.HTTPError], tuple[str, str]]) -> None:
    """Read an event stream into `timing` (instants relative to `t0`).

    `on_done(instant)` is called once, when ``[DONE]`` arrives (the client then waits only
    briefly for the end of the body); `cut` names a transport error in the middle of the stream.
    """
    parser = SSEParser(dispatch_incomplete=True)
    st = StreamState()
    problem: tuple[str, str] | None = None
    done_seen = False
    try:
        for data, at in chunks:
            at_ms = ms(at - t0)
            if len(timing.read_times_ms) < MAX_READS_KEPT:
                timing.read_times_ms.append(at_ms)
                timing.read_bytes.append(len(data))
            for event in parser.feed(data):
                on_event(event, at_ms, timing, st, redactor)
            if st.done and not done_seen:
                done_seen = True
                on_done(at)
        end = now()
        for event in parser.close():
            on_event(event, ms(end - t0), timing, st, redactor)
        timing.total_ms = ms(end - t0)
    except BodyStop as stop:
        problem = (stop.kind, stop.detail)
    except SSEError as exc:
        problem = (ErrorKind.TOO_LARGE, str(exc))
    except httpx.HTTPError as exc:
        problem = cut(exc)
    finish_stream(timing, st, problem, ctype)
    if timing.total_ms is None:
        timing.total_ms = ms(now() - t0)


def finish_stream(timing: RequestTiming, st: StreamState, problem: tuple[str, str] | None, ctype: str) -> None:
    """How the stream ended: complete, cut, malformed or empty (`problem`: what stopped the reading)."""
    timing.text = st.text()
    finished = st.done or timing.finish_reason is not None
    if problem is not None and finished and problem[0] in (ErrorKind.READ_TIMEOUT, ErrorKind.STREAM_CUT):
        # The answer was complete; only the end of the body was late or missing.
        timing.total_ms = st.last_event_ms
        problem = None
    if timing.error is not None:  # an error event in the stream
        pass
    elif problem is not None:
        timing.error, timing.error_detail = problem
    elif st.valid == 0 and st.malformed:
        timing.error = ErrorKind.BAD_BODY
        timing.error_detail = (
            f"no valid JSON chunk in the event stream ({st.malformed} malformed; "
            f"content type {ctype or 'none'})"
        )
    elif st.valid == 0 and not st.done:
        timing.error = ErrorKind.STREAM_CUT if ctype == "text/event-stream" else ErrorKind.BAD_BODY
        timing.error_detail = f"the stream ended before its first event (content type {ctype or 'none'})"
    elif not finished:
        timing.error = ErrorKind.STREAM_CUT
        timing.error_detail = (
            f"the stream ended after {st.valid} chunks without [DONE] or a finish_reason"
        )
    if timing.error is None and st.malformed:
        timing.error_detail = f"{st.malformed} malformed data line(s) ignored"
    if timing.error is None and timing.ttft_ms is None and st.finish_ms is not None and timing.completion_tokens:
        # No chunk showed a token, yet the server finished and counts them (usage): its
        # tokens came out with the finishing chunk (an empty ``delta: {}`` closing a held-back one).
        timing.ttft_ms = st.finish_ms
        timing.token_times_ms.append(st.finish_ms)
    tokens_from_headers(timing)


def on_event(event: SSEEvent, now_ms: float, timing: RequestTiming, st: StreamState, redactor: Redactor) -> None:
    """One server-sent event, arrived `now_ms` after the request started."""
    data = event.data.strip()
    if data == "[DONE]":
        st.done = True
        st.last_event_ms = now_ms
        return
    try:
        obj = json.loads(data)
    except ValueError:
        st.malformed += 1
        return
    if not isinstance(obj, dict):
        st.malformed += 1
        return
    st.valid += 1
    st.last_event_ms = now_ms
    if obj.get("error") or event.event == "error":
        if timing.error is None:
            timing.error = ErrorKind.OTHER
            message = error_message(obj) or data[:TEXT_KEEP_CHARS]
            timing.error_detail = redactor.text(f"error event in the stream: {message}")[:300]
        return
    choices = obj.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    if isinstance(first, dict):
        _on_choice(first, now_ms, timing, st)
    apply_final_chunk(obj, timing)


def _on_choice(choice: dict[str, Any], now_ms: float, timing: RequestTiming, st: StreamState) -> None:
    delta = choice.get("delta")
    content: Any = None
    reasoning: Any = None
    if isinstance(delta, dict):
        content = delta.get("content")
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    elif isinstance(choice.get("text"), str):
        content = choice.get("text")
    token = False
    if isinstance(content, str) and content:
        timing.content_events += 1
        if timing.first_content_ms is None:
            timing.first_content_ms = now_ms
        st.keep("content", content)
        token = True
    elif _empty_token_delta(delta, choice, first=timing.ttft_ms is None) and not reasoning:
        # llama.cpp sends one chunk per generated token; a byte-fallback token that does not
        # complete a UTF-8 character arrives as an empty content delta. It is still a token,
        # and so is vLLM's held-back first token that closes the answer.
        timing.content_events += 1
        token = True
    if isinstance(reasoning, str) and reasoning:
        timing.reasoning_events += 1
        if timing.first_reasoning_ms is None:
            timing.first_reasoning_ms = now_ms
        st.keep("reasoning", reasoning)
        token = True
    if token:
        timing.token_times_ms.append(now_ms)
        if timing.ttft_ms is None:
            timing.ttft_ms = now_ms
    if choice.get("finish_reason"):
        timing.finish_reason = str(choice["finish_reason"])
        if st.finish_ms is None:
            st.finish_ms = now_ms


def apply_final_chunk(obj: dict[str, Any], timing: RequestTiming) -> None:
    """What a server sends with its last chunk (or its whole answer): ``usage``, llama.cpp's ``timings``,
    vLLM's per-request ``metrics`` (`llmdoctor.analysis.request_metrics`).

    Called for every chunk (a server may send usage on any) and for a non-streamed answer.
    """
    usage = obj.get("usage")
    if isinstance(usage, dict):
        if (n := _int(usage.get("prompt_tokens"))) is not None:
            timing.prompt_tokens = n
        if (n := _int(usage.get("completion_tokens"))) is not None:
            timing.completion_tokens = n
    timings = obj.get("timings")  # llama.cpp server
    if isinstance(timings, dict):
        for key, value in timings.items():
            if (v := _num(value)) is not None and not isinstance(value, str):
                timing.server_timing[f"llamacpp.{key}"] = v
        # The last timings object sent wins (llama.cpp may send one per chunk).
        timing.server_clocks = [c for c in timing.server_clocks if not c.source.startswith("timings.")]
        timing.server_clocks.extend(llamacpp_clocks(timings))
    timing.server_clocks.extend(vllm_request_clocks(obj))  # vLLM --enable-per-request-metrics: its final chunk


def apply_completion(obj: Any, timing: RequestTiming, redactor: Redactor) -> None:
    """Non-streamed completion: ttft_ms = total_ms, since nothing earlier is observable."""
    if not isinstance(obj, dict):
        timing.error = ErrorKind.BAD_BODY
        timing.error_detail = "expected a JSON object"
        return
    if obj.get("error"):
        timing.error = ErrorKind.OTHER
        timing.error_detail = redactor.text(f"error in the response: {error_message(obj)}")[:300]
        return
    choices = obj.get("choices")
    if not (isinstance(choices, list) and choices and isinstance(choices[0], dict)):
        timing.error = ErrorKind.BAD_BODY
        timing.error_detail = "no choices in the completion response"
        return
    choice = choices[0]
    message = choice.get("message")
    content: Any = choice.get("text")
    reasoning: Any = None
    if isinstance(message, dict):
        content = message.get("content")
        reasoning = message.get("reasoning_content") or message.get("reasoning")
    text = content if isinstance(content, str) and content else reasoning
    timing.text = text[:TEXT_KEEP_CHARS] if isinstance(text, str) else ""
    if choice.get("finish_reason"):
        timing.finish_reason = str(choice["finish_reason"])
    apply_final_chunk(obj, timing)
    # Nothing before the end of the body is observable without streaming.
    timing.ttft_ms = timing.total_ms
    tokens_from_headers(timing)
