"""The simulator's HTTP plumbing: the threading server, the request handler, SSE and cuts.

It knows HTTP/1.1 (keep-alive, chunked bodies both ways, one SSE event per chunk flushed at once,
TCP_NODELAY, abrupt cuts) and answers an HTTP/1.0 request as real servers do (uvicorn/h11): a
stream without chunked framing, delimited by closing the connection — what nginx's default
``proxy_http_version 1.0`` gets from upstreams. It knows nothing about any API: the routes come from the `App` it serves
(`llmdoctor.sim.server.SimServer`), which also owns the engine and the counters.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from llmdoctor.sim.engine import Engine, Stopped
from llmdoctor.sim.profiles import LatencyProfile

__all__ = ["ApiError", "App", "Handler", "HTTPServer", "Request", "Route", "Routes", "json_body"]


@dataclass
class Request:
    """One parsed HTTP request."""

    method: str
    path: str
    headers: Any
    body: bytes
    arrived_at: float


class ApiError(Exception):
    """An error answered as an OpenAI-shaped JSON body."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        code: str | int | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
        self.headers = dict(headers or {})


Route = Callable[["Handler", Request], None]
Routes = Mapping[str, Mapping[str, Route]]  # path -> method -> handler


class App(Protocol):
    """What the HTTP layer needs from the simulator it serves."""

    profile: LatencyProfile
    started_wall: float

    @property
    def engine(self) -> Engine: ...

    @property
    def routes(self) -> Routes: ...

    def is_generation(self, path: str) -> bool: ...

    def count(self, what: str, path: str = "") -> None: ...

    def next_id(self) -> int: ...


def json_body(req: Request) -> dict[str, Any]:
    """The request body as a JSON object, or an `ApiError` 400 saying why not."""
    try:
        data = json.loads(req.body or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"Invalid JSON body: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "The request body must be a JSON object.", code="invalid_json")
    return data


class HTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that counts connections and can cut them all on stop."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], app: App) -> None:
        self.app = app
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        self.app.count("connection")
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


class Handler(BaseHTTPRequestHandler):
    """Reads a request, dispatches it by (method, path) and writes the response."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # TCP_NODELAY: no 40 ms Nagle/delayed-ACK stalls between writes
    server_version = "llmdoctor-sim/0.1"
    server: HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default per-request logging to stderr."""

    @property
    def sim(self) -> App:
        """The simulator this request is served by."""
        return self.server.app

    @property
    def engine(self) -> Engine:
        """The simulator's latency engine."""
        return self.server.app.engine

    # -- dispatch ----------------------------------------------------------------------------
    def _dispatch(self) -> None:
        arrived_at = time.monotonic()
        path = self.path.split("?", 1)[0]
        self.sim.count("request", path)
        try:
            body = self._read_body()
        except ValueError as exc:
            self.close_connection = True
            self.send_json(400, ApiError(400, f"Bad request body: {exc}").body)
            return
        req = Request(self.command, path, self.headers, body, arrived_at)
        methods = self.sim.routes.get(path)
        try:
            if methods is None:
                raise ApiError(404, f"Not found: {path}", code="not_found")
            handler = methods.get(self.command)
            if handler is None:
                raise ApiError(405, f"Method {self.command} not allowed for {path}", code="method_not_allowed")
            if self.sim.is_generation(path):
                self.sim.count("generation")
            if path.startswith("/v1/"):
                self._check_api_key()
            handler(self, req)
        except ApiError as err:
            extra = {"Allow": ", ".join(sorted(methods))} if err.status == 405 and methods else {}
            self.send_json(err.status, err.body, {**extra, **err.headers} or None)
        except Stopped:
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
            raise ApiError(
                401,
                "You didn't provide an API key. Provide it in the Authorization header "
                "(Authorization: Bearer YOUR_KEY).",
                code="invalid_api_key",
            )
        if auth[len("Bearer ") :].strip() != key:
            raise ApiError(401, "Incorrect API key provided.", code="invalid_api_key")

    # -- responses ---------------------------------------------------------------------------
    @property
    def _http10(self) -> bool:
        """An HTTP/1.0 client: no chunked framing for it; a stream ends by closing the connection."""
        return self.request_version == "HTTP/1.0"

    def send_header(self, keyword: str, value: str) -> None:
        """Send a header; to an HTTP/1.0 client, ``Transfer-Encoding: chunked`` becomes ``Connection: close``."""
        if self._http10 and keyword.lower() == "transfer-encoding" and value.lower() == "chunked":
            self.close_connection = True
            keyword, value = "Connection", "close"
        super().send_header(keyword, value)

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

    def start_stream(self, extra: dict[str, str] | None = None) -> None:
        """Send the headers of an SSE response (chunked), before any waiting."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self._common_headers()
        self.end_headers()
        self.wfile.flush()

    def write_chunk(self, data: bytes) -> None:
        """Send `data` as one HTTP chunk and flush it (a zero-length `data` ends the body).

        To an HTTP/1.0 client the bytes go as they are; the body ends when the connection closes.
        """
        if self._http10:
            if data:
                self.wfile.write(data)
                self.wfile.flush()
            return
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def send_event(self, data: Any) -> None:
        """Send one SSE event as one HTTP chunk (`data` is JSON-encoded unless a str)."""
        payload = data if isinstance(data, str) else json.dumps(data)
        self.write_chunk(f"data: {payload}\n\n".encode())

    def end_chunks(self) -> None:
        """Send the terminating zero-length chunk of a chunked body."""
        self.write_chunk(b"")

    def end_stream(self) -> None:
        """Send `data: [DONE]` and the terminating zero-length chunk."""
        self.send_event("[DONE]")
        self.end_chunks()

    def cut_connection(self) -> None:
        """Drop the connection abruptly, as a crashing server would."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
