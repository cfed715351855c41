from __future__ import annotations

import json
import socket
import ssl
import time

import httpx
import pytest

from llmdoctor.measurements.timing import ErrorKind, RequestTiming
from llmdoctor.probes.client import USER_AGENT, BudgetExhausted, ClientSettings, ProbeClient
from llmdoctor.target import Target
from tests.clientutil import probe_client
from tests.rawserver import (
    ScriptClock,
    chunk,
    chunked_sse_response,
    http_response,
    play,
    request_headers,
    request_json,
    request_line,
    unused_port,
)

CANARY = "sk-canary-Zq81xTTp4RwM"


def content(text: str) -> dict:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


def reasoning(text: str, key: str = "reasoning_content") -> dict:
    return {"choices": [{"index": 0, "delta": {key: text}, "finish_reason": None}]}


def final(usage: dict | None = None, **extra) -> dict:
    obj = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], **extra}
    if usage is not None:
        obj["usage"] = usage
    return obj


def client_for(srv_or_url, *, timeout_s: float = 5.0, max_requests: int = 10, **kwargs) -> ProbeClient:
    url = srv_or_url if isinstance(srv_or_url, str) else srv_or_url.url
    target = Target(url + "/v1", model="m", api_key=CANARY)
    return probe_client(target, timeout_s=timeout_s, max_requests=max_requests, **kwargs)


def silence(conn: socket.socket, request: bytes) -> None:
    """Accept, read the request, then say nothing until the client goes away."""
    try:
        conn.recv(1)
    except OSError:
        pass


def assert_no_canary(timing: RequestTiming) -> None:
    assert CANARY not in repr(timing)
    assert CANARY not in timing.error_detail
    assert CANARY not in json.dumps(timing.response_headers)


# -- streaming timings -------------------------------------------------------------------------------


def test_stream_timings_match_the_script(servers):
    # The script advances the client's clock by each step's delay: the timings are the script's, exactly.
    clock = ScriptClock()
    events = [content(f"t{i}") for i in range(6)] + [final({"prompt_tokens": 7, "completion_tokens": 6})]
    steps = chunked_sse_response(events, [0.2, 0.05, 0.05, 0.05, 0.05, 0.05, 0.0])
    srv = servers(play(steps, clock=clock))
    with client_for(srv, clock=clock) as c:
        t = c.chat("hi", max_tokens=6)
    print(f"\nttft={t.ttft_ms} itl={t.inter_token_ms} total={t.total_ms} ttfb={t.ttfb_ms} connect={t.connect_ms}")
    assert t.ok, t
    assert t.streamed and t.status == 200 and t.http_version == "HTTP/1.1"
    assert t.ttfb_ms == 0  # the headers came before the script's first sleep
    assert t.ttft_ms == pytest.approx(200, abs=1e-6)
    assert t.ttft_ms - t.ttfb_ms == pytest.approx(200, abs=1e-6)  # the server slept 200 ms after the headers
    assert t.first_content_ms == t.ttft_ms and t.first_reasoning_ms is None
    assert len(t.token_times_ms) == 6 and t.content_events == 6
    gaps = t.inter_token_ms
    assert gaps == pytest.approx([50.0] * 5, abs=1e-6), gaps
    assert t.total_ms == pytest.approx(450, abs=1e-6)
    assert t.decode_ms == pytest.approx(250, abs=1e-6)
    assert t.started_at == pytest.approx(clock.wall() - 0.45)
    assert t.prompt_tokens == 7 and t.completion_tokens == 6 and t.finish_reason == "stop"
    assert t.text == "t0t1t2t3t4t5"
    assert t.sent_ms is not None and t.sent_ms <= t.ttfb_ms
    assert t.connect_ms is not None and not t.reused_connection
    body = request_json(srv.requests[0])
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["model"] == "m" and body["max_tokens"] == 6
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert request_line(srv.requests[0]) == "POST /v1/chat/completions HTTP/1.1"
    headers = request_headers(srv.requests[0])
    assert headers["authorization"] == f"Bearer {CANARY}"
    assert headers["user-agent"] == USER_AGENT


def test_reasoning_counted_separately_and_llamacpp_timings(servers):
    timings = {"prompt_n": 5, "prompt_ms": 12.5, "prompt_per_token_ms": 2.5, "predicted_n": 4,
               "predicted_ms": 40.0, "predicted_per_token_ms": 10.0, "predicted_per_second": 100.0}
    events = [reasoning("think "), reasoning("more ", key="reasoning"), reasoning("done "), content("A"),
              content("B"), final({"prompt_tokens": 5, "completion_tokens": 5}, timings=timings)]
    srv = servers(play(chunked_sse_response(events, [0.05, 0.02, 0.02, 0.05, 0.02, 0.0])))
    with client_for(srv) as c:
        t = c.chat([{"role": "user", "content": "why?"}], max_tokens=8)
    assert t.ok, t
    assert t.reasoning_events == 3 and t.content_events == 2
    assert len(t.token_times_ms) == 5
    assert t.ttft_ms == t.first_reasoning_ms
    assert t.first_content_ms is not None and t.first_content_ms - t.first_reasoning_ms >= 60
    assert t.server_timing["llamacpp.prompt_ms"] == 12.5
    assert t.server_timing["llamacpp.predicted_per_token_ms"] == 10.0
    assert t.server_timing["llamacpp.prompt_n"] == 5
    assert t.text == "AB"


def test_completion_stream_text_and_crlf_http10_close_delimited(servers):
    # HTTP/1.0 style: no length, no chunking, the body ends when the server closes; CR-only SSE.
    def handler(conn, request):
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
        for i in range(3):
            time.sleep(0.02)
            conn.sendall(b'data: {"choices":[{"text":"w%d","index":0}]}\r\r' % i)
        conn.sendall(b'data: {"choices":[{"text":"","finish_reason":"length"}]}\r\rdata: [DONE]\r\r')
        return False

    srv = servers(handler)
    with client_for(srv) as c:
        t = c.completion("Once", max_tokens=3)
    assert t.ok, t
    assert t.content_events == 3 and t.text == "w0w1w2" and t.finish_reason == "length"
    assert request_json(srv.requests[0])["prompt"] == "Once"
    assert t.http_version == "HTTP/1.0"


def test_one_byte_chunks_stream(servers):
    payload = b"".join(
        b"data: " + json.dumps(e).encode() + b"\r\n\r\n" for e in [content("x"), content("y"), final()]
    ) + b"data: [DONE]\r\n\r\n"

    def handler(conn, request):
        conn.sendall(http_response(200, {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked"}))
        for i in range(len(payload)):
            conn.sendall(chunk(payload[i : i + 1]))
        conn.sendall(chunk(b""))

    srv = servers(handler)
    with client_for(srv) as c:
        t = c.chat("hi", max_tokens=2)
    assert t.ok, t
    assert t.content_events == 2 and t.text == "xy"


# -- connection reuse and budget ------------------------------------------------------------------------


def test_a_stream_broken_before_its_first_event_leaves_no_connection_to_reuse(servers):
    """llama-cpp-python 0.3.36 ends an over-long streamed request with a complete, empty chunked body and
    resets the connection a moment later. Reused, that connection failed the next request as "a pooled
    connection dropped in between" (the path's; the CI failure of the window test). Now it is never reused."""
    per_conn: dict[int, int] = {}

    def handler(conn, request):
        n = per_conn[id(conn)] = per_conn.get(id(conn), 0) + 1
        if n == 2:  # the reset that follows the broken stream, as the next request arrives
            conn.shutdown(socket.SHUT_RDWR)
            return False
        if b'"stream": true' in request:
            for _, data in chunked_sse_response([], done=False):
                conn.sendall(data)
            return True
        conn.sendall(http_response(200, body={"choices": [{"message": {"content": "ok"}}]}))

    srv = servers(handler, keep_alive=True)
    with client_for(srv, max_requests=5) as c:
        cut = c.chat("long", max_tokens=1, stream=True)
        after = c.chat("short", max_tokens=1, stream=False)
    assert cut.error == ErrorKind.STREAM_CUT and after.ok, (cut.error_detail, after.error_detail)
    assert [t.error for t in c.history] == [ErrorKind.STREAM_CUT, None]  # no dropped attempt, no retry
    assert not after.reused_connection and srv.connections == 2


def test_second_request_reuses_keepalive_connection(servers):
    srv = servers(play([(0.0, http_response(200, body={"data": [{"id": "m"}]}))]), keep_alive=True)
    with client_for(srv) as c:
        t1, b1 = c.get_json("/models")
        t2, b2 = c.get_json("/models")
    assert t1.ok and t2.ok
    assert b1 == b2 == {"data": [{"id": "m"}]}
    assert not t1.reused_connection and t1.connect_ms is not None
    assert t2.reused_connection and t2.connect_ms is None and t2.tls_ms is None
    assert srv.connections == 1 and len(srv.requests) == 2
    assert t1.path == "/v1/models"


def test_stale_keepalive_connection_is_retried_once(servers):
    per_conn: dict[int, int] = {}

    def handler(conn, request):
        n = per_conn[id(conn)] = per_conn.get(id(conn), 0) + 1
        if n == 2:  # the server closed this idle connection just as the client reused it
            conn.shutdown(socket.SHUT_RDWR)
            return False
        conn.sendall(http_response(200, body={"n": n}))

    srv = servers(handler, keep_alive=True)
    with client_for(srv, max_requests=5) as c:
        t1, _ = c.get_json("/models")
        t2, b2 = c.get_json("/models")
    assert t1.ok and t2.ok and b2 == {"n": 1}
    assert [t.error for t in c.history] == [None, ErrorKind.PROTOCOL, None]
    assert c.history[1].reused_connection and not t2.reused_connection
    assert c.requests_sent == 3 and srv.connections == 2
    # The dropped attempt and its retry each carry their own id (the retry's is the first's ending "02").
    assert c.history[2].request_id == c.history[1].request_id[:-2] + "02" and c.history[2].retried


def test_budget_exhausted_before_sending(servers):
    srv = servers(play([(0.0, http_response(200, body={}))]), keep_alive=True)
    seen: list[RequestTiming] = []
    with client_for(srv, max_requests=3, on_request=seen.append) as c:
        c.get_json("/models")
        c.chat("x", max_tokens=1, stream=False)  # a failed request (bad body) counts too
        c.get_text("/metrics", root=True)
        assert c.requests_sent == 3 and c.budget_left == 0
        with pytest.raises(BudgetExhausted):
            c.get_json("/models")
        with pytest.raises(BudgetExhausted):
            c.chat("x", max_tokens=1)
    time.sleep(0.05)
    assert len(srv.requests) == 3
    assert len(c.history) == 3 and seen == c.history
    assert [t.path for t in c.history] == ["/v1/models", "/v1/chat/completions", "/metrics"]


def test_failed_requests_count_against_budget():
    with client_for(f"http://127.0.0.1:{unused_port()}", max_requests=1) as c:
        t, _ = c.get_json("/models")
        assert t.error == ErrorKind.REFUSED
        with pytest.raises(BudgetExhausted):
            c.get_json("/models")


# -- failures -----------------------------------------------------------------------------------------


def test_refused_port_quickly():
    start = time.perf_counter()
    with client_for(f"http://127.0.0.1:{unused_port()}") as c:
        t = c.chat("hi", max_tokens=1)
    assert time.perf_counter() - start < 1.0
    assert t.error == ErrorKind.REFUSED and t.status is None
    assert "refused" in t.error_detail
    assert t.total_ms is not None


class RecordingTransport(httpx.BaseTransport):
    """The network layer under the client, recording the timeouts each request reached it with."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.timeouts: list[dict[str, float]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.timeouts.append(dict(request.extensions["timeout"]))
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def test_accept_then_silence_times_out(servers):
    srv = servers(silence)
    network = RecordingTransport()
    with client_for(srv, timeout_s=1.0, clock=ScriptClock(), transport=network) as c:
        t = c.chat("hi", max_tokens=1)
    assert t.error == ErrorKind.READ_TIMEOUT, t
    # The socket waited timeout_s for an answer: every timeout it got is the request's 1 s.
    assert network.timeouts == [{"connect": 1.0, "read": 1.0, "write": 1.0, "pool": 1.0}]
    assert t.status is None and t.connect_ms is not None


def test_timeouts_reaching_the_network_are_capped_at_the_run_deadline(servers):
    srv = servers(play(chunked_sse_response([content("a"), final()], 0.0)))
    clock, network = ScriptClock(), RecordingTransport()
    with client_for(srv, timeout_s=10.0, clock=clock, transport=network, deadline_at=clock.now() + 4.5) as c:
        t = c.chat("hi", max_tokens=1)
    assert t.ok, t
    assert network.timeouts == [{"connect": 4.5, "read": 4.5, "write": 4.5, "pool": 4.5}]


def _drip(prefix: bytes, byte: bytes):
    def handler(conn, request):
        conn.sendall(prefix)
        while True:  # ends when the client (or stop()) closes the socket
            time.sleep(0.2)
            conn.sendall(byte)

    return handler


def test_drip_in_headers_hits_the_wall_deadline(servers):
    # Each byte resets httpx's per-read timeout: only a wall-clock deadline stops this.
    srv = servers(_drip(b"HTTP/1.1 200 OK\r\nX-Slow: ", b"a"))
    start = time.perf_counter()
    with client_for(srv, timeout_s=1.0) as c:
        t = c.chat("hi", max_tokens=1)
    elapsed = time.perf_counter() - start
    assert t.error == ErrorKind.READ_TIMEOUT, t
    assert elapsed < 2.0


def test_drip_in_stream_body_hits_the_wall_deadline(servers):
    head = http_response(200, {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked"})
    first = chunk(b"data: " + json.dumps(content("a")).encode() + b"\n\n")
    srv = servers(_drip(head + first, chunk(b":")))
    start = time.perf_counter()
    with client_for(srv, timeout_s=1.0) as c:
        t = c.chat("hi", max_tokens=1)
    elapsed = time.perf_counter() - start
    assert t.error == ErrorKind.READ_TIMEOUT, t
    assert elapsed < 2.0
    assert t.status == 200 and t.ttft_ms is not None and t.content_events == 1


def test_stream_cut_keeps_ttft(servers):
    clock = ScriptClock()
    steps = chunked_sse_response([content("a"), content("b")], [0.1, 0.05], done=False, end=False)
    srv = servers(play(steps, close=True, clock=clock))
    with client_for(srv, clock=clock) as c:
        t = c.chat("hi", max_tokens=10)
    assert t.error == ErrorKind.STREAM_CUT, t
    assert t.status == 200
    assert t.ttft_ms == pytest.approx(100, abs=1e-6)
    assert t.content_events == 2 and len(t.token_times_ms) == 2
    assert t.total_ms is not None and t.total_ms >= t.token_times_ms[-1]


def test_stream_ends_cleanly_without_done_or_finish_is_cut(servers):
    srv = servers(play(chunked_sse_response([content("a")], 0.0, done=False)))
    with client_for(srv) as c:
        t = c.chat("hi", max_tokens=10)
    assert t.error == ErrorKind.STREAM_CUT
    assert "without [DONE]" in t.error_detail


def test_finish_reason_without_done_is_fine(servers):
    srv = servers(play(chunked_sse_response([content("a"), final()], 0.0, done=False)))
    with client_for(srv) as c:
        t = c.chat("hi", max_tokens=10)
    assert t.ok, t


def test_done_then_connection_held_open_is_not_an_error(servers):
    head = http_response(200, {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked"})
    body = chunk(b"data: " + json.dumps(content("a")).encode() + b"\n\ndata: [DONE]\n\n")
    clock = ScriptClock()
    pings: list[float] = []

    def held_open(conn, request):
        conn.sendall(head + body)
        while True:  # a ping every 0.2 s on the client's clock; ends when the client closes
            time.sleep(0.05)
            clock.advance(0.2)
            pings.append(clock.now())
            conn.sendall(chunk(b": ping\n"))

    srv = servers(held_open)
    with client_for(srv, timeout_s=10.0, clock=clock) as c:
        t = c.chat("hi", max_tokens=1)
    assert t.ok, t
    # It waited DONE_GRACE_S (1 s) for the end of the body, not timeout_s (10 s): 5 pings, and the one after.
    assert len(pings) <= 8, pings
    assert t.total_ms == 0  # the answer ended with [DONE], which came with the headers


def test_http_401_openai_error_message(servers):
    body = {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
                      "code": "invalid_api_key"}}
    srv = servers(play([(0.0, http_response(401, body=body))]))
    with client_for(srv) as c:
        t = c.chat("hi", max_tokens=1)
    assert t.error == ErrorKind.HTTP_STATUS and t.status == 401
    assert "Incorrect API key provided" in t.error_detail
    assert "401" in t.error_detail


def test_http_500_plain_text_body(servers):
    srv = servers(play([(0.0, http_response(500, {"Content-Type": "text/plain"}, "x" * 1000))]))
    with client_for(srv) as c:
        t, body = c.get_json("/models")
    assert t.error == ErrorKind.HTTP_STATUS and t.status == 500 and body is None
    assert len(t.error_detail) < 300


def test_html_200_is_bad_body(servers):
    html = "<html><body><h1>Sign in to Corporate Proxy</h1></body></html>"
    srv = servers(play([(0.0, http_response(200, {"Content-Type": "text/html"}, html))]), keep_alive=True)
    with client_for(srv) as c:
        t, body = c.get_json("/models")
        ts = c.chat("hi", max_tokens=1)
    assert t.error == ErrorKind.BAD_BODY and t.status == 200 and body is None
    assert "text/html" in t.error_detail and "Corporate Proxy" in t.error_detail
    assert ts.error == ErrorKind.BAD_BODY and "text/html" in ts.error_detail


def test_malformed_chunks_counted_and_skipped(servers):
    events = ["{not json", content("a"), "[1, 2]", final()]
    srv = servers(play(chunked_sse_response(events, 0.0)), keep_alive=True)
    with client_for(srv) as c:
        t = c.chat("hi", max_tokens=1)
    assert t.ok, t
    assert t.content_events == 1 and "2 malformed" in t.error_detail


def test_only_malformed_chunks_is_bad_body(servers):
    srv = servers(play(chunked_sse_response(["nope", "still nope"], 0.0)))
    with client_for(srv) as c:
        t = c.chat("hi", max_tokens=1)
    assert t.error == ErrorKind.BAD_BODY


def test_error_event_in_stream(servers):
    events = [content("a"), {"error": {"message": "CUDA out of memory", "type": "server_error"}}]
    srv = servers(play(chunked_sse_response(events, 0.0)))
    with client_for(srv) as c:
        t = c.chat("hi", max_tokens=5)
    assert t.error is not None and "CUDA out of memory" in t.error_detail
    assert t.content_events == 1


def test_too_large_body(servers):
    srv = servers(play([(0.0, http_response(200, body={"data": "x" * 5000}))]))
    with client_for(srv, max_body_bytes=1000) as c:
        t, body = c.get_json("/models")
    assert t.error == ErrorKind.TOO_LARGE and body is None


def test_overlong_sse_line_is_too_large(servers):
    head = http_response(200, {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked"})
    srv = servers(_drip(head + chunk(b"data: " + b"x" * (1 << 20) + b"x"), chunk(b"x")))
    with client_for(srv) as c:
        t = c.chat("hi", max_tokens=1)
    assert t.error == ErrorKind.TOO_LARGE


def test_redirect_not_followed(servers):
    srv = servers(play([(0.0, http_response(302, {"Location": "http://elsewhere.example/v1/models"}))]),
                  keep_alive=True)
    with client_for(srv) as c:
        t, body = c.get_json("/models")
    time.sleep(0.05)
    assert t.status == 302 and t.error == ErrorKind.HTTP_STATUS and body is None
    assert "elsewhere.example" in t.error_detail and "not followed" in t.error_detail
    assert len(srv.requests) == 1


def test_protocol_garbage(servers):
    srv = servers(play([(0.0, b"SSH-2.0-OpenSSH_9.6\r\n")], close=True))
    with client_for(srv) as c:
        t = c.chat("hi", max_tokens=1)
    assert t.error == ErrorKind.PROTOCOL and t.status is None


# -- redaction ------------------------------------------------------------------------------------------


def test_api_key_never_leaks_even_when_echoed(servers):
    def echo(conn, request):
        auth = request_headers(request)["authorization"]
        path = request_line(request).split()[1]
        if path.endswith("/models"):
            body = {"error": {"message": f"invalid key {auth} ({auth.split()[1]})"}}
            conn.sendall(http_response(401, {"X-Echo": auth.split()[1]}, body))
        elif path.endswith("/completions") and "chat" not in path:
            conn.sendall(http_response(200, {"Content-Type": "text/html"}, "<p>" + "a" * 190 + auth + "</p>"))
        else:
            sse = chunked_sse_response([{"error": {"message": "quota exceeded for " + auth}}], 0.0)
            play(sse)(conn, request)

    srv = servers(echo, keep_alive=True)
    with client_for(srv) as c:
        t1, _ = c.get_json("/models")
        t2 = c.completion("x", max_tokens=1)
        t3 = c.chat("x", max_tokens=1)
    assert t1.error == ErrorKind.HTTP_STATUS and "invalid key" in t1.error_detail
    assert t2.error == ErrorKind.BAD_BODY
    assert t3.error is not None and "quota exceeded" in t3.error_detail
    for t in (t1, t2, t3):
        assert_no_canary(t)
        assert CANARY[:12] not in t.error_detail  # not even a truncated prefix
    assert CANARY not in repr(c.history)


def test_sensitive_response_headers_removed(servers):
    srv = servers(play([(0.0, http_response(200, {"Set-Cookie": "session=abc123secret", "X-Queue-Time": "3"},
                                             {"ok": True}))]))
    with client_for(srv) as c:
        t, _ = c.get_json("/models")
    assert "abc123secret" not in repr(t)
    assert t.response_headers["x-queue-time"] == "3"


# -- non-streamed responses and server hints ------------------------------------------------------------


def test_non_stream_chat_and_tgi_headers(servers):
    headers = {"x-compute-type": "1-nvidia-a10g", "x-compute-time": "0.241", "x-compute-characters": "42",
               "x-total-time": "241", "x-validation-time": "1", "x-queue-time": "17", "x-inference-time": "223",
               "x-time-per-token": "22", "x-prompt-tokens": "9", "x-generated-tokens": "10",
               "openai-processing-ms": "250"}
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello there",
                                                 "reasoning_content": "hmm"}, "finish_reason": "stop"}]}

    clock = ScriptClock()

    def handler(conn, request):
        time.sleep(0.1)
        clock.advance(0.1)
        conn.sendall(http_response(200, headers, body))

    srv = servers(handler)
    with client_for(srv, clock=clock) as c:
        t = c.chat("hi", max_tokens=10, stream=False, extra={"temperature": 0, "model": None})
    assert t.ok, t
    assert not t.streamed
    assert t.ttft_ms == t.total_ms and t.total_ms == pytest.approx(100, abs=1e-6)
    assert t.token_times_ms == []
    assert t.text == "Hello there" and t.finish_reason == "stop"
    st = t.server_timing
    assert st["tgi.queue_ms"] == 17 and st["tgi.inference_ms"] == 223 and st["tgi.time_per_token_ms"] == 22
    assert st["tgi.total_ms"] == 241 and st["tgi.validation_ms"] == 1
    assert st["tgi.compute_ms"] == pytest.approx(241)
    assert st["tgi.compute_characters"] == 42 and st["openai.processing_ms"] == 250
    assert t.prompt_tokens == 9 and t.completion_tokens == 10  # from the headers, no usage in the body
    sent = request_json(srv.requests[0])
    assert sent["stream"] is False and "stream_options" not in sent
    assert sent["temperature"] == 0 and "model" not in sent


def test_server_ignoring_stream_true_answers_json(servers):
    body = {"choices": [{"index": 0, "message": {"content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    srv = servers(play([(0.0, http_response(200, body=body))]))
    with client_for(srv) as c:
        t = c.chat("hi", max_tokens=1)
    assert t.ok, t
    assert not t.streamed and t.text == "ok" and t.completion_tokens == 1
    assert t.ttft_ms == t.total_ms


def test_root_urls_text_and_post_json(servers):
    def handler(conn, request):
        path = request_line(request).split()[1]
        if path == "/metrics":
            conn.sendall(http_response(200, {"Content-Type": "text/plain; version=0.0.4"}, "vllm:num_requests 1\n"))
        else:
            conn.sendall(http_response(200, body={"path": path, "got": request_json(request)}))

    srv = servers(handler, keep_alive=True)
    with client_for(srv) as c:
        t1, text = c.get_text("/metrics", root=True)
        t2, obj = c.post_json("/tokenize", {"content": "hi"}, root=True)
        t3, obj3 = c.get_json_url(srv.url + "/v1/models")
        with pytest.raises(ValueError):
            c.get_json_url("http://evil.example/v1/models")
    assert t1.ok and text == "vllm:num_requests 1\n" and t1.path == "/metrics"
    assert t2.ok and obj == {"path": "/tokenize", "got": {"content": "hi"}}
    assert t3.ok and obj3["path"] == "/v1/models"
    assert c.requests_sent == 3


# -- TLS and name resolution ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ctx)
    ca_path = tmp_path_factory.mktemp("tls") / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    return server_ctx, str(ca_path)


def test_tls_handshake_timed_with_ca_bundle(servers, tls_files):
    server_ctx, ca_path = tls_files
    srv = servers(play([(0.0, http_response(200, body={"data": []}))]), keep_alive=True, ssl_context=server_ctx)
    assert srv.url.startswith("https://")
    with client_for(srv, ca_bundle=ca_path) as c:
        t1, body = c.get_json("/models")
        t2, _ = c.get_json("/models")
    assert t1.ok, t1
    assert body == {"data": []}
    assert t1.tls_ms is not None and t1.tls_ms > 0 and t1.connect_ms is not None
    assert t1.setup_ms == pytest.approx(t1.connect_ms + t1.tls_ms)
    assert t2.ok and t2.reused_connection and t2.tls_ms is None


def test_untrusted_certificate_is_tls_error_and_insecure_skips_check(servers, tls_files):
    server_ctx, _ = tls_files
    srv = servers(play([(0.0, http_response(200, body={}))]), ssl_context=server_ctx)
    with client_for(srv) as c:
        t, _ = c.get_json("/models")
    assert t.error == ErrorKind.TLS, t
    assert "certificate" in t.error_detail.lower()
    with client_for(srv, insecure=True) as c:
        t, _ = c.get_json("/models")
    assert t.ok, t


def test_bad_ca_bundle_path_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="CA bundle"):
        ProbeClient(Target("https://127.0.0.1:1/v1"), ClientSettings(timeout_s=1, max_requests=1,
                                                                   ca_bundle=str(tmp_path / "no.pem")))


def test_name_resolution_failure_is_dns(monkeypatch):
    def fail(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", fail)
    with client_for("http://no-such-host.invalid:8000") as c:
        t = c.chat("hi", max_tokens=1)
    assert t.error == ErrorKind.DNS, t


def test_recorded_llamacpp_stream_counts_empty_byte_fallback_deltas_as_tokens(servers):
    """llama-cpp-python streams one chunk per token and no usage; a byte-fallback token that does not
    complete a character arrives as ``delta: {"content": ""}``. The recorded real stream (max_tokens 8,
    finish_reason length) has 8 token chunks, one of them empty: all 8 are output tokens."""
    from pathlib import Path

    raw = (Path(__file__).resolve().parents[1] / "fixtures/llamacpp/chat_stream.sse").read_text()
    events = [line[6:] for line in raw.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    steps = chunked_sse_response(events[:-1], 0.002)
    srv = servers(play(steps))
    with client_for(srv) as c:
        t = c.chat("Why is my endpoint slow?", max_tokens=8)
    assert t.ok, t
    assert t.finish_reason == "length" and t.completion_tokens is None
    assert t.output_tokens == 8 and len(t.token_times_ms) == 8
    assert t.first_content_ms is not None and t.ttft_ms is not None and t.ttft_ms <= t.first_content_ms


def test_an_answer_whose_only_token_is_held_back_is_one_token(servers):
    """vLLM 0.32 (fixtures/vllm/chat_stream_1token_empty.sse): a role chunk, then the token as empty content
    with finish_reason "length" and no content before it. The answer finished, so its token was generated:
    one token, and the time to first token is when it came (not "no token", not an error)."""
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    last = {"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "length"}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 1}}
    srv = servers(play(chunked_sse_response([role, last, usage], 0.002)))
    with client_for(srv) as c:
        t = c.chat("hi", max_tokens=1)
    assert t.ok, t
    assert t.content_events == 1 and t.output_tokens == 1 and t.ttft_ms is not None
    assert t.token_times_ms == [t.ttft_ms] and t.first_content_ms is None  # no text was shown


def test_usage_counts_the_tokens_a_bare_finishing_chunk_carried(servers):
    """A finishing ``delta: {}`` and then usage ``completion_tokens: 1``: the server generated a token that no
    chunk showed; it came out with the finishing chunk, so that is the time to first token. The control: the
    same stream with ``completion_tokens: 0`` has no first token."""
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    last = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
    for generated, has_ttft in ((1, True), (0, False)):
        usage = {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": generated}}
        srv = servers(play(chunked_sse_response([role, last, usage], 0.002)))
        with client_for(srv) as c:
            t = c.chat("hi", max_tokens=1)
        assert t.ok and t.output_tokens == generated, t
        assert (t.ttft_ms is not None) is has_ttft and len(t.token_times_ms) == generated


def test_role_chunk_and_final_chunk_with_empty_content_are_not_tokens(servers):
    """vLLM and OpenAI open with ``{"role": "assistant", "content": ""}``; some servers close with an
    empty content delta next to finish_reason. Neither is a generated token."""
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    last = {"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "length"}]}
    srv = servers(play(chunked_sse_response([role, content("a"), content("b"), last])))
    with client_for(srv) as c:
        t = c.chat("hi", max_tokens=2)
    assert t.ok, t
    assert t.output_tokens == 2 and len(t.token_times_ms) == 2
