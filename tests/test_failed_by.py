"""Who failed each request (issue 25: our failures are ours), on real sockets.

The client classifies every failed request: this client (it ran out of open files), the path (a
gateway's HTML error page, a reset under a proxy's headers, a pooled connection dropped in between)
or the server (its own JSON error, its reset with nothing in front of it). The checks read it:
LD002 never counts a client or path failure as the server's.
"""

from __future__ import annotations

import os
import resource
import socket
import struct

from llmdoctor.analysis.failures import client_failures, counts_as_trouble
from llmdoctor.measurements.ledger import RequestOutcome
from llmdoctor.measurements.timing import ErrorKind, FailedBy
from llmdoctor.probes.client import ProbeClient
from llmdoctor.target import Target
from tests.clientutil import probe_client
from tests.rawserver import ScriptedServer, chunk, http_response, sse_event


def client_for(srv: ScriptedServer, **kwargs) -> ProbeClient:
    return probe_client(Target(srv.url + "/v1", model="m"), timeout_s=5.0, max_requests=10, trust_env=False, **kwargs)


def _reset(conn: socket.socket) -> None:
    """Close with a TCP RST (SO_LINGER 0), as a proxy or a crashing server does."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def _stream_then_reset(headers: dict[str, str]):
    head = http_response(200, {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked", **headers})
    first = chunk(sse_event({"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": None}]}))

    def handler(conn, request):
        conn.sendall(head + first)
        _reset(conn)
        return False

    return handler


# -- this client ---------------------------------------------------------------------------------


def test_too_many_open_files_is_this_clients_failure(servers):
    srv = servers(lambda conn, request: conn.sendall(http_response(200, body={"data": []})))
    c = client_for(srv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    fillers: list[int] = []
    try:
        # No descriptor left for a socket: the next connect gets EMFILE, as under `ulimit -n`.
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(int(fd) for fd in os.listdir("/proc/self/fd")) + 1, hard))
        while True:  # fill the free numbers below the limit
            try:
                fillers.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
        t, _ = c.get_json("/models")
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        c.close()
    assert t.failed_by == FailedBy.CLIENT and t.status is None, t
    assert t.error_detail.startswith("this client: too many open files (EMFILE"), t.error_detail
    assert "[Errno 24]" in t.error_detail and srv.connections == 0
    outcome = RequestOutcome.of(t)
    assert outcome.failed_by == FailedBy.CLIENT and not counts_as_trouble(outcome)
    assert client_failures([outcome]) == [outcome]
    # The control: the same request with the limit back is answered, and nobody failed it.
    with client_for(srv) as again:
        ok, _ = again.get_json("/models")
    assert ok.ok and ok.failed_by is None


# -- the path ------------------------------------------------------------------------------------


def test_a_gateways_html_error_page_is_the_paths_failure(servers):
    page = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
    srv = servers(lambda conn, request: conn.sendall(
        http_response(502, {"Content-Type": "text/html", "Server": "nginx/1.22.1"}, page)))
    with client_for(srv) as c:
        t = c.chat("hi", max_tokens=1)
    assert t.status == 502 and t.failed_by == FailedBy.PATH, t


def test_a_reset_under_a_proxys_headers_is_the_paths_failure(servers):
    srv = servers(_stream_then_reset({"Via": "1.1 haproxy"}))
    with client_for(srv) as c:
        t = c.chat("hi", max_tokens=5)
    assert t.error == ErrorKind.STREAM_CUT and t.content_events == 1, t
    assert t.failed_by == FailedBy.PATH


def test_a_pooled_connection_dropped_in_between_is_the_paths_failure(servers):
    per_conn: dict[int, int] = {}

    def handler(conn, request):
        n = per_conn[id(conn)] = per_conn.get(id(conn), 0) + 1
        if n == 2:  # dropped just as the client reused it
            conn.shutdown(socket.SHUT_RDWR)
            return False
        conn.sendall(http_response(200, body={"n": n}))

    srv = servers(handler, keep_alive=True)
    with client_for(srv) as c:
        c.get_json("/models")
        t, _ = c.get_json("/models")
    dropped = c.history[1]
    assert t.ok and t.failed_by is None and t.retried
    assert dropped.error == ErrorKind.PROTOCOL and dropped.failed_by == FailedBy.PATH
    assert dropped.error_detail.startswith("a pooled connection was dropped in between")


# -- the server ----------------------------------------------------------------------------------


def test_the_servers_own_json_error_is_the_servers_failure(servers):
    body = {"error": {"message": "CUDA out of memory", "type": "server_error"}}
    srv = servers(lambda conn, request: conn.sendall(
        http_response(500, {"Content-Type": "application/json", "Server": "uvicorn"}, body)))
    with client_for(srv) as c:
        t = c.chat("hi", max_tokens=1)
    assert t.status == 500 and t.failed_by == FailedBy.SERVER and "CUDA out of memory" in t.error_detail
    assert counts_as_trouble(RequestOutcome.of(t))


def test_a_reset_with_nothing_in_front_is_the_servers_failure(servers):
    srv = servers(_stream_then_reset({"Server": "uvicorn"}))
    with client_for(srv) as c:
        t = c.chat("hi", max_tokens=5)
    assert t.error == ErrorKind.STREAM_CUT and t.failed_by == FailedBy.SERVER, t
