"""A real OpenAI-compatible HTTP server on loopback that follows a `LatencyProfile`.

It speaks HTTP/1.1 with keep-alive, streams Server-Sent Events with chunked
transfer encoding (one chunk per event, flushed at once) and really sleeps, so a
client that measures it measures something true. Used by `llmdoctor demo` and as
the main fixture of the test suite.

Endpoints: `GET /v1/models`, `POST /v1/chat/completions`, `POST /v1/completions`,
`POST /tokenize` (vLLM's shape), `GET /metrics` (vLLM V1 Prometheus names) and
`GET /health`.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from llmdoctor.sim import native
from llmdoctor.sim import tokens as tok
from llmdoctor.sim.profiles import LatencyProfile

__all__ = ["SimServer", "serve_forever"]


class _Stopped(Exception):
    """The server is stopping: abandon the request."""


# ---------------------------------------------------------------------------------------------
# Metrics (Prometheus text exposition, vLLM V1 names)
# ---------------------------------------------------------------------------------------------
# Names, labels (model_name, engine) and help texts follow vLLM's V1 Prometheus logger
# (vllm-project/vllm, vllm/v1/metrics/loggers.py: PrometheusStatLogger) and its metrics design
# doc (docs/design/metrics.md). Bucket bounds follow the ones vLLM uses for these histograms.
_TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
_REQUEST_LATENCY_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


@dataclass
class _Histogram:
    """A cumulative Prometheus histogram (not thread-safe; guarded by the engine's lock)."""

    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
        self.total += value
        self.count += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out = [
            f'{name}_bucket{{{labels},le="{_fmt(b)}"}} {float(c)}'
            for b, c in zip(self.buckets, self.counts, strict=True)
        ]
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(self.count)}')
        out.append(f"{name}_sum{{{labels}}} {self.total!r}")
        out.append(f"{name}_count{{{labels}}} {float(self.count)}")
        return out


def _fmt(x: float) -> str:
    return repr(float(x))


# ---------------------------------------------------------------------------------------------
# The latency model and the engine state (the one place that decides how long things take)
# ---------------------------------------------------------------------------------------------
class _Engine:
    """Shared state of the simulated inference engine: slots, cold start, jitter, metrics.

    Every delay of a generation request is decided here; the HTTP layer only asks.
    """

    def __init__(self, profile: LatencyProfile, stopping: threading.Event) -> None:
        self.profile = profile
        self.stopping = stopping
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._rng = random.Random(profile.seed)
        self._slots = threading.Semaphore(profile.max_concurrency) if profile.max_concurrency else None
        self._loaded = False  # has the cold start been paid?
        self._warm_at = 0.0  # monotonic time when an in-progress load finishes
        self._last_done = self.started
        # Live state, as exported by /metrics.
        self.running = 0
        self.waiting = 0
        self._kv_tokens = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.ttft = _Histogram(_TTFT_BUCKETS)
        self.queue_time = _Histogram(_REQUEST_LATENCY_BUCKETS)

    # -- time --------------------------------------------------------------------------------
    def sleep_until(self, deadline: float) -> None:
        """Really sleep until the monotonic `deadline`; raise `_Stopped` if the server stops."""
        remaining = deadline - time.monotonic()
        if remaining > 0 and self.stopping.wait(remaining):
            raise _Stopped
        if self.stopping.is_set():
            raise _Stopped

    def is_loading(self) -> bool:
        return time.monotonic() - self.started < self.profile.loading_for_s

    # -- the latency model -------------------------------------------------------------------
    def _cold_start_s(self, now: float) -> float:
        """Cold-start delay due now (lock held): first load, idle unload, or a load in progress."""
        p = self.profile
        if now < self._warm_at:  # another request is loading the model: wait for it
            return self._warm_at - now
        # Unloaded after idling: nothing else is running (this request is already counted).
        idle_unloaded = p.idle_unload_s is not None and self.running <= 1 and now - self._last_done > p.idle_unload_s
        if not self._loaded or idle_unloaded:
            self._loaded = True
            self._warm_at = now + p.cold_start_ms / 1000.0
            return p.cold_start_ms / 1000.0
        return 0.0

    def first_token_offset_s(self, prompt_tokens: int, now: float) -> float:
        """Seconds from admission to the start of decode: cold start + fixed (+jitter) + prefill."""
        p = self.profile
        with self._lock:
            cold = self._cold_start_s(now)
            jitter = self._rng.uniform(-p.jitter_ms, p.jitter_ms) if p.jitter_ms else 0.0
        fixed = max(p.fixed_ms + jitter, 0.0)
        return cold + (fixed + prompt_tokens * p.per_prompt_token_ms) / 1000.0

    def decode_s(self) -> float:
        """Seconds of decode per output token."""
        return self.profile.per_output_token_ms / 1000.0

    # -- admission ---------------------------------------------------------------------------
    @contextmanager
    def admitted(self, prompt_tokens: int) -> Iterator[None]:
        """Wait for a concurrency slot (queueing), then count the request as running."""
        queued_at = time.monotonic()
        if self._slots is not None:
            with self._lock:
                self.waiting += 1
            try:
                while not self._slots.acquire(timeout=0.05):
                    if self.stopping.is_set():
                        raise _Stopped
            finally:
                with self._lock:
                    self.waiting -= 1
        try:
            with self._lock:
                self.queue_time.observe(time.monotonic() - queued_at)
                self.running += 1
                self._kv_tokens += prompt_tokens
                self.prompt_tokens_total += prompt_tokens
            yield
        finally:
            with self._lock:
                self.running -= 1
                self._kv_tokens -= prompt_tokens
                self._last_done = time.monotonic()
            if self._slots is not None:
                self._slots.release()

    def token_emitted(self, index: int, arrived_at: float) -> None:
        """Account one generated token (index 0 is the first: observe TTFT)."""
        with self._lock:
            self.generation_tokens_total += 1
            self._kv_tokens += 1
            if index == 0:
                self.ttft.observe(time.monotonic() - arrived_at)

    def release_kv(self, n: int) -> None:
        """Free the KV cache of `n` generated tokens when their request ends."""
        with self._lock:
            self._kv_tokens -= n

    # -- metrics -----------------------------------------------------------------------------
    def metrics_text(self) -> str:
        """The Prometheus text exposition of the engine's current state."""
        p = self.profile
        labels = f'engine="0",model_name="{p.model}"'
        # KV capacity: one full context per possible concurrent request (4 when unlimited).
        capacity = p.context_window * (p.max_concurrency or 4)
        with self._lock:
            kv = min(max(self._kv_tokens, 0) / capacity, 1.0)
            families: list[tuple[str, str, str, list[str]]] = [
                (
                    "vllm:num_requests_running",
                    "gauge",
                    "Number of requests in model execution batches.",
                    [f"vllm:num_requests_running{{{labels}}} {float(self.running)}"],
                ),
                (
                    "vllm:num_requests_waiting",
                    "gauge",
                    "Number of requests waiting to be processed.",
                    [f"vllm:num_requests_waiting{{{labels}}} {float(self.waiting)}"],
                ),
                (
                    "vllm:kv_cache_usage_perc",
                    "gauge",
                    "KV-cache usage. 1 means 100 percent usage.",
                    [f"vllm:kv_cache_usage_perc{{{labels}}} {kv!r}"],
                ),
                (
                    "vllm:num_preemptions_total",
                    "counter",
                    "Cumulative number of preemption from the engine.",
                    [f"vllm:num_preemptions_total{{{labels}}} 0.0"],
                ),
                (
                    "vllm:prompt_tokens_total",
                    "counter",
                    "Number of prefill tokens processed.",
                    [f"vllm:prompt_tokens_total{{{labels}}} {float(self.prompt_tokens_total)}"],
                ),
                (
                    "vllm:generation_tokens_total",
                    "counter",
                    "Number of generation tokens processed.",
                    [f"vllm:generation_tokens_total{{{labels}}} {float(self.generation_tokens_total)}"],
                ),
                (
                    "vllm:time_to_first_token_seconds",
                    "histogram",
                    "Histogram of time to first token in seconds.",
                    self.ttft.lines("vllm:time_to_first_token_seconds", labels),
                ),
                (
                    "vllm:request_queue_time_seconds",
                    "histogram",
                    "Histogram of time spent in WAITING phase for request.",
                    self.queue_time.lines("vllm:request_queue_time_seconds", labels),
                ),
            ]
            flavored = native.metrics_families(self, kv)
        if flavored is not None:
            families = flavored
        out: list[str] = []
        for name, kind, help_text, samples in families:
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(samples)
        return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# HTTP plumbing
# ---------------------------------------------------------------------------------------------
@dataclass
class _Request:
    """One parsed HTTP request."""

    method: str
    path: str
    headers: Any
    body: bytes
    arrived_at: float


class _ApiError(Exception):
    """An error answered as an OpenAI-shaped JSON body."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        code: str | int | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": type_, "param": param, "code": code}}


class _HTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that counts connections and can cut them all on stop."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], sim: SimServer) -> None:
        self.sim = sim
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        self.sim._count("connection")
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet about connections dropped by the peer or by stop(); report anything else."""
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)

    def cut_all(self) -> None:
        """Shut down every open connection (streams in flight, idle keep-alive ones)."""
        with self._open_lock:
            conns = list(self._open)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    """Reads a request, dispatches it by (method, path) and writes the response."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # TCP_NODELAY: no 40 ms Nagle/delayed-ACK stalls between writes
    server_version = "llmdoctor-sim/0.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default per-request logging to stderr."""

    @property
    def sim(self) -> SimServer:
        return self.server.sim

    @property
    def engine(self) -> _Engine:
        return self.server.sim._engine

    # -- dispatch ----------------------------------------------------------------------------
    def _dispatch(self) -> None:
        arrived_at = time.monotonic()
        path = self.path.split("?", 1)[0]
        self.sim._count("request", path)
        try:
            body = self._read_body()
        except ValueError as exc:
            self.close_connection = True
            self.send_json(400, _ApiError(400, f"Bad request body: {exc}").body)
            return
        req = _Request(self.command, path, self.headers, body, arrived_at)
        methods = _routes(self.sim.profile.flavor).get(path)
        try:
            if methods is None:
                raise _ApiError(404, f"Not found: {path}", code="not_found")
            handler = methods.get(self.command)
            if handler is None:
                raise _ApiError(405, f"Method {self.command} not allowed for {path}", code="method_not_allowed")
            if path in _GENERATION_PATHS:
                self.sim._count("generation")
            if path.startswith("/v1/"):
                self._check_api_key()
            handler(self, req)
        except _ApiError as err:
            extra = {"Allow": ", ".join(sorted(methods))} if err.status == 405 and methods else None
            self.send_json(err.status, err.body, extra)
        except _Stopped:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):  # the client went away mid-response
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _dispatch

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0:
            raise ValueError("negative Content-Length")
        return self.rfile.read(length) if length else b""

    def _check_api_key(self) -> None:
        key = self.sim.profile.require_api_key
        if key is None:
            return
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            raise _ApiError(
                401,
                "You didn't provide an API key. Provide it in the Authorization header "
                "(Authorization: Bearer YOUR_KEY).",
                code="invalid_api_key",
            )
        if auth[len("Bearer ") :].strip() != key:
            raise _ApiError(401, "Incorrect API key provided.", code="invalid_api_key")

    # -- responses ---------------------------------------------------------------------------
    def _common_headers(self) -> None:
        if self.sim.profile.close_connections:
            self.send_header("Connection", "close")
            self.close_connection = True

    def send_body(self, status: int, body: bytes, content_type: str, extra: dict[str, str] | None = None) -> None:
        """Send a complete response with Content-Length."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self._common_headers()
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_json(self, status: int, obj: Any, extra: dict[str, str] | None = None) -> None:
        """Send a JSON response."""
        self.send_body(status, json.dumps(obj).encode("utf-8"), "application/json", extra)

    def start_stream(self) -> None:
        """Send the headers of an SSE response (chunked), before any waiting."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self._common_headers()
        self.end_headers()
        self.wfile.flush()

    def send_event(self, data: Any) -> None:
        """Send one SSE event as one HTTP chunk (`data` is JSON-encoded unless a str)."""
        payload = data if isinstance(data, str) else json.dumps(data)
        event = f"data: {payload}\n\n".encode()
        self.wfile.write(f"{len(event):X}\r\n".encode() + event + b"\r\n")
        self.wfile.flush()

    def end_stream(self) -> None:
        """Send `data: [DONE]` and the terminating zero-length chunk."""
        self.send_event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def cut_connection(self) -> None:
        """Drop the connection abruptly, as a crashing server would."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


# ---------------------------------------------------------------------------------------------
# Endpoints
# ---------------------------------------------------------------------------------------------
def _json_body(req: _Request) -> dict[str, Any]:
    try:
        data = json.loads(req.body or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise _ApiError(400, f"Invalid JSON body: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise _ApiError(400, "The request body must be a JSON object.", code="invalid_json")
    return data


def _models(h: _Handler, req: _Request) -> None:
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
                    "max_model_len": p.context_window,
                }
            ],
        },
    )


def _health(h: _Handler, req: _Request) -> None:
    if h.engine.is_loading():
        h.send_json(503, _ApiError(503, "Loading model", "unavailable_error", code=503).body)
    else:
        h.send_body(200, b"", "text/plain")


def _metrics(h: _Handler, req: _Request) -> None:
    if h.sim.profile.flavor == "ollama":  # Ollama has no Prometheus endpoint
        raise _ApiError(404, "404 page not found", code="not_found")
    h.send_body(200, h.engine.metrics_text().encode(), "text/plain; version=0.0.4; charset=utf-8")


def _tokenize(h: _Handler, req: _Request) -> None:
    data = _json_body(req)
    _check_model(h, data)
    if isinstance(data.get("messages"), list):
        ids = tok.chat_token_ids(_messages(data))
    elif "prompt" in data:
        text, n = _prompt(data)
        ids = tok.token_ids(text) if n is None else [tok.token_id(str(i)) for i in range(n)]
    else:
        raise _ApiError(400, "Either 'prompt' or 'messages' is required.", param="prompt")
    h.send_json(
        200,
        {"count": len(ids), "max_model_len": h.sim.profile.context_window, "tokens": ids, "token_strs": None},
    )


def _check_model(h: _Handler, data: dict[str, Any]) -> None:
    model = data.get("model")
    if model is not None and model != h.sim.profile.model:
        raise _ApiError(404, f"The model `{model}` does not exist.", code="model_not_found", param="model")


def _messages(data: dict[str, Any]) -> list[dict[str, Any]]:
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise _ApiError(400, "'messages' must be a non-empty array of message objects.", param="messages")
    return messages


def _prompt(data: dict[str, Any]) -> tuple[str, int | None]:
    try:
        return tok.prompt_text(data.get("prompt"))
    except ValueError as exc:
        raise _ApiError(400, str(exc), param="prompt") from None


@dataclass
class _Plan:
    """What a generation request will produce: decided before any waiting."""

    chat: bool
    stream: bool
    include_usage: bool
    prompt_tokens: int
    reasoning: list[str]
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


def _plan(h: _Handler, data: dict[str, Any], chat: bool) -> _Plan:
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
        raise _ApiError(400, f"'{key}' must be a positive integer, got {max_tokens!r}.", param=key)
    requested = prompt_tokens + (max_tokens or 0)
    if prompt_tokens >= p.context_window or requested > p.context_window:
        raise _ApiError(
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
        include_usage=bool(isinstance(stream_options, dict) and stream_options.get("include_usage")),
        prompt_tokens=prompt_tokens,
        reasoning=tok.reasoning_tokens(n_reasoning),
        content=tok.generated_tokens(total - n_reasoning),
        finish_reason="stop" if wanted < limit else "length",
        id=f"{prefix}-sim{next(h.sim._ids):08x}",
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


def _generate(h: _Handler, req: _Request, chat: bool) -> None:
    """Serve one chat or text completion, stream or not, following the latency model."""
    p, engine = h.sim.profile, h.engine
    data = _json_body(req)
    if engine.is_loading():
        raise _ApiError(503, "Loading model", "unavailable_error", code=503)  # llama.cpp's answer
    if p.fail_status is not None:
        type_ = "server_error" if p.fail_status >= 500 else "invalid_request_error"
        raise _ApiError(
            p.fail_status,
            f"Simulated failure (HTTP {p.fail_status}).",
            type_,
            code="rate_limit_exceeded" if p.fail_status == 429 else None,
        )
    plan = _plan(h, data, chat)
    if plan.stream:
        h.start_stream()  # headers go out at once, as vLLM does; the waiting happens after
    pieces = [("reasoning_content", t) for t in plan.reasoning] + [("content", t) for t in plan.content]
    emitted = 0
    with engine.admitted(plan.prompt_tokens):
        try:
            t0 = time.monotonic()
            first_at = t0 + engine.first_token_offset_s(plan.prompt_tokens, t0)
            for i, (kind, text) in enumerate(pieces):
                if p.stream_cut_after is not None and i >= p.stream_cut_after:
                    break
                engine.sleep_until(first_at + (i + 1) * engine.decode_s())
                if plan.stream:
                    if i == 0 and chat:
                        h.send_event(_chunk(plan, p.model, {"role": "assistant", "content": ""}, None))
                    h.send_event(_chunk(plan, p.model, {kind: text} if chat else text, None))
                engine.token_emitted(i, req.arrived_at)
                emitted += 1
        finally:
            engine.release_kv(emitted)
        if p.stream_cut_after is not None and len(pieces) > p.stream_cut_after:
            h.cut_connection()
            return
    decode_s = max(0.0, time.monotonic() - first_at)
    timings = (
        native.llamacpp_timings(plan.prompt_tokens, first_at - t0, emitted, decode_s)
        if p.flavor == "llamacpp" else None
    )
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
                }
            )
        h.end_stream()
    else:
        body = _final_body(plan, p.model)
        if timings is not None:
            body["timings"] = timings
        h.send_json(200, body)


def _chat_completions(h: _Handler, req: _Request) -> None:
    _generate(h, req, chat=True)


def _completions(h: _Handler, req: _Request) -> None:
    _generate(h, req, chat=False)


_GENERATION_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})

def _routes(flavor: str) -> dict[str, dict[str, Callable[[_Handler, _Request], None]]]:
    """The OpenAI-compatible routes plus the flavor's native ones (`llmdoctor.sim.native`)."""
    if flavor == "vllm":
        return _ROUTES
    return {**_ROUTES, **native.native_routes(flavor)}


_ROUTES: dict[str, dict[str, Callable[[_Handler, _Request], None]]] = {
    "/v1/models": {"GET": _models},
    "/v1/chat/completions": {"POST": _chat_completions},
    "/v1/completions": {"POST": _completions},
    "/tokenize": {"POST": _tokenize},
    "/metrics": {"GET": _metrics},
    "/health": {"GET": _health},
}


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------
class SimServer:
    """The simulator: a real HTTP server on a background thread (also a context manager).

    >>> with SimServer(get_profile("healthy")) as sim:   # doctest: +SKIP
    ...     httpx.get(sim.base_url + "/models")
    """

    def __init__(self, profile: LatencyProfile, host: str = "127.0.0.1", port: int = 0) -> None:
        self.profile = profile
        self.host = host
        self._requested_port = port
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._engine = _Engine(profile, self._stopping)
        self._ids = itertools.count(1)
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None
        self.started_wall = time.time()
        self._requests = 0
        self._by_path: dict[str, int] = {}
        self._generation = 0
        self._connections = 0

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> SimServer:
        """Bind and serve on a daemon thread; returns self. The latency clock starts here."""
        if self._httpd is not None:
            raise RuntimeError("SimServer already started")
        self._stopping.clear()
        self._engine = _Engine(self.profile, self._stopping)
        self.started_wall = time.time()
        self._httpd = _HTTPServer((self.host, self._requested_port), self)
        self._port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"llmdoctor-sim:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving: abort in-flight requests, close every connection, join the thread."""
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.cut_all()
        httpd.server_close()
        if thread is not None:
            thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> SimServer:
        return self.start() if self._httpd is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- addresses ---------------------------------------------------------------------------
    @property
    def port(self) -> int:
        """The bound TCP port (the chosen one when started with port=0); kept after stop()."""
        if self._port is None:
            raise RuntimeError("SimServer was never started")
        return self._port

    @property
    def url(self) -> str:
        """Root URL, e.g. `http://127.0.0.1:PORT`."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """OpenAI base URL: `url + "/v1"`."""
        return self.url + "/v1"

    # -- counters ----------------------------------------------------------------------------
    def _count(self, what: str, path: str = "") -> None:
        with self._lock:
            if what == "connection":
                self._connections += 1
            elif what == "generation":
                self._generation += 1
            else:
                self._requests += 1
                self._by_path[path] = self._by_path.get(path, 0) + 1

    @property
    def requests_received(self) -> int:
        """Total HTTP requests received (every path and method)."""
        with self._lock:
            return self._requests

    @property
    def requests_by_path(self) -> dict[str, int]:
        """Requests received per path (query string stripped); a copy."""
        with self._lock:
            return dict(self._by_path)

    @property
    def generation_requests(self) -> int:
        """Requests to the generation endpoints (chat/completions and completions), rejected ones too."""
        with self._lock:
            return self._generation

    @property
    def connections_accepted(self) -> int:
        """TCP connections accepted since start."""
        with self._lock:
            return self._connections

    def metrics_text(self) -> str:
        """What `GET /metrics` would answer now."""
        return self._engine.metrics_text()


def serve_forever(
    profile: LatencyProfile,
    host: str = "127.0.0.1",
    port: int = 8000,
    ready_callback: Callable[[SimServer], None] | None = None,
) -> None:
    """Run the simulator in the foreground until KeyboardInterrupt, then stop cleanly.

    `ready_callback(server)` is called once the socket is bound (e.g. to print the URL).
    """
    server = SimServer(profile, host=host, port=port).start()
    try:
        if ready_callback is not None:
            ready_callback(server)
        thread = server._thread
        while thread is not None and thread.is_alive():
            thread.join(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
