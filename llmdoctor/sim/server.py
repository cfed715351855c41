"""The simulator: a real OpenAI-compatible HTTP server on loopback that follows a `LatencyProfile`.

It speaks HTTP/1.1 with keep-alive, streams Server-Sent Events with chunked
transfer encoding (one chunk per event, flushed at once) and really sleeps, so a
client that measures it measures something true. Used by `llmdoctor demo` and as
the main fixture of the test suite.

Endpoints: `GET /v1/models`, `POST /v1/chat/completions`, `POST /v1/completions`,
`POST /tokenize` (vLLM's shape), `GET /metrics` (vLLM V1 Prometheus names) and
`GET /health`, plus the native routes of the profile's `flavor`.

The parts, one concern each: `engine` (how long things take, queue and KV state, counters),
`httpd` (server, handler, SSE, cuts), `openai` and `native` (the routes), `metrics` (the
Prometheus text), `profiles` and `tokens`. This module puts them together.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

from llmdoctor.sim.engine import Engine
from llmdoctor.sim.httpd import HTTPServer, Routes
from llmdoctor.sim.metrics import metrics_text
from llmdoctor.sim.native import native_routes
from llmdoctor.sim.openai import GENERATION_PATHS, ROUTES
from llmdoctor.sim.profiles import LatencyProfile

__all__ = ["SimServer", "routes_for", "serve_forever"]


def routes_for(flavor: str) -> Routes:
    """The OpenAI-compatible routes plus the flavor's native ones (`llmdoctor.sim.native`)."""
    if flavor == "vllm":
        return ROUTES
    return {**ROUTES, **native_routes(flavor)}


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
        self._engine = Engine(profile, self._stopping)
        self._ids = itertools.count(1)
        self._routes = routes_for(profile.flavor)
        self._httpd: HTTPServer | None = None
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
        self._engine = Engine(self.profile, self._stopping)
        self.started_wall = time.time()
        self._httpd = HTTPServer((self.host, self._requested_port), self)
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

    # -- what the HTTP layer asks (`llmdoctor.sim.httpd.App`) -------------------------------------
    @property
    def engine(self) -> Engine:
        """The latency engine (a fresh one per start())."""
        return self._engine

    @property
    def routes(self) -> Routes:
        """path -> method -> handler, for this profile's flavor."""
        return self._routes

    def is_generation(self, path: str) -> bool:
        """Is `path` a generation endpoint (counted in `generation_requests`)?"""
        return path in GENERATION_PATHS

    def next_id(self) -> int:
        """A fresh number for a completion id."""
        return next(self._ids)

    # -- counters ----------------------------------------------------------------------------
    def count(self, what: str, path: str = "") -> None:
        """Count a `connection`, a `generation` request, or (anything else) a request to `path`."""
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
        return metrics_text(self.profile, self._engine.state())


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
