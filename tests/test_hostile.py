"""The hostile-endpoint matrix: the whole CLI against real loopback servers that misbehave.

Every case runs `llmdoctor check` (in-process, or as a real subprocess for a sample) with a
short --timeout and a global --deadline, a canary API key and a canary x-api-key header, and
--verbose, --save-measurements. For each case it asserts:

- the run ends within --deadline plus a margin (no hang, whatever the server does);
- the exit code is the documented one (2 for a broken endpoint, 1 for rate limiting, 0 when
  the doctor copes with a quirky but working stream);
- the finding names what happened (LD001's title), on one line of the text report;
- the JSON report is valid against the shipped schema; no "Traceback" anywhere;
- the canaries appear in no output: stdout, stderr (verbose log) and the saved measurements,
  although several servers echo the Authorization and x-api-key headers back in error
  bodies, response headers and SSE events.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from tests.cliutil import Result, run_cli, run_process, validate_report
from tests.rawserver import (
    ScriptedServer,
    chunk,
    chunked_sse_response,
    http_response,
    play,
    request_headers,
    request_line,
    unused_port,
)

CANARY_KEY = "sk-CANARY1-3f9a7c51e2d4"
CANARY_HEADER = "CANARY2-b81e44d0aa17"
KEY_ENV = "LLMDOCTOR_HOSTILE_KEY"
TIMEOUT_S = 1.5
DEADLINE_S = 5.0
MARGIN_S = 3.0  # interpreter start-up, imports, the host probe's CPU sample, rendering

MODELS = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "me"}]}
TOKEN = {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": None}]}
FINISH = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 3, "completion_tokens": 1}}

Handler = Callable[[socket.socket, bytes], Any]


# -- server behaviours ------------------------------------------------------------------------

def _silence(conn: socket.socket, request: bytes) -> bool:
    """Say nothing until the server stops (which closes the socket)."""
    while conn.fileno() != -1:
        time.sleep(0.05)
    return False


def _send(data: bytes, close: bool = False) -> Handler:
    return play([(0.0, data)], close=close)


def _routes(models: Handler, chat: Handler, other: Handler | None = None) -> Handler:
    """GET .../models → `models`; POST .../completions → `chat`; anything else → `other` (404)."""
    missing = other or _send(http_response(404, body={"error": "not found"}))

    def handler(conn: socket.socket, request: bytes) -> Any:
        line = request_line(request)
        if line.startswith("GET") and "/models" in line:
            return models(conn, request)
        if line.startswith("POST") and "completions" in line:
            return chat(conn, request)
        return missing(conn, request)
    return handler


def _echo_secrets(status: int) -> Handler:
    """An error that echoes the credentials it received in its body and its headers."""
    def handler(conn: socket.socket, request: bytes) -> bool:
        hdrs = request_headers(request)
        auth, xkey = hdrs.get("authorization", ""), hdrs.get("x-api-key", "")
        body = {"error": {"message": f"invalid credentials: Authorization: {auth}; x-api-key={xkey}; "
                                     f"key={auth.removeprefix('Bearer ')}", "type": "auth_error"}}
        conn.sendall(http_response(status, {"X-Echo-Auth": auth, "X-Echo-Key": xkey, "Www-Authenticate": auth},
                                   body))
        return True
    return handler


def _echo_sse(conn: socket.socket, request: bytes) -> bool:
    """A working stream whose tokens and headers echo the credentials back."""
    hdrs = request_headers(request)
    auth, xkey = hdrs.get("authorization", ""), hdrs.get("x-api-key", "")
    echo = {"choices": [{"index": 0, "delta": {"content": f"you sent {auth} and {xkey} "}, "finish_reason": None}]}
    for _delay, data in chunked_sse_response([echo, FINISH], headers={"X-Echo": f"{auth} {xkey}"}):
        conn.sendall(data)
    return True


def _sse_raw(body: bytes, *, per_byte: bool = False, ctype: str = "text/event-stream") -> Handler:
    """A chunked event stream of exactly `body` (one byte per chunk with `per_byte`)."""
    head = http_response(200, {"Content-Type": ctype, "Transfer-Encoding": "chunked"})

    def handler(conn: socket.socket, request: bytes) -> bool:
        conn.sendall(head)
        pieces = [body[i:i + 1] for i in range(len(body))] if per_byte else [body]
        for piece in pieces:
            conn.sendall(chunk(piece))
        conn.sendall(chunk(b""))
        return True
    return handler


def _drip(data: bytes, every_s: float) -> Handler:
    """Slowloris: one byte every `every_s` seconds, forever (until the client gives up)."""
    def handler(conn: socket.socket, request: bytes) -> bool:
        for i in range(len(data)):
            time.sleep(every_s)
            conn.sendall(data[i:i + 1])
        return _silence(conn, request)
    return handler


def _endless(conn: socket.socket, request: bytes) -> bool:
    conn.sendall(http_response(200, {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked"}))
    event = b"data: " + json.dumps(TOKEN).encode() + b"\n\n"
    while True:
        conn.sendall(chunk(event))
        time.sleep(0.01)


def _gigantic(conn: socket.socket, request: bytes) -> bool:
    size = 100 << 20
    conn.sendall(http_response(200, {"Content-Type": "application/json", "Content-Length": str(size)}))
    block = b" " * (1 << 20)
    for _ in range(100):
        conn.sendall(block)
    return False


def _http10(body: bytes, ctype: str) -> Handler:
    return _send(http_response(200, {"Content-Type": ctype}, body, version="HTTP/1.0", content_length=False),
                 close=True)


def _sse_bytes(*events: dict | str, eol: bytes = b"\n") -> bytes:
    out = b""
    for e in events:
        text = e if isinstance(e, str) else json.dumps(e)
        out += b"data: " + text.encode() + eol + eol
    return out


OK_MODELS = _send(http_response(200, body=MODELS))
OK_STREAM = _sse_raw(_sse_bytes(TOKEN, FINISH, "[DONE]"))


# -- the matrix -------------------------------------------------------------------------------

@dataclass
class Case:
    """One hostile endpoint and what the doctor must say about it."""

    name: str
    handler: Handler | None  # None: nothing listens (connection refused)
    title: str  # expected substring of LD001's title ("" when LD001 must not fire)
    code: int | None = 2
    model: bool = True  # pass --model m
    subprocess: bool = False  # run as a real process (for tracebacks and exit codes)
    text: bool = True  # also run in text mode
    hangs: bool = False  # the server never finishes: the run is bounded by --timeout/--deadline
    extra: tuple[str, ...] = ()
    check: Callable[[dict[str, Any], list[bytes]], None] | None = None
    tls: bool = False
    host: str = "127.0.0.1"
    args: list[str] = field(default_factory=list)


def _no_auth_at_other_host(report: dict[str, Any], requests: list[bytes]) -> None:
    other = OTHER_HOST["server"]
    assert other.connections == 0 and other.requests == []  # redirect reported, NOT followed


def _retried_once(report: dict[str, Any], requests: list[bytes]) -> None:
    posts = [r for r in requests if request_line(r).startswith("POST")]
    assert len(posts) == 2, [request_line(r) for r in requests]  # the 429, then one retry after 1 s


def _no_retry(report: dict[str, Any], requests: list[bytes]) -> None:
    posts = [r for r in requests if request_line(r).startswith("POST")]
    assert len(posts) == 1, [request_line(r) for r in requests]  # no Retry-After: no retry, no hammering


def _baseline_ran(report: dict[str, Any], requests: list[bytes]) -> None:
    probes = {p["name"]: p for p in report["probes"]}
    assert probes["first_request"]["available"] and probes["baseline"]["available"], probes.get("baseline")


OTHER_HOST: dict[str, ScriptedServer] = {}


def _redirect_elsewhere(conn: socket.socket, request: bytes) -> bool:
    # Another origin (a different port): the key must never reach it.
    location = OTHER_HOST["server"].url + "/v1/models"
    conn.sendall(http_response(302, {"Location": location}, b""))
    return True


def _redirect_loop(conn: socket.socket, request: bytes) -> bool:
    path = request_line(request).split(" ")[1]
    conn.sendall(http_response(301, {"Location": path + "x"}, b""))
    return True


def _status(code: int, body: Any = None, headers: dict[str, str] | None = None) -> Handler:
    return _send(http_response(code, headers, body if body is not None else {"error": {"message": f"status {code}"}}))


CASES = [
    Case("connection-refused", None, "Connection refused", subprocess=True),
    Case("accept-then-silence", _silence, "No answer in time", hangs=True, subprocess=True, text=False),
    Case("headers-then-silence", _send(http_response(200, {"Content-Type": "application/json",
                                                           "Content-Length": "500"}, b"")),
         "No complete answer", hangs=True, model=False, text=False),
    Case("slowloris-drip", _drip(http_response(200, body=MODELS), 0.2), "No answer in time", hangs=True,
         text=False),
    Case("tls-self-signed", OK_MODELS, "TLS handshake failed", tls=True, subprocess=True),
    Case("tls-ca-bundle-accepted", _routes(OK_MODELS, OK_STREAM), "", code=None, tls=True, args=["--ca-bundle"],
         check=_baseline_ran),
    Case("tls-insecure-accepted", _routes(OK_MODELS, OK_STREAM), "", code=None, tls=True, extra=("--insecure",),
         check=_baseline_ran, text=False),
    Case("redirect-loop-301", _redirect_loop, "Redirected (HTTP 301), not followed", model=False),
    Case("redirect-other-host", _redirect_elsewhere, "Redirected (HTTP 302), not followed", model=False,
         check=_no_auth_at_other_host, subprocess=True),
    Case("401-echoing-key", _echo_secrets(401), "Authentication failed (HTTP 401)"),
    Case("403-echoing-key", _echo_secrets(403), "Authentication failed (HTTP 403)", text=False),
    Case("404-everywhere", _status(404), "Not found (HTTP 404)", model=False),
    Case("405-on-chat", _routes(OK_MODELS, _status(405)), "The first generation request failed"),
    Case("413-on-chat", _routes(OK_MODELS, _status(413)), "The first generation request failed", text=False),
    Case("422-echoing-key", _routes(OK_MODELS, _echo_secrets(422)), "The first generation request failed"),
    Case("429-retry-after", _routes(OK_MODELS, _status(429, headers={"Retry-After": "1"})),
         "Rate limited (HTTP 429)", code=1, check=_retried_once),
    Case("429-no-retry-after", _routes(OK_MODELS, _status(429)), "Rate limited (HTTP 429)", code=1,
         check=_no_retry, subprocess=True),
    Case("500", _routes(OK_MODELS, _status(500)), "Generation fails with HTTP 500", text=False),
    Case("502-html", _routes(OK_MODELS, _send(http_response(502, {"Content-Type": "text/html"},
                                                            b"<html><body>Bad Gateway</body></html>"))),
         "Generation fails with HTTP 502"),
    Case("503-loading", _status(503, {"error": {"message": "Model is loading", "type": "loading"}},
                                {"Retry-After": "1"}), "Model still loading (HTTP 503)", model=False),
    Case("504", _routes(OK_MODELS, _status(504)), "Generation fails with HTTP 504", text=False),
    Case("html-200", _send(http_response(200, {"Content-Type": "text/html"},
                                         b"<!doctype html><html><body>Sign in</body></html>")),
         "Not an OpenAI-compatible response", model=False),
    Case("html-200-on-chat", _routes(OK_MODELS, _send(http_response(200, {"Content-Type": "text/html"},
                                                                    b"<html>login</html>"))),
         "Not an OpenAI-compatible response", text=False),
    Case("non-json", _send(http_response(200, {"Content-Type": "application/json"}, b"this is not json {")),
         "Not an OpenAI-compatible response", model=False),
    Case("json-wrong-shape", _routes(_send(http_response(200, body={"models": "m"})),
                                     _send(http_response(200, body={"answer": "ok"}))),
         "Not an OpenAI-compatible response"),
    Case("sse-without-done", _routes(OK_MODELS, _sse_raw(_sse_bytes(TOKEN, TOKEN))),
         "Stream stopped mid-way after 2 tokens"),
    Case("sse-cut-mid-way", _routes(OK_MODELS, play(chunked_sse_response([TOKEN, TOKEN, TOKEN], done=False,
                                                                           end=False), close=True)),
         "Stream stopped mid-way after 3 tokens", subprocess=True),
    Case("sse-malformed-comments-events-crlf",
         _routes(OK_MODELS, _sse_raw(b": keep-alive comment\r\nevent: message\r\nid: 7\r\n"
                                     b"data: {not json\r\n\r\ndata: " + json.dumps(TOKEN).encode() +
                                     b"\r\n\r\nretry: 10\r\n\r\nfoo\r\n\r\n" + _sse_bytes(FINISH, "[DONE]",
                                                                                     eol=b"\r\n"))),
         "", code=None, check=_baseline_ran),
    Case("sse-one-byte-per-chunk", _routes(OK_MODELS, _sse_raw(_sse_bytes(TOKEN, FINISH, "[DONE]"), per_byte=True)),
         "", code=None, check=_baseline_ran, text=False),
    Case("sse-echoing-key", _routes(OK_MODELS, _echo_sse), "", code=None, check=_baseline_ran),
    Case("endless-stream", _routes(OK_MODELS, _endless), f"No complete answer within {TIMEOUT_S:g} s",
         hangs=True),
    Case("gigantic-body", _gigantic, "Response too large", model=False, text=False),
    Case("invalid-utf8", _routes(_send(http_response(200, {"Content-Type": "application/json"},
                                                     b'{"data": [{"id": "\xff\xfe"}]}')),
                                 _sse_raw(b"data: \xff\xfe\x80 not json\n\n")),
         "Not an OpenAI-compatible response"),
    Case("wrong-content-type-sse-as-text", _routes(OK_MODELS, _sse_raw(_sse_bytes(TOKEN, FINISH, "[DONE]"),
                                                                       ctype="text/plain")),
         "", code=None, check=_baseline_ran, text=False),
    Case("http10-close-delimited", _routes(_http10(json.dumps(MODELS).encode(), "application/json"),
                                           _http10(_sse_bytes(TOKEN, FINISH, "[DONE]"), "text/event-stream")),
         "", code=None, check=_baseline_ran),
    Case("ipv6-only", _routes(OK_MODELS, OK_STREAM), "", code=None, host="::1", check=_baseline_ran, text=False),
]


def _ipv6_available() -> str | None:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError as exc:
        return f"no IPv6 loopback on this machine: {exc}"
    return None


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(server_ctx)
    ca_path = tmp_path_factory.mktemp("tls") / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    return {"server": server_ctx, "ca": str(ca_path)}


@pytest.fixture(scope="module", autouse=True)
def other_host() -> Any:
    with ScriptedServer(_send(http_response(200, body=MODELS))) as srv:
        OTHER_HOST["server"] = srv
        yield srv


def _assert_no_canary(*texts: str) -> None:
    for text in texts:
        assert "CANARY" not in text, text[max(0, text.find("CANARY") - 200):text.find("CANARY") + 100]


def _finding_titles(report: dict[str, Any]) -> list[str]:
    # LD001's finding, also where it folds under a cause another finding carries (LD002: the same 429s)
    return [g["title"] for f in report["findings"] for g in (f, *f["supporting"]) if g["check_id"] == "LD001"]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_endpoint(case: Case, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                          tmp_path: Path, tls_files: dict[str, Any]) -> None:
    if case.host == "::1" and (why := _ipv6_available()):
        pytest.skip(why)
    monkeypatch.setenv(KEY_ENV, CANARY_KEY)
    srv = None
    if case.handler is not None:
        srv = ScriptedServer(case.handler, keep_alive=True, read_timeout_s=5,
                             ssl_context=tls_files["server"] if case.tls else None, host=case.host)
        url = srv.url
    else:
        url = f"http://127.0.0.1:{unused_port()}"
    saved = tmp_path / "measurements.json"
    args = ["check", "-e", url, "--timeout", str(TIMEOUT_S), "--deadline", str(DEADLINE_S),
            "--max-requests", "12", "--samples", "2", "--api-key-env", KEY_ENV,
            "--header", f"x-api-key: {CANARY_HEADER}", "--verbose", *case.extra]
    if case.model:
        args += ["--model", "m"]
    if "--ca-bundle" in case.args:
        args += ["--ca-bundle", tls_files["ca"]]
    try:
        started = time.perf_counter()
        if case.subprocess:
            result = run_process(*args, "--json", "--save-measurements", str(saved), timeout=60,
                                 env={KEY_ENV: CANARY_KEY})
        else:
            result = run_cli(capsys, *args, "--json", "--save-measurements", str(saved))
        elapsed = time.perf_counter() - started
        requests_of_json_run = list(srv.requests) if srv is not None else []
        text: Result | None = None
        if case.text:
            text = run_cli(capsys, *args)
    finally:
        if srv is not None:
            srv.stop()

    # Bounded: the whole run within the deadline plus a margin, whatever the server does.
    assert elapsed < DEADLINE_S + MARGIN_S, f"{case.name}: {elapsed:.1f} s"
    report = result.report  # parsed and validated against the schema
    titles = _finding_titles(report)
    if case.title:
        assert any(case.title in t for t in titles), (titles, report["probes"])
    else:
        assert titles == [], [f["message"] for f in report["findings"] if f["check_id"] == "LD001"]
    if case.code is not None:
        assert result.code == report["exit_code"] == case.code
    else:
        assert result.code == report["exit_code"] and result.code in (0, 1)
    if case.check is not None:
        case.check(report, requests_of_json_run)
    outputs = [result.out, result.err, saved.read_text()]
    if text is not None:
        outputs += [text.out, text.err]
        # A working stream's warnings depend on measured timings, which differ between two runs.
        assert text.code == result.code if case.code is not None else text.code in (0, 1)
        if case.title:  # the human report names it in its ranked summary, and its details name the check
            _assert_summary_names(text.out, case.title, "LD001")
    for out in outputs:
        assert "Traceback" not in out
    _assert_no_canary(*outputs)
    assert CANARY_KEY not in json.dumps(report) and "llmdoctor: GET" in result.err  # --verbose logged
    if srv is not None:
        assert srv.errors == [] or all(isinstance(e, OSError) for e in srv.errors)


def _assert_summary_names(out: str, title: str, check_id: str) -> None:
    """A summary line (`` N. SEVERITY title — cost · fix``) has `title`; the details of rank N are `check_id`'s.

    The summary answers first without ids; its rank links each line to the details, whose heading
    (`` N. heading · LD001 · critical · confirmed``) names the check.
    """
    summary = re.compile(r"^\s*(\d+)\. (?:CRITICAL|WARNING|INFO)\s+(.*)$")
    ranks = [m.group(1) for m in map(summary.match, out.splitlines()) if m and title in m.group(2)]
    if not ranks and re.search(rf"^\s*- {check_id} {re.escape(title)}", out, re.M):
        return  # folded under a finding that names the same cause (LD002's 429s): listed in its "Also found by"
    assert ranks, out
    assert any(re.search(rf"^\s*{rank}\. .+ · {check_id} · ", out, re.M) for rank in ranks), out


# -- deadlines, Ctrl-C, budget, dry run -------------------------------------------------------

def test_deadline_bounds_a_run_of_slow_requests(capsys: pytest.CaptureFixture[str]) -> None:
    """Each answer takes 1 s; with a budget of 20 such requests, --deadline 3 stops the run at 3 s."""
    slow = play([(1.0, b"")] + chunked_sse_response([TOKEN, FINISH]))
    with ScriptedServer(_routes(OK_MODELS, slow), keep_alive=True) as srv:
        started = time.perf_counter()
        result = run_cli(capsys, "check", "-e", srv.url, "--model", "m", "--timeout", "10", "--deadline", "3",
                         "--max-requests", "20", "--json", "--select", "LD001,LD301,LD701,LD702")
        elapsed = time.perf_counter() - started
        posts = sum(1 for r in srv.requests if request_line(r).startswith("POST"))
    report = result.report
    assert elapsed < 3 + MARGIN_S
    assert posts <= 4  # never more than fit in the deadline
    reasons = [c["reason"] for c in report["checks"] if c["status"] == "skipped"]
    assert any("deadline reached" in r for r in reasons), report["checks"]


def test_ctrl_c_during_a_streaming_request_prints_the_partial_report(tmp_path: Path) -> None:
    """SIGINT while a slow stream is in flight: a JSON report marked interrupted, exit 3, no traceback."""
    slow = play(chunked_sse_response([TOKEN] * 200, delay_s=0.1))
    with ScriptedServer(_routes(OK_MODELS, slow), keep_alive=True) as srv:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llmdoctor", "check", "-e", srv.url, "--model", "m", "--timeout", "60",
             "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, KEY_ENV: CANARY_KEY}, cwd=tmp_path,
        )
        try:
            deadline = time.monotonic() + 30
            while not any(request_line(r).startswith("POST") for r in srv.requests):
                assert time.monotonic() < deadline and proc.poll() is None, "no streaming request was sent"
                time.sleep(0.05)
            time.sleep(0.3)  # mid-stream
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert "Traceback" not in err, err
    report = json.loads(out)
    validate_report(report)
    assert report["interrupted"] is True
    assert proc.returncode == 3 == report["exit_code"] and report["status"] == "unknown"
    probes = {p["name"]: p for p in report["probes"]}
    assert probes["discovery"]["available"]  # what was measured before Ctrl-C is kept
    assert "interrupted" in probes["first_request"]["reason"]


def _http_requests(srv: ScriptedServer) -> list[str]:
    """Request lines of the HTTP requests the server read (the transport probe's raw HTTP/2
    prefaces, "PRI * HTTP/2.0", are TCP round-trip samples, not requests)."""
    return [request_line(r) for r in srv.requests if not request_line(r).startswith("PRI ")]


def test_budget_is_counted_at_the_server_including_retries(capsys: pytest.CaptureFixture[str]) -> None:
    """429 with Retry-After: 0 on every request: retries happen, and still never beyond the budget."""
    budget = 3
    with ScriptedServer(_routes(OK_MODELS, _status(429, headers={"Retry-After": "0"}),
                                other=_status(429, headers={"Retry-After": "0"})), keep_alive=True) as srv:
        result = run_cli(capsys, "check", "-e", srv.url, "--model", "m", "--max-requests", str(budget),
                         "--json", "--timeout", "2")
        at_server = _http_requests(srv)
    assert len(at_server) == result.report["requests"]["sent"] == budget, at_server
    # The first 429 is retried once (Retry-After: 0), and then the budget is spent.
    assert at_server == ["GET /v1/models HTTP/1.1"] + ["POST /v1/chat/completions HTTP/1.1"] * 2


def test_budget_holds_with_stale_keepalive_retries(capsys: pytest.CaptureFixture[str]) -> None:
    """A server that closes every keep-alive connection right after answering (stale-connection retries)."""
    def close_after(conn: socket.socket, request: bytes) -> bool:
        inner = OK_STREAM if request_line(request).startswith("POST") else OK_MODELS
        inner(conn, request)
        return False  # close without "Connection: close": the client's pooled connection goes stale
    budget = 7
    with ScriptedServer(close_after, keep_alive=True) as srv:
        result = run_cli(capsys, "check", "-e", srv.url, "--model", "m", "--max-requests", str(budget),
                         "--json", "--timeout", "2")
        at_server = _http_requests(srv)
    # A retried request may or may not have reached the server before its connection died.
    assert len(at_server) <= result.report["requests"]["sent"] <= budget, at_server


def test_dry_run_sends_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with ScriptedServer(OK_MODELS) as srv:
        result = run_cli(capsys, "check", "-e", srv.url, "--model", "m", "--dry-run", "--max-requests", "9",
                         "--concurrency", "4")
        time.sleep(0.1)
        assert srv.connections == 0
    assert result.code == 0
    assert "nothing is sent" in result.out
    assert f"GET  {srv.url}/v1/models" in result.out
    assert f"POST {srv.url}/v1/chat/completions" in result.out and '"max_tokens": 8' in result.out
    assert "At most 9 HTTP requests" in result.out
    assert "4 in parallel" in result.out


def test_concurrency_is_opt_in(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --concurrency the doctor sends one request at a time."""
    with SimServer(get_profile("healthy")) as server:
        result = run_cli(capsys, "check", "-e", server.url, "--json", "--select", "LD5,LD7")
    probes = {p["name"]: p for p in result.report["probes"]}
    assert "opt-in" in probes["concurrency"]["reason"]
    assert result.report["requests"]["sent"] <= 30


@pytest.mark.parametrize("chat", [_echo_secrets(422), _echo_sse], ids=["error-body", "sse-tokens"])
def test_canary_in_no_report_format(chat: Handler, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Servers echoing the credentials: every renderer (text, JSON, Markdown, JUnit, HTML) masks them."""
    from llmdoctor.render import RENDERERS

    monkeypatch.setenv(KEY_ENV, CANARY_KEY)
    with ScriptedServer(_routes(OK_MODELS, chat), keep_alive=True) as srv:
        for fmt in RENDERERS:
            out = tmp_path / f"report.{fmt}"
            result = run_cli(capsys, "check", "-e", srv.url, "--model", "m", "--api-key-env", KEY_ENV,
                             "--header", f"x-api-key: {CANARY_HEADER}", "--header", f"Cookie: s={CANARY_HEADER}x",
                             "--select", "LD0,LD7", "--samples", "1", "--timeout", "2", "--format", fmt,
                             "-o", str(out), "--verbose")
            _assert_no_canary(result.out, result.err, out.read_text())
        echoed = [r for r in srv.requests if CANARY_KEY.encode() in r]
    assert echoed  # the key was sent, and echoed back, so the masking was really exercised
