"""The simulator's native APIs: what each `flavor` serves beyond the OpenAI-compatible routes.

Shapes follow the backends' own documentation and code, as llmdoctor's adapters read them:

- **vllm**: the OpenAI-compatible routes and ``POST /tokenize`` (``llmdoctor.sim.openai``).
- **tgi**: ``/metrics`` with ``tgi_`` names; ``POST /generate`` answering
  ``{"generated_text", "details"}`` with the ``x-compute-time`` (seconds), ``x-total-time``,
  ``x-validation-time``, ``x-queue-time``, ``x-inference-time``, ``x-time-per-token`` (whole ms),
  ``x-prompt-tokens`` and ``x-generated-tokens`` headers; ``POST /generate_stream`` (SSE of
  ``{"token": {...}}`` events, only ``x-compute-type`` / ``x-compute-characters`` headers)
  (huggingface/text-generation-inference ``router/src/server.rs``).
- **ollama**: no ``/metrics``; ``POST /api/generate`` and ``/api/chat`` (NDJSON stream by default,
  durations in nanoseconds: ``total_duration``, ``load_duration``, ``prompt_eval_duration``,
  ``eval_duration``), ``GET /api/ps`` (loaded models) (ollama ``docs/api.md``).
- **llamacpp**: ``/metrics`` with ``llamacpp:`` names, ``GET /props`` (``total_slots``,
  ``default_generation_settings.n_ctx``), ``GET /slots``, ``POST /tokenize`` ``{"content"}``, and a
  ``timings`` object in non-streamed answers and the final stream chunk (ggml-org/llama.cpp
  ``tools/server/README.md``).

Every delay still comes from the engine (`llmdoctor.sim.engine.Engine`), so native and OpenAI routes
of one simulator share the latency model, the cold start and the counters. The `/metrics` names of
each flavor are in `llmdoctor.sim.metrics`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from llmdoctor.sim import tokens as tok
from llmdoctor.sim.httpd import ApiError, Handler, Request, Route, json_body

__all__ = ["native_routes", "llamacpp_timings"]

NS = 1_000_000_000
OLLAMA_KEEP_ALIVE_S = 300


def llamacpp_timings(prompt_tokens: int, prompt_s: float, predicted: int, predicted_s: float) -> dict[str, float]:
    """llama.cpp server's ``timings`` object (ms, and tokens per second; ``result_timings::to_json``)."""
    prompt_ms, predicted_ms = prompt_s * 1000.0, predicted_s * 1000.0
    return {
        "cache_n": 0,
        "prompt_n": prompt_tokens,
        "prompt_ms": round(prompt_ms, 3),
        "prompt_per_token_ms": round(prompt_ms / prompt_tokens, 3) if prompt_tokens else 0.0,
        "prompt_per_second": round(prompt_tokens / prompt_s, 3) if prompt_s > 0 else 0.0,
        "predicted_n": predicted,
        "predicted_ms": round(predicted_ms, 3),
        "predicted_per_token_ms": round(predicted_ms / predicted, 3) if predicted else 0.0,
        "predicted_per_second": round(predicted / predicted_s, 3) if predicted_s > 0 else 0.0,
    }


# ---------------------------------------------------------------------------------------------
# Generation through the engine, shared by the native routes


def _run(
    h: Handler, req: Request, prompt_tokens: int, n: int, on_token: Callable[[int, str], None]
) -> dict[str, float]:
    """Wait as the engine says and call `on_token` per token; return the phase times in seconds."""
    engine = h.engine
    pieces = tok.generated_tokens(n)
    with engine.admitted(prompt_tokens):
        admitted = time.monotonic()
        first_at = admitted + engine.first_token_offset_s(prompt_tokens, admitted)
        emitted: list[float] = []
        try:
            for i, text in enumerate(pieces):
                engine.sleep_until(first_at + (i + 1) * engine.decode_s())
                on_token(i, text)
                engine.token_emitted(i, req.arrived_at)
                emitted.append(time.monotonic())
        finally:
            engine.release_kv(len(emitted))
        end = time.monotonic()
    engine.request_finished(req.arrived_at, admitted, emitted)
    return {
        "queue": admitted - req.arrived_at,
        "prefill": first_at - admitted,
        "decode": end - first_at,
        "inference": end - admitted,
        "total": end - req.arrived_at,
    }


def _wanted(h: Handler, limit: int | None) -> int:
    natural = h.sim.profile.natural_output_tokens
    return natural if limit is None else max(0, min(limit, natural))


# ---------------------------------------------------------------------------------------------
# TGI


def _tgi_request(h: Handler, req: Request) -> tuple[int, int]:
    data = json_body(req)
    inputs = data.get("inputs")
    if not isinstance(inputs, str):
        raise ApiError(422, "inputs: expected a string")
    params = data.get("parameters") or {}
    max_new = params.get("max_new_tokens") if isinstance(params, dict) else None
    if max_new is not None and (not isinstance(max_new, int) or max_new < 1):
        raise ApiError(422, "max_new_tokens must be a positive integer")
    return tok.count_tokens(inputs), _wanted(h, max_new if max_new is not None else 20)


def _tgi_generate(h: Handler, req: Request) -> None:
    prompt_tokens, n = _tgi_request(h, req)
    texts: list[str] = []
    phases = _run(h, req, prompt_tokens, n, lambda i, t: texts.append(t))
    per_token_ms = int(phases["inference"] * 1000 / n) if n else 0  # TGI: inference / tokens
    headers = {
        "x-compute-type": "1-nvidia-h100",
        "x-compute-time": f"{phases['total']:.6f}",
        "x-compute-characters": str(len(json.loads(req.body)["inputs"])),
        "x-total-time": str(int(phases["total"] * 1000)),
        "x-validation-time": "0",
        "x-queue-time": str(int(phases["queue"] * 1000)),
        "x-inference-time": str(int(phases["inference"] * 1000)),
        "x-time-per-token": str(per_token_ms),
        "x-prompt-tokens": str(prompt_tokens),
        "x-generated-tokens": str(n),
    }
    details = {"finish_reason": "length", "generated_tokens": n, "seed": None}
    h.send_json(200, {"generated_text": "".join(texts), "details": details}, headers)


def _tgi_generate_stream(h: Handler, req: Request) -> None:
    prompt_tokens, n = _tgi_request(h, req)
    h.send_response(200)
    h.send_header("Content-Type", "text/event-stream")
    h.send_header("Transfer-Encoding", "chunked")
    h.send_header("x-compute-type", "1-nvidia-h100")
    h.send_header("x-compute-characters", str(len(json.loads(req.body)["inputs"])))
    h.end_headers()
    texts: list[str] = []

    def token(i: int, text: str) -> None:
        texts.append(text)
        last = i == n - 1
        h.send_event({
            "index": i,
            "token": {"id": tok.token_id(text), "text": text, "logprob": -0.5, "special": False},
            "generated_text": "".join(texts) if last else None,
            "details": {"finish_reason": "length", "generated_tokens": n, "seed": None} if last else None,
        })

    _run(h, req, prompt_tokens, n, token)
    h.end_chunks()


def _tgi_tokenize(h: Handler, req: Request) -> None:
    data = json_body(req)
    if not isinstance(data.get("inputs"), str):
        raise ApiError(422, "inputs: expected a string")
    ids = tok.token_ids(data["inputs"])
    h.send_json(200, [{"id": i, "text": "", "start": 0, "stop": 0} for i in ids])


# ---------------------------------------------------------------------------------------------
# Ollama


def _ollama(h: Handler, req: Request, chat: bool) -> None:
    data = json_body(req)
    model = data.get("model")
    if model != h.sim.profile.model:
        raise ApiError(404, f"model '{model}' not found")
    if chat:
        messages = data.get("messages")
        if not isinstance(messages, list):
            raise ApiError(400, "messages: expected a list")
        prompt_tokens = tok.count_chat_tokens(messages)
    else:
        prompt_tokens = tok.count_tokens(str(data.get("prompt") or ""))
    options = data.get("options") or {}
    n = _wanted(h, options.get("num_predict") if isinstance(options, dict) else None)
    stream = data.get("stream", True) is not False
    cold = not h.engine.loaded  # the load the engine is about to pay
    if stream:
        h.send_response(200)
        h.send_header("Content-Type", "application/x-ndjson")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
    texts: list[str] = []
    created = datetime.now(timezone.utc).isoformat()

    def piece(text: str, done: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"model": model, "created_at": created, "done": done}
        if chat:
            out["message"] = {"role": "assistant", "content": text}
        else:
            out["response"] = text
        return out

    def write_line(obj: dict[str, Any]) -> None:
        h.write_chunk((json.dumps(obj) + "\n").encode())

    def token(i: int, text: str) -> None:
        texts.append(text)
        if stream:
            write_line(piece(text, False))

    phases = _run(h, req, prompt_tokens, n, token)
    load_s = h.sim.profile.cold_start_ms / 1000.0 if cold else 0.0
    final = piece("" if stream else "".join(texts), True)
    final.update({
        "done_reason": "length" if n else "stop",
        "total_duration": int(phases["total"] * NS),
        "load_duration": int(load_s * NS),
        "prompt_eval_count": prompt_tokens,
        "prompt_eval_duration": int(max(0.0, phases["prefill"] - load_s) * NS),
        "eval_count": n,
        "eval_duration": int(phases["decode"] * NS),
    })
    if stream:
        write_line(final)
        h.end_chunks()
    else:
        h.send_json(200, final)


def _ollama_ps(h: Handler, req: Request) -> None:
    p = h.sim.profile
    models = []
    if h.engine.loaded:
        expires = datetime.now(timezone.utc) + timedelta(seconds=OLLAMA_KEEP_ALIVE_S)
        size = 4_920_000_000
        models.append({
            "name": p.model, "model": p.model, "size": size, "size_vram": size,
            "digest": "0" * 64, "expires_at": expires.isoformat().replace("+00:00", "Z"),
            "context_length": p.context_window,
        })
    h.send_json(200, {"models": models})


# ---------------------------------------------------------------------------------------------
# llama.cpp server


def _llamacpp_props(h: Handler, req: Request) -> None:
    p = h.sim.profile
    h.send_json(200, {
        "default_generation_settings": {"n_ctx": p.context_window, "params": {"n_predict": -1}},
        "total_slots": p.max_concurrency or 1,
        "model_path": f"/models/{p.model}.gguf",
        "chat_template": "",
        "build_info": "llmdoctor-sim",
    })


def _llamacpp_slots(h: Handler, req: Request) -> None:
    p = h.sim.profile
    total = p.max_concurrency or 1
    busy = min(h.engine.running, total)
    h.send_json(200, [
        {"id": i, "n_ctx": p.context_window, "is_processing": i < busy, "id_task": -1} for i in range(total)
    ])


def _llamacpp_tokenize(h: Handler, req: Request) -> None:
    data = json_body(req)
    if not isinstance(data.get("content"), str):
        raise ApiError(400, "\"content\" must be provided")
    h.send_json(200, {"tokens": tok.token_ids(data["content"])})


def native_routes(flavor: str) -> dict[str, dict[str, Route]]:
    """Routes a flavor adds to (or, with None handlers, removes from) the OpenAI-compatible ones."""
    if flavor == "tgi":
        return {"/generate": {"POST": _tgi_generate}, "/generate_stream": {"POST": _tgi_generate_stream},
                "/tokenize": {"POST": _tgi_tokenize}}
    if flavor == "ollama":
        return {"/api/generate": {"POST": lambda h, r: _ollama(h, r, chat=False)},
                "/api/chat": {"POST": lambda h, r: _ollama(h, r, chat=True)},
                "/api/ps": {"GET": _ollama_ps}}
    if flavor == "llamacpp":
        return {"/props": {"GET": _llamacpp_props}, "/slots": {"GET": _llamacpp_slots},
                "/tokenize": {"POST": _llamacpp_tokenize}}
    return {}
