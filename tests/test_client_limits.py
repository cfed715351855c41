"""client_limits (this machine, real sockets) and the concurrency probe against real loopback servers."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from llmdoctor.context import Context
from llmdoctor.options import Options
from llmdoctor.probes import client_limits as cl
from llmdoctor.probes.catalog import CLIENT_LIMITS, CONCURRENCY
from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from llmdoctor.target import Target


class CountingServer(ThreadingHTTPServer):
    """An OpenAI-shaped loopback server that counts generation requests in flight at once.

    `slots` generation requests are served at a time (the rest wait: real server-side
    queueing); each takes `work_s`.
    """

    daemon_threads = True

    def __init__(self, slots: int, work_s: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.work_s = work_s
        self.sem = threading.Semaphore(slots)
        self.lock = threading.Lock()
        self.in_flight = 0
        self.peak = 0
        self.generations = 0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, body: bytes, ctype: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._send(json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode(),
                   "application/json")

    def do_POST(self):
        srv: CountingServer = self.server  # type: ignore[assignment]
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with srv.lock:
            srv.in_flight += 1
            srv.generations += 1
            srv.peak = max(srv.peak, srv.in_flight)
        try:
            with srv.sem:
                time.sleep(srv.work_s)
        finally:
            with srv.lock:
                srv.in_flight -= 1
        chunk = {"id": "c", "object": "chat.completion.chunk", "model": "m",
                 "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}
        self._send(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode(), "text/event-stream")


@pytest.fixture
def counting_server(request):
    slots, work_s = request.param
    srv = CountingServer(slots, work_s)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _ctx(port: int, **options) -> Context:
    return Context(Target(f"http://127.0.0.1:{port}/v1", model="m"), Options.of(**options))


# 0.3 s of work, not 0.1: on a busy 2-core host the lone requests took 159 and 197 ms for 100 ms of work (the
# in-process server and the client wait for the same CPUs; lag 70 ms), and the slowdown read 1.44.
@pytest.mark.parametrize("counting_server", [(1, 0.3)], indirect=True)
def test_queueing_server_shows_slowdown_and_never_more_than_n_in_flight(counting_server):
    ctx = _ctx(counting_server.server_address[1], concurrency=4, max_requests=30, samples=2)
    result = ctx.get(CONCURRENCY)
    assert counting_server.peak == 4  # counted at the server: exactly N at once, never more
    assert result.max_in_flight == 4 and result.n == 4 and result.errors == 0
    assert len(result.single_ms) == 2 and len(result.parallel_ms) == 4
    # One slot: the 4 requests are served one after another.
    assert result.slowdown is not None and result.slowdown > 1.5
    assert max(result.parallel_ms) > 3.5 * 300  # the last one waited for the three before it
    assert result.effective_parallelism == pytest.approx(1.0, abs=0.5)


@pytest.mark.parametrize("counting_server", [(8, 0.1)], indirect=True)
def test_parallel_server_has_no_slowdown(counting_server):
    result = _ctx(counting_server.server_address[1], concurrency=4, samples=2).get(CONCURRENCY)
    assert counting_server.peak <= 4
    assert result.slowdown is not None and result.slowdown < 1.5
    assert result.effective_parallelism is not None and result.effective_parallelism > 2.5


@pytest.mark.parametrize("counting_server", [(8, 0.01)], indirect=True)
def test_concurrency_stays_within_the_request_budget(counting_server):
    ctx = _ctx(counting_server.server_address[1], concurrency=20, max_requests=12, samples=2)
    result = ctx.get(CONCURRENCY)
    assert ctx.requests_sent <= 12 and counting_server.peak <= result.n < 20
    assert "request budget" in result.note


def test_concurrency_is_opt_in():
    ctx = _ctx(9)
    assert ctx.optional(CONCURRENCY) is None
    assert "--concurrency N" in ctx.statuses()[0].reason and ctx.requests_sent == 0


def test_concurrency_with_the_simulator_queueing_profile():
    with SimServer(get_profile("queueing")) as sim:
        ctx = Context(Target(sim.base_url), Options.of(concurrency=3))
        result = ctx.get(CONCURRENCY)
        sent = [t for t in ctx.client.history if t.path.endswith("/chat/completions")]
        assert sim.generation_requests == len(sent)  # the baseline's requests, then 2 + 3 of ours
    assert result.slowdown is not None and result.slowdown > 1.5


def test_client_limits_reads_this_machine_and_counts_sockets():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    accepted = [listener.accept()[0] for _ in range(3)]
    try:
        result = Context(Target(f"http://127.0.0.1:{port}/v1"), Options()).get(CLIENT_LIMITS)
    finally:
        for s in clients + accepted + [listener]:
            s.close()
    import resource

    assert (result.nofile_soft, result.nofile_hard) == resource.getrlimit(resource.RLIMIT_NOFILE)
    # at least the listener and the six sockets of this test are open, and the room is what the limit leaves
    assert result.open_fds is not None and result.open_fds >= 7
    if result.nofile_soft is not None:
        assert result.fd_room == result.nofile_soft - result.open_fds
    lo, hi = (int(x) for x in open(cl.PORT_RANGE_FILE).read().split())
    assert result.ephemeral_ports == hi - lo + 1
    if result.sockets_error:
        pytest.skip(result.sockets_error)
    assert result.established == 3 and result.endpoint_addresses == ["127.0.0.1"]


def test_through_a_proxy_the_sockets_counted_are_the_ones_to_the_proxy(monkeypatch):
    """Issue 25: the user's requests hold sockets to the proxy, not to the endpoint."""
    import os

    for name in [k for k in os.environ if k.lower().endswith("_proxy")]:
        monkeypatch.delenv(name)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
    accepted = [listener.accept()[0] for _ in range(2)]
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    try:
        through = Context(Target("http://10.9.9.9:8000/v1"), Options()).get(CLIENT_LIMITS)
        monkeypatch.setenv("NO_PROXY", "10.0.0.0/8")
        direct = Context(Target("http://10.9.9.9:8000/v1"), Options()).get(CLIENT_LIMITS)
    finally:
        for s in clients + accepted + [listener]:
            s.close()
    assert through.via_proxy == f"http://127.0.0.1:{port}" and through.port == port
    assert through.endpoint_addresses == ["127.0.0.1"]
    if through.sockets_error:
        pytest.skip(through.sockets_error)
    assert through.established == 2
    assert not direct.via_proxy and direct.port == 8000 and direct.established == 0
