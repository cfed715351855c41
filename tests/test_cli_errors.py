"""Error paths a new user meets: each ends in one line or a CRITICAL finding, never a traceback."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from tests.cliutil import finding_ids, run_cli, run_process
from tests.rawserver import ScriptedServer, chunked_sse_response, http_response, play, unused_port

MODELS = {"object": "list", "data": [{"id": "m", "object": "model"}]}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["check", "-e", "ftp://example"], "unsupported URL scheme"),
        (["check", "-e", "http://host:99999"], "invalid port"),
        (["check", "-e", "http://"], "no host"),
        (["check", "-e", "http://[::1"], "Invalid IPv6 URL"),
        (["check", "-e", "ht!tp:/nope"], "endpoint URL: 'ht!tp' is not a valid host name"),
        (["check", "--max-requests", "0"], "--max-requests"),
        (["check", "--no-such-flag"], "No such option"),
        (["explain", "LD999"], "no check"),
        (["check", "--select", "LD701,LD999"], "--select LD999: no check id"),
        (["check", "--ignore", "XYZ"], "--ignore XYZ: no check id"),
        (["replay", "/nonexistent.json"], "does not exist"),
        (["check", "--log", "/nonexistent.log"], "no such file"),
    ],
)
def test_bad_input_is_one_line_and_exit_3(args: list[str], message: str) -> None:
    result = run_process(*args, timeout=60)
    assert result.code == 3
    assert "Traceback" not in result.err + result.out
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmdoctor: error:") and message in lines[0], result.err


def test_replay_of_a_non_recording_is_exit_3(tmp_path) -> None:
    bogus = tmp_path / "x.json"
    bogus.write_text('{"hello": 1}')
    result = run_process("replay", str(bogus))
    assert result.code == 3 and "not a llmdoctor measurements file" in result.err


def test_no_server_on_the_port_is_critical() -> None:
    port = unused_port()
    result = run_process("check", "-e", f"http://127.0.0.1:{port}", "--json")
    assert result.code == 2 and "Traceback" not in result.err
    report = result.report
    assert report["findings"][0]["check_id"] == "LD001"
    assert "refused" in report["findings"][0]["title"].lower()
    text = run_process("check", "-e", f"http://127.0.0.1:{port}")
    assert text.code == 2 and re.search(r"^\s*1\. CRITICAL Connection refused", text.out, re.M), text.out
    assert re.search(r"^\s*1\. .+ · LD001 · critical", text.out, re.M) and "Result: CRITICAL (exit 2)" in text.out


def test_wrong_path_suggests_the_v1_base(capsys: pytest.CaptureFixture[str]) -> None:
    with SimServer(get_profile("healthy")) as server:
        result = run_cli(capsys, "check", "-e", server.url + "/api", "--json")
    top = result.report["findings"][0]
    assert result.code == 2 and top["check_id"] == "LD001"
    assert f"did you mean {server.url}/v1" in top["message"].lower()


def test_unauthorized_is_critical_with_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    with SimServer(get_profile("unauthorized")) as server:
        result = run_cli(capsys, "check", "-e", server.url, "--json", "--api-key-env", "LLMDOCTOR_NO_SUCH_VAR")
        generation = server.generation_requests
    top = result.report["findings"][0]
    assert result.code == 2 and "authentication failed" in top["title"].lower()
    assert "--api-key-env" in " ".join(top["fix"]["steps"])
    assert "HTTP 401: HTTP 401" not in top["message"] and "HTTP 401: " in top["message"]
    assert generation == 0  # a 401 on /models stops the doctor before any generation request


def test_non_json_body_is_reported_not_crashed(capsys: pytest.CaptureFixture[str]) -> None:
    html = http_response(200, {"Content-Type": "text/html"}, "<html><body>Sign in</body></html>")
    with ScriptedServer(play([(0.0, html)]), keep_alive=True) as server:
        result = run_cli(capsys, "check", "-e", server.url, "--model", "m", "--json")
    report = result.report
    assert result.code == 2
    top = report["findings"][0]
    assert top["check_id"] == "LD001" and "not an openai-compatible" in top["title"].lower()
    assert all(c["status"] != "crashed" for c in report["checks"])


def test_stream_that_stops_mid_way_is_critical(capsys: pytest.CaptureFixture[str]) -> None:
    def handler(conn, request: bytes) -> bool:
        if request.startswith(b"GET"):
            conn.sendall(http_response(200, body=MODELS))
            return True
        chunk = {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": None}]}
        for _, data in chunked_sse_response([chunk, chunk], 0.01, done=False, end=False):
            conn.sendall(data)
        return False  # close mid-stream

    with ScriptedServer(handler, keep_alive=True) as server:
        result = run_cli(capsys, "check", "-e", server.url, "--json")
    top = result.report["findings"][0]
    assert result.code == 2 and top["check_id"] == "LD001"
    assert "stream stopped mid-way after 2 tokens" in top["title"].lower()


def test_silent_server_never_hangs_past_the_timeout() -> None:
    def silent(conn, request: bytes) -> bool:
        time.sleep(30)
        return False

    with ScriptedServer(silent) as server:
        started = time.monotonic()
        result = run_process("check", "-e", server.url, "--timeout", "1", "--json", timeout=60)
        elapsed = time.monotonic() - started
    assert result.code == 2 and "no answer in time" in result.report["findings"][0]["title"].lower()
    assert elapsed < 1 + 8  # one timed-out request, plus interpreter start-up on a loaded machine


def test_help_does_not_import_heavy_modules() -> None:
    code = (
        "import sys\n"
        "from llmdoctor.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('transformers', 'pynvml', 'torch', 'prometheus_client', 'dns') if m in sys.modules]\n"
        "print('HEAVY:' + ','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "HEAVY:"


def test_checks_lists_the_checklist_and_explain_prints_docs(capsys: pytest.CaptureFixture[str]) -> None:
    listing = run_cli(capsys, "checks")
    assert listing.code == 0 and "LD001" in listing.out and "LD702" in listing.out
    docs = run_cli(capsys, "explain", "ld702")
    for section in ("What it checks", "Why it adds latency", "Fix"):
        assert f"\n{section}\n" in docs.out  # a heading of its own, without the docstring's markup
    assert "``" not in docs.out and "## " not in docs.out and "max_tokens" in docs.out
    # what it measures, in the user's words, not the probe's internal name
    assert "Measures: the output-length sweep (requests with max_tokens 1, 16 and 64)" in docs.out
    assert "Measurements used" not in docs.out
    assert finding_ids({"findings": []}) == []


@pytest.mark.parametrize("url", ["http://user:CANARY-PW@", "http://user:CANARY-PW@[::1"])
def test_a_bad_endpoint_url_never_echoes_its_password(url: str) -> None:
    result = run_process("check", "-e", url, timeout=60)
    assert result.code == 3 and "CANARY" not in result.out + result.err, result.err
    assert "***@" in result.err


def test_serve_sim_announces_its_url() -> None:
    """The ready line names the URL to pass to --endpoint, not an object's repr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmdoctor", "serve-sim", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert "object at 0x" not in line, line
    assert "serving http://127.0.0.1:" in line and line.split()[4].endswith("/v1"), line


def test_check_help_groups_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    """42 options in one flat list were hard to read: they come in groups, each option in one."""
    result = run_cli(capsys, "check", "--help")
    assert result.code == 0
    headings = re.findall(r"^(\w[\w ]+):$", result.out, re.M)
    groups = ["Target", "Request budget", "Evidence sources", "Request lint", "Gate", "Output", "Fleet"]
    assert [h for h in headings if h in groups] == groups
    assert headings[-1] == "Other options"  # only --help is left over
    other = result.out.split("\nOther options:\n", 1)[1]
    assert re.findall(r"^\s+(-[-\w, ]+?)\s{2}", other, re.M) == ["-h, --help"], other
    options = result.out.split("\nTarget:\n", 1)[1]  # the description mentions some options first
    assert options.index("--endpoint") < options.index("--max-requests") < options.index("--log FILE")
