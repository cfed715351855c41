"""The simulator's OpenAI-compatible routes (vLLM's flavor of them).

`GET /v1/models`, `POST /v1/chat/completions`, `POST /v1/completions` (streamed as SSE or not,
with `stream_options.include_usage`, reasoning tokens, `min_tokens`, `ignore_eos`), `POST /tokenize`
(vLLM's shape), `GET /metrics` and `GET /health`. Validation and error bodies follow OpenAI's and
vLLM's; every delay comes from the engine (`llmdoctor.sim.engine`).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

from llmdoctor.sim import tokens as tok
from llmdoctor.sim.httpd import ApiError, Handler, Request, Routes, json_body
from llmdoctor.sim.metrics import metrics_text
from llmdoctor.sim.native import llamacpp_timings

__all__ = ["GENERATION_PATHS", "ROUTES"]


def _models(h: Handler, req: Request) -> None:
    p = h.sim.profile
    h.send_json(
        200,
        {
            "object": "list",
            "data": [
                {
                    "id": p.model,
                    "object": "model",
                    "created": int(h.sim.started_wall),
                    "owned_by": "llmdoctor-sim",
                    **({"max_model_len": p.context_window} if p.publish_window else {}),
                }
            ],
        },
    )


def _health(h: Handler, req: Request) -> None:
    if h.engine.is_loading():
        h.send_json(503, ApiError(503, "Loading model", "unavailable_error", code=503).body)
    else:
        h.send_body(200, b"", "text/plain")


def _metrics(h: Handler, req: Request) -> None:
    if h.sim.profile.flavor in ("ollama", "openai"):  # no Prometheus endpoint (Ollama, hosted APIs)
        raise ApiError(404, "404 page not found", code="not_found")
    text = metrics_text(h.sim.profile, h.engine.state())
    h.send_body(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")


def _tokenize(h: Handler, req: Request) -> None:
    data = json_body(req)
    _check_model(h, data)
    if isinstance(data.get("messages"), list):
        ids = tok.chat_token_ids(_messages(data))
    elif "prompt" in data:
        text, n = _prompt(data)
        ids = tok.token_ids(text) if n is None else [tok.token_id(str(i)) for i in range(n)]
    else:
        raise ApiError(400, "Either 'prompt' or 'messages' is required.", param="prompt")
    h.send_json(
        200,
        {"count": len(ids), "max_model_len": h.sim.profile.context_window if h.sim.profile.publish_window else None,
         "tokens": ids, "token_strs": None},
    )


def _check_model(h: Handler, data: dict[str, Any]) -> None:
    model = data.get("model")
    if model is not None and model != h.sim.profile.model:
        raise ApiError(404, f"The model `{model}` does not exist.", code="model_not_found", param="model")


def _messages(data: dict[str, Any]) -> list[dict[str, Any]]:
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ApiError(400, "'messages' must be a non-empty array of message objects.", param="messages")
    return messages


def _prompt(data: dict[str, Any]) -> tuple[str, int | None]:
    try:
        return tok.prompt_text(data.get("prompt"))
    except ValueError as exc:
        raise ApiError(400, str(exc), param="prompt") from None


@dataclass
class _Plan:
    """What a generation request will produce: decided before any waiting."""

    chat: bool
    stream: bool
    include_usage: bool
    prompt_tokens: int
    reasoning: list[str]
    #: Prompt tokens served from the prefix cache (`LatencyProfile.prefix_cache`): not prefilled again.
    cached_tokens: int
    content: list[str]
    finish_reason: str
    id: str
    created: int

    @property
    def completion_tokens(self) -> int:
        return len(self.reasoning) + len(self.content)

    def usage(self) -> dict[str, Any]:
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }
        if self.reasoning:
            usage["completion_tokens_details"] = {"reasoning_tokens": len(self.reasoning)}
        return usage


def _plan(h: Handler, data: dict[str, Any], chat: bool) -> _Plan:
    """Validate a generation request and decide its output (OpenAI/vLLM semantics)."""
    p = h.sim.profile
    _check_model(h, data)
    if chat:
        prompt_tokens = tok.count_chat_tokens(_messages(data))
    else:
        text, n = _prompt(data)
        prompt_tokens = tok.count_tokens(text) if n is None else n
    key = "max_completion_tokens" if chat and data.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = data.get(key)
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise ApiError(400, f"'{key}' must be a positive integer, got {max_tokens!r}.", param=key)
    requested = prompt_tokens + (max_tokens or 0)
    if prompt_tokens >= p.context_window or requested > p.context_window:
        raise ApiError(
            400,
            f"This model's maximum context length is {p.context_window} tokens. However, you requested "
            f"{requested} tokens ({prompt_tokens} in the messages, {max_tokens or 0} in the completion). "
            "Please reduce the length of the messages or completion.",
            code="context_length_exceeded",
            param="messages" if chat else "prompt",
        )
    limit = max_tokens if max_tokens is not None else p.context_window - prompt_tokens
    reasoning_wanted = p.reasoning_tokens if chat else 0
    forced = bool(data.get("ignore_eos")) and p.honours_ignore_eos
    wanted = math.inf if forced else reasoning_wanted + p.natural_output_tokens
    min_tokens = data.get("min_tokens")
    if isinstance(min_tokens, int) and not isinstance(min_tokens, bool) and min_tokens > 0:
        wanted = max(wanted, min_tokens)  # vLLM, SGLang, llama.cpp: no EOS before min_tokens
    total = int(min(wanted, limit))
    n_reasoning = min(reasoning_wanted, total)
    stream_options = data.get("stream_options") or {}
    prefix = "chatcmpl" if chat else "cmpl"
    return _Plan(
        chat=chat,
        stream=bool(data.get("stream")),
        include_usage=p.stream_usage and bool(isinstance(stream_options, dict) and stream_options.get("include_usage")),
        prompt_tokens=prompt_tokens,
        cached_tokens=prompt_tokens - 1 if h.engine.cached(json.dumps(data.get("messages", data.get("prompt")),
                                                                     sort_keys=True)) else 0,
        reasoning=tok.reasoning_tokens(n_reasoning),
        content=tok.generated_tokens(total - n_reasoning),
        finish_reason="stop" if wanted < limit else "length",
        id=f"{prefix}-sim{h.sim.next_id():08x}",
        created=int(time.time()),
    )


def _chunk(plan: _Plan, model: str, delta_or_text: dict[str, Any] | str, finish: str | None) -> dict[str, Any]:
    if plan.chat:
        choice: dict[str, Any] = {
            "index": 0,
            "delta": delta_or_text,
            "logprobs": None,
            "finish_reason": finish,
        }
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": delta_or_text, "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    chunk: dict[str, Any] = {
        "id": plan.id,
        "object": obj,
        "created": plan.created,
        "model": model,
        "choices": [choice],
    }
    if plan.include_usage:
        chunk["usage"] = None
    return chunk


def _final_body(plan: _Plan, model: str) -> dict[str, Any]:
    answer = "".join(plan.content)
    if plan.chat:
        message: dict[str, Any] = {"role": "assistant", "content": answer}
        if plan.reasoning:
            message["reasoning_content"] = "".join(plan.reasoning)
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": plan.finish_reason,
        }
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": answer, "logprobs": None, "finish_reason": plan.finish_reason}
        obj = "text_completion"
    return {
        "id": plan.id,
        "object": obj,
        "created": plan.created,
        "model": model,
        "choices": [choice],
        "usage": plan.usage(),
    }


def _ms_since(t: float) -> str:
    """Whole milliseconds since the monotonic instant `t`, as the servers' headers write them."""
    return str(int((time.monotonic() - t) * 1000))


def _stream_headers(h: Handler, req: Request) -> dict[str, str]:
    """The server-clock headers a flavor sends when it starts a stream (before any waiting)."""
    flavor = h.sim.profile.flavor
    if flavor == "openai":  # the time to start the stream, as llama-cpp-python sends it
        return {"openai-processing-ms": _ms_since(req.arrived_at)}
    if flavor == "tgi":  # generate_stream_internal: no timing headers, and nginx must not buffer
        return {"x-compute-type": "1-nvidia-h100", "X-Accel-Buffering": "no"}
    return {}


def _final_headers(h: Handler, req: Request, plan: _Plan, scheduled_at: float) -> dict[str, str]:
    """The server-clock headers of a non-streamed answer (sent with it, once the work is done)."""
    flavor = h.sim.profile.flavor
    if flavor == "openai":
        return {"openai-processing-ms": _ms_since(req.arrived_at)}
    if flavor != "tgi":
        return {}
    now = time.monotonic()
    n = plan.completion_tokens
    inference = now - scheduled_at
    return {  # generate_internal's headers, which TGI's non-streamed chat_completions passes on
        "x-compute-type": "1-nvidia-h100",
        "x-compute-time": f"{now - req.arrived_at:.6f}",
        "x-total-time": str(int((now - req.arrived_at) * 1000)),
        "x-validation-time": "0",
        "x-queue-time": str(int((scheduled_at - req.arrived_at) * 1000)),
        "x-inference-time": str(int(inference * 1000)),
        "x-time-per-token": str(int(inference * 1000 / n)) if n else "0",
        "x-prompt-tokens": str(plan.prompt_tokens),
        "x-generated-tokens": str(n),
    }


def _request_metrics(queued: float, scheduled: float, emitted: list[float]) -> dict[str, float]:
    """vLLM 0.32's per-request ``metrics`` (``build_per_request_timing_metrics``): engine spans in ms.

    ``time_to_first_token_ms`` runs from scheduling (not arrival) to the first token; fields whose
    timestamps are missing (no token) are left out, as vLLM leaves them out.
    """
    out = {"queue_time_ms": (scheduled - queued) * 1000}
    if emitted:
        out["time_to_first_token_ms"] = (emitted[0] - scheduled) * 1000
        out["generation_time_ms"] = (emitted[-1] - emitted[0]) * 1000
        if len(emitted) > 1:
            out["mean_itl_ms"] = out["generation_time_ms"] / (len(emitted) - 1)
        if emitted[-1] > scheduled:
            out["tokens_per_second"] = len(emitted) / (emitted[-1] - scheduled)
    return out


def _generate(h: Handler, req: Request, chat: bool) -> None:
    """Serve one chat or text completion, stream or not, following the latency model.

    Each flavor reports its own clocks as that server does: ``openai-processing-ms`` (openai),
    TGI's ``x-*-time`` headers on non-streamed answers (tgi), llama.cpp's ``timings`` (llamacpp),
    vLLM's per-request ``metrics`` when `LatencyProfile.per_request_metrics` is on (on a stream: only
    in the final usage chunk, so only when the request asks for usage), and every flavor with
    ``/metrics`` counts the request in its histograms.
    """
    p, engine = h.sim.profile, h.engine
    data = json_body(req)
    if engine.is_loading():
        raise ApiError(503, "Loading model", "unavailable_error", code=503)  # llama.cpp's answer
    if engine.refuses():  # OpenAI's 429 body; Retry-After as its API sends it
        retry = {"Retry-After": f"{p.retry_after_s:g}"} if p.retry_after_s is not None else None
        raise ApiError(p.refuse_status, "Rate limit reached for requests (simulated).", "requests",
                       code="rate_limit_exceeded" if p.refuse_status == 429 else None, headers=retry)
    if p.fail_status is not None:
        type_ = "server_error" if p.fail_status >= 500 else "invalid_request_error"
        raise ApiError(
            p.fail_status,
            f"Simulated failure (HTTP {p.fail_status}).",
            type_,
            code="rate_limit_exceeded" if p.fail_status == 429 else None,
        )
    plan = _plan(h, data, chat)
    if plan.stream:
        h.start_stream(_stream_headers(h, req))  # headers go out at once, as vLLM does; the waiting happens after
    pieces = [("reasoning_content", t) for t in plan.reasoning] + [("content", t) for t in plan.content]
    emitted: list[float] = []  # when each token went out
    with engine.admitted(plan.prompt_tokens):
        t0 = time.monotonic()
        try:
            first_at = t0 + engine.first_token_offset_s(plan.prompt_tokens - plan.cached_tokens, t0)
            for i, (kind, text) in enumerate(pieces):
                if p.stream_cut_after is not None and i >= p.stream_cut_after:
                    break
                engine.sleep_until(first_at + (i + 1) * engine.decode_s())
                if plan.stream:
                    if i == 0 and chat:
                        h.send_event(_chunk(plan, p.model, {"role": "assistant", "content": ""}, None))
                    h.send_event(_chunk(plan, p.model, {kind: text} if chat else text, None))
                engine.token_emitted(i, req.arrived_at)
                emitted.append(time.monotonic())
        finally:
            engine.release_kv(len(emitted))
        if p.stream_cut_after is not None and len(pieces) > p.stream_cut_after:
            h.cut_connection()
            return
    engine.request_finished(req.arrived_at, t0, emitted)
    timings = None
    if p.flavor == "llamacpp":
        # llama.cpp: prompt_ms runs through the first token's sampling, predicted_ms from it to the last.
        first = emitted[0] if emitted else time.monotonic()
        decode_s = (emitted[-1] - first) if emitted else 0.0
        timings = llamacpp_timings(plan.prompt_tokens, first - t0, len(emitted), decode_s)
    metrics = _request_metrics(req.arrived_at, t0, emitted) if p.per_request_metrics else None
    if plan.stream:
        last = _chunk(plan, p.model, {} if chat else "", plan.finish_reason)
        if timings is not None:
            last["timings"] = timings
        h.send_event(last)
        if plan.include_usage:
            h.send_event(
                {
                    "id": plan.id,
                    "object": "chat.completion.chunk" if chat else "text_completion",
                    "created": plan.created,
                    "model": p.model,
                    "choices": [],
                    "usage": plan.usage(),
                    **({"metrics": metrics} if metrics is not None else {}),
                }
            )
        h.end_stream()
    else:
        body = _final_body(plan, p.model)
        if timings is not None:
            body["timings"] = timings
        if metrics is not None:
            body["metrics"] = metrics
        h.send_json(200, body, _final_headers(h, req, plan, t0))


def _chat_completions(h: Handler, req: Request) -> None:
    _generate(h, req, chat=True)


def _completions(h: Handler, req: Request) -> None:
    _generate(h, req, chat=False)


GENERATION_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})

ROUTES: Routes = {
    "/v1/models": {"GET": _models},
    "/v1/chat/completions": {"POST": _chat_completions},
    "/v1/completions": {"POST": _completions},
    "/tokenize": {"POST": _tokenize},
    "/metrics": {"GET": _metrics},
    "/health": {"GET": _health},
}
