"""A scripted loopback HTTP server on raw sockets, for exact bytes at exact times.

Each accepted connection runs ``handler(conn, request)`` in its own thread, where `request`
is the raw request (head and Content-Length body). The handler writes whatever bytes it
wants, with whatever sleeps: headers then silence, one byte per second, a stream cut in the
middle, CR-only SSE, an HTTP/1.0 close-delimited body... With ``keep_alive=True`` the server
reads the next request on the same connection after the handler returns (until the client
closes or the handler returns False).

    with ScriptedServer(play(chunked_sse_response([{"x": 1}], delay_s=0.05))) as srv:
        httpx.post(srv.url + "/v1/chat/completions", json={})

With an `ssl_context` (e.g. from trustme) it speaks TLS; `url` is then ``https://``.
`host="::1"` listens on IPv6 loopback only.

`stop()` closes the listening socket and every client socket, so it never hangs on a handler
that sleeps or drips forever (its next send fails and its thread ends).
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = [
    "ScriptedServer",
    "Step",
    "chunk",
    "chunked_sse_response",
    "http_response",
    "play",
    "read_request",
    "ScriptClock",
    "unused_port",
]

Handler = Callable[[socket.socket, bytes], Any]
Step = tuple[float, bytes]  # (sleep this long, then send these bytes)

_REASONS = {200: "OK", 302: "Found", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway",
            503: "Service Unavailable"}


def read_request(conn: socket.socket, *, max_bytes: int = 1 << 20) -> bytes | None:
    """Read one request (head until the blank line, then Content-Length bytes); None on EOF."""
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            part = conn.recv(65536)
        except OSError:
            return None
        if not part:
            return None
        data += part
        if len(data) > max_bytes:
            return None
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip() or 0)
    while len(body) < length:
        try:
            part = conn.recv(65536)
        except OSError:
            return None
        if not part:
            return None
        body += part
    return head + b"\r\n\r\n" + body


def request_body(request: bytes) -> bytes:
    """The body of a raw request."""
    return request.partition(b"\r\n\r\n")[2]


def request_json(request: bytes) -> Any:
    """The JSON body of a raw request."""
    return json.loads(request_body(request) or b"null")


def request_line(request: bytes) -> str:
    """``METHOD /path HTTP/1.1``."""
    return request.split(b"\r\n", 1)[0].decode("latin-1")


def request_headers(request: bytes) -> dict[str, str]:
    """Header names (lower case) and values of a raw request."""
    head = request.partition(b"\r\n\r\n")[0].decode("latin-1")
    out = {}
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        out[name.strip().lower()] = value.strip()
    return out


def _body_bytes(body: bytes | str | dict | list | None) -> bytes:
    if body is None:
        return b""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body).encode()


def http_response(
    status: int = 200,
    headers: dict[str, str] | Sequence[tuple[str, str]] | None = None,
    body: bytes | str | dict | list | None = b"",
    *,
    version: str = "HTTP/1.1",
    content_length: bool = True,
) -> bytes:
    """A whole response; dict/list bodies become JSON; Content-Length added unless given or disabled."""
    data = _body_bytes(body)
    pairs = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    names = {n.lower() for n, _ in pairs}
    if isinstance(body, dict | list) and "content-type" not in names:
        pairs.append(("Content-Type", "application/json"))
    if content_length and "content-length" not in names and "transfer-encoding" not in names:
        pairs.append(("Content-Length", str(len(data))))
    head = f"{version} {status} {_REASONS.get(status, 'Status')}\r\n"
    head += "".join(f"{n}: {v}\r\n" for n, v in pairs) + "\r\n"
    return head.encode("latin-1") + data


def chunk(data: bytes) -> bytes:
    """One chunk of a ``Transfer-Encoding: chunked`` body (b"" gives the last chunk)."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def sse_event(item: dict | list | str | bytes, eol: bytes = b"\n") -> bytes:
    """``data: <json or text>`` plus a blank line; bytes are passed through untouched."""
    if isinstance(item, bytes):
        return item
    text = item if isinstance(item, str) else json.dumps(item)
    return b"data: " + text.encode() + eol + eol


def chunked_sse_response(
    events: Iterable[dict | list | str | bytes],
    delay_s: float | Sequence[float] = 0.0,
    *,
    first_delay_s: float | None = None,
    headers: dict[str, str] | None = None,
    done: bool = True,
    end: bool = True,
    eol: bytes = b"\n",
) -> list[Step]:
    """Steps of a chunked ``text/event-stream`` response: headers at once, one chunk per event.

    `delay_s` is slept before each event (one value, or one per event); `first_delay_s`
    overrides it for the first event. `done` appends ``data: [DONE]`` (sent right after the
    last event); `end=False` leaves out the terminating chunk (pair it with a close to cut).
    """
    hdrs = {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked", **(headers or {})}
    steps: list[Step] = [(0.0, http_response(200, hdrs, b""))]
    items = list(events)
    delays = list(delay_s) if isinstance(delay_s, Sequence) else [delay_s] * len(items)
    if first_delay_s is not None and delays:
        delays[0] = first_delay_s
    for item, delay in zip(items, delays, strict=True):
        steps.append((delay, chunk(sse_event(item, eol))))
    if done:
        steps.append((0.0, chunk(b"data: [DONE]" + eol + eol)))
    if end:
        steps.append((0.0, chunk(b"")))
    return steps


class ScriptClock:
    """A `llmdoctor.probes.clock.Clock` that moves only when told: by `advance`, or by a script.

    Hand it to a `ProbeClient` (``clock=``) and to `play` (``clock=``): the script advances it
    by each step's delay before sending the step, so the client reads exactly the scripted
    durations, whatever the load of the machine. `sleep` advances it too (without waiting).
    """

    def __init__(self, start: float = 1000.0, epoch: float = 1.7e9) -> None:
        self._now = start
        self._epoch = epoch - start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def wall(self) -> float:
        return self._epoch + self.now()

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


def play(steps: Iterable[Step], *, close: bool = False, clock: ScriptClock | None = None) -> Handler:
    """A handler that sleeps and sends each step; `close` closes the connection afterwards.

    With a `clock`, each step's delay also advances it, just before the step is sent (the real
    sleep stays, so the client has read one step before the clock moves for the next).
    """
    frozen = list(steps)

    def handler(conn: socket.socket, request: bytes) -> bool:
        for delay, data in frozen:
            if delay:
                time.sleep(delay)
                if clock is not None:
                    clock.advance(delay)
            conn.sendall(data)
        if close:
            conn.shutdown(socket.SHUT_RDWR)
            return False
        return True

    return handler


def unused_port() -> int:
    """A loopback port nobody listens on (bound then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ScriptedServer:
    """Loopback server running a handler per connection (or per request with `keep_alive`).

    `connections` counts accepted connections, `requests` holds every raw request read,
    `errors` the exceptions raised by handlers (a client that went away is normal).
    """

    def __init__(
        self,
        handler: Handler,
        *,
        keep_alive: bool = False,
        read_timeout_s: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.handler = handler
        self.ssl_context = ssl_context
        self.keep_alive = keep_alive
        self.read_timeout_s = read_timeout_s
        self.connections = 0
        self.requests: list[bytes] = []
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._clients: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((host, 0))
        self._listener.listen(64)
        self._listener.settimeout(0.05)
        self.port: int = self._listener.getsockname()[1]
        netloc = f"[{host}]" if ":" in host else host
        self.url = f"{'https' if ssl_context else 'http'}://{netloc}:{self.port}"
        self._acceptor = threading.Thread(target=self._accept_loop, name="scripted-accept", daemon=True)
        self._acceptor.start()

    def __enter__(self) -> ScriptedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def stopping(self) -> bool:
        """True once `stop()` was called (handlers looping forever may check it)."""
        return self._stopping.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`; True when the server is stopping (for handlers)."""
        return self._stopping.wait(seconds)

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(self.read_timeout_s)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._stopping.is_set():
                    conn.close()
                    return
                self.connections += 1
                self._clients.append(conn)
                t = threading.Thread(target=self._serve, args=(conn,), name="scripted-conn", daemon=True)
                self._threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self.ssl_context is not None:  # handshake here, so a slow client blocks no one else
                tls = self.ssl_context.wrap_socket(conn, server_side=True)
                with self._lock:
                    self._clients.append(tls)
                conn = tls
            while not self._stopping.is_set():
                request = read_request(conn)
                if request is None:
                    return
                with self._lock:
                    self.requests.append(request)
                result = self.handler(conn, request)
                if not self.keep_alive or result is False:
                    return
        except OSError:
            pass  # the client (or stop()) closed the socket under the handler
        except Exception as exc:  # recorded for the test to inspect
            self.errors.append(exc)
        finally:
            _close(conn)

    def stop(self) -> None:
        """Stop accepting, close every client socket, join threads briefly; never hangs."""
        self._stopping.set()
        _close(self._listener)
        with self._lock:
            clients = list(self._clients)
            threads = list(self._threads)
        for conn in clients:
            _close(conn)
        deadline = time.monotonic() + 2.0
        self._acceptor.join(timeout=1.0)
        for t in threads:  # daemon threads: one asleep in a handler is left behind, not waited for
            t.join(timeout=max(0.0, deadline - time.monotonic()))


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
