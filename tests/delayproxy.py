"""A delaying TCP proxy on loopback: injects network round-trip time where netem cannot.

    with DelayProxy(("127.0.0.1", upstream_port), one_way_s=0.025) as proxy:   # RTT 50 ms
        httpx.get(f"http://127.0.0.1:{proxy.port}/v1/models")

A kernel completes the client's TCP handshake before any user-space proxy sees the
connection, so the handshake round trip cannot show up in the client's ``connect()``. The
proxy charges it to connection setup instead: nothing is forwarded on a new connection until
`setup_s` (default one round trip, 2 x `one_way_s`) has passed. Then each chunk, in each
direction, is delivered `one_way_s` after it was received, in order. A fresh connection
therefore costs two round trips before the first answer arrives (as on a real network:
handshake, then request/response), a reused one costs one.

`connections` counts accepted connections; `peak_active` the most open at once.
Only listens on 127.0.0.1 and only connects to the given upstream.
"""

from __future__ import annotations

import queue
import socket
import threading
import time

__all__ = ["DelayProxy"]


class DelayProxy:
    """TCP proxy with a configurable one-way delay per chunk and a setup delay per connection."""

    def __init__(self, upstream: tuple[str, int], one_way_s: float, setup_s: float | None = None) -> None:
        if upstream[0] not in ("127.0.0.1", "::1", "localhost"):
            raise ValueError("the delay proxy only forwards to loopback")
        self.upstream = upstream
        self.one_way_s = one_way_s
        self.setup_s = 2 * one_way_s if setup_s is None else setup_s
        self.connections = 0
        self.active = 0
        self.peak_active = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._open: list[socket.socket] = []
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def address(self) -> tuple[str, int]:
        """``("127.0.0.1", port)``."""
        return ("127.0.0.1", self.port)

    def start(self) -> DelayProxy:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        sock.settimeout(0.05)
        self._sock, self.port = sock, sock.getsockname()[1]
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._sock is not None:
            self._sock.close()
        with self._lock:
            for s in self._open:
                _close(s)
            self._open.clear()

    def __enter__(self) -> DelayProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                client, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            with self._lock:
                self.connections += 1
                self.active += 1
                self.peak_active = max(self.peak_active, self.active)
                self._open.append(client)
            threading.Thread(target=self._serve, args=(client, time.monotonic()), daemon=True).start()

    def _serve(self, client: socket.socket, accepted_at: float) -> None:
        ready_at = accepted_at + self.setup_s
        up_q: queue.Queue[tuple[float, bytes]] = queue.Queue()
        down_q: queue.Queue[tuple[float, bytes]] = queue.Queue()
        threading.Thread(target=self._read, args=(client, up_q), daemon=True).start()
        self._stop.wait(max(0.0, ready_at - time.monotonic()))
        try:
            upstream = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            self._finish(client)
            return
        upstream.settimeout(None)
        for s in (client, upstream):  # no Nagle: the delay must be ours alone
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._open.append(upstream)
        threading.Thread(target=self._read, args=(upstream, down_q), daemon=True).start()
        threading.Thread(target=self._write, args=(down_q, client, upstream, 0.0), daemon=True).start()
        # The client's first bytes would only leave after the handshake, one way later.
        self._write(up_q, upstream, client, ready_at + self.one_way_s)
        self._finish(client)

    def _read(self, src: socket.socket, out: queue.Queue[tuple[float, bytes]]) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            out.put((time.monotonic() + self.one_way_s, data))
            if not data:
                return

    def _write(self, q: queue.Queue[tuple[float, bytes]], dst: socket.socket, other: socket.socket,
               not_before: float) -> None:
        while True:
            due, data = q.get()
            self._stop.wait(max(0.0, max(due, not_before) - time.monotonic()))
            if not data or self._stop.is_set():
                _shut(dst)
                _shut(other)
                return
            try:
                dst.sendall(data)
            except OSError:
                _shut(other)
                return

    def _finish(self, client: socket.socket) -> None:
        with self._lock:
            self.active -= 1


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _close(sock: socket.socket) -> None:
    _shut(sock)
    try:
        sock.close()
    except OSError:
        pass
