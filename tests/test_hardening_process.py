"""The process around the diagnosis (issue 19): outputs, signals, children, proxies, endurance.

Real processes (``python -m llmdoctor``) with real file descriptors, pipes, signals and a
real HTTP proxy on loopback, because that is where these behaviours live:

- a closed or full stdout/stderr, a reader that leaves: one line on what still works and the
  run's own exit code, never a traceback or "Exception ignored";
- SIGTERM is Ctrl-C in every mode (partial report, documented exit code); a fleet keeps the
  reports it completed; a second interrupt exits 130 at once; journalctl dies with llmdoctor;
- proxies: NO_PROXY as curl documents it (CIDR, host:port), and the report says what the
  requests really did, including that a key went to an HTTP proxy in clear text;
- ``--watch`` holds a bounded number of rounds and ends at ``--deadline``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from tests.cliutil import run_cli, validate_report
from tests.rawserver import (
    ScriptedServer,
    chunked_sse_response,
    http_response,
    play,
    request_headers,
    request_line,
    unused_port,
)

pytestmark = pytest.mark.slow  # real llmdoctor processes, signals, pipes and proxies, most over seconds

CANARY = "sk-CANARY6-0b5e93aa21c7"
MODELS = {"object": "list", "data": [{"id": "m", "object": "model"}]}
TOKEN = {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": None}]}
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy",
                   "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES}
    return {**env, **extra}


def _spawn(*args: str, stdout: Any = subprocess.PIPE, stderr: Any = subprocess.PIPE, env: dict[str, str] | None = None,
           cwd: Path | None = None, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "llmdoctor", *args], stdout=stdout, stderr=stderr, text=True,
                            env=env or _env(), cwd=cwd, **kwargs)


def _no_crash(err: str) -> None:
    assert "Traceback" not in err and "Exception ignored" not in err and "internal error" not in err, err


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _slow_stream() -> Any:
    """/models answers; a generation streams a token every 0.1 s for 20 s."""
    stream = play(chunked_sse_response([TOKEN] * 200, delay_s=0.1))
    models = play([(0.0, http_response(200, body=MODELS))])

    def handler(conn: socket.socket, request: bytes) -> Any:
        return (models if request_line(request).startswith("GET") else stream)(conn, request)
    return handler


def _wait_for_post(srv: ScriptedServer, proc: subprocess.Popen[str], within: float = 30) -> None:
    deadline = time.monotonic() + within
    while not any(request_line(r).startswith("POST") for r in srv.requests):
        assert time.monotonic() < deadline and proc.poll() is None, "no generation request was sent"
        time.sleep(0.05)


# -- outputs that never crash ---------------------------------------------------------------------

COMMANDS = {
    "check": (["check", "-e", "http://127.0.0.1:{port}", "--select", "LD001"], 2),
    "check --json": (["check", "-e", "http://127.0.0.1:{port}", "--select", "LD001", "--json"], 2),
    "checks": (["checks"], 0),
    "explain": (["explain", "LD001"], 0),
    "help": (["--help"], 0),
    "version": (["--version"], 0),
    "dry-run": (["check", "-e", "http://127.0.0.1:{port}", "--dry-run"], 0),
    "serve-sim --list": (["serve-sim", "--list"], 0),
    "replay": (["replay", "{recording}"], None),  # the recording's own verdict, read with an open stdout
    "replay --json": (["replay", "{recording}", "--json"], None),
}


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.cliutil import record_sim_run

    path: Path = record_sim_run(tmp_path_factory.mktemp("rec") / "rec.json", "demo", ["LD001", "LD3", "LD701"])
    return path


@pytest.mark.parametrize("name", list(COMMANDS))
@pytest.mark.parametrize("stdout", ["closed", "full"])
def test_a_closed_or_full_stdout_keeps_the_exit_code(name: str, stdout: str, recording: Path) -> None:
    args, code = COMMANDS[name]
    args = [a.format(port=unused_port(), recording=recording) for a in args]
    if code is None:
        ref = _spawn(*args)
        ref.communicate(timeout=60)
        code = ref.returncode
        assert code in (0, 1, 2)
    if stdout == "closed":
        proc = _spawn(*args, stdout=None, close_fds=True, pass_fds=(), preexec_fn=lambda: os.close(1))
    else:
        with open("/dev/full", "w") as full:
            proc = _spawn(*args, stdout=full)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, (proc.returncode, err)
    _no_crash(err)
    assert err.strip().splitlines()[-1].startswith("llmdoctor: error: could not write to standard output"), err


def test_a_full_stderr_with_verbose_keeps_the_report_and_its_code() -> None:
    """-v 2>/dev/full was a silent OK: the verbose line failed inside LD001, which was skipped (exit 0)."""
    with open("/dev/full", "w") as full:
        proc = _spawn("check", "-e", f"http://127.0.0.1:{unused_port()}", "-v", "--select", "LD001", "--json",
                      stderr=full)
        out, _ = proc.communicate(timeout=60)
    report = json.loads(out)
    validate_report(report)
    assert proc.returncode == 2 == report["exit_code"] and report["findings"][0]["check_id"] == "LD001"


@pytest.mark.parametrize("profile", ["closed-pipe-critical", "closed-pipe-warning"])
def test_a_reader_that_leaves_keeps_the_diagnosis_exit_code(profile: str) -> None:
    """`llmdoctor check … | head -1` turned CRITICAL into 1 and WARNING into 0."""
    with SimServer(get_profile("demo")) as server:
        url = f"http://127.0.0.1:{unused_port()}" if profile.endswith("critical") else server.url
        expected = 2 if profile.endswith("critical") else None
        if expected is None:  # the demo profile's own verdict, read with an open pipe
            ref = _spawn("check", "-e", url, "--select", "LD3,LD7")
            ref.communicate(timeout=120)
            expected = ref.returncode
            assert expected == 1
        proc = _spawn("check", "-e", url, "--select", "LD3,LD7" if expected != 2 else "LD001")
        assert proc.stdout is not None
        proc.stdout.close()  # `| true`: the reader is gone before anything is written
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == expected, err
    _no_crash(err)
    assert "could not write" not in err  # a reader that leaves is how pipes work, not an error


def test_head_reads_one_line_and_the_exit_code_stays() -> None:
    shell = (f"{sys.executable} -m llmdoctor check -e http://127.0.0.1:{unused_port()} --select LD001 "
             "| head -1; echo \"exit=${PIPESTATUS[0]}\"")
    proc = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60, env=_env())
    assert proc.stdout.strip().endswith("exit=2"), proc.stdout
    _no_crash(proc.stderr)


# -- signals ---------------------------------------------------------------------------------------

def test_sigterm_prints_the_partial_report_like_ctrl_c(tmp_path: Path) -> None:
    with ScriptedServer(_slow_stream(), keep_alive=True) as srv:
        proc = _spawn("check", "-e", srv.url, "--model", "m", "--timeout", "60", "--json",
                      env=_env(OPENAI_API_KEY=CANARY), cwd=tmp_path)
        try:
            _wait_for_post(srv, proc)
            time.sleep(0.3)
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
    _no_crash(err)
    report = json.loads(out)
    validate_report(report)
    assert report["interrupted"] is True and proc.returncode == 3 == report["exit_code"]
    assert CANARY not in out + err


def test_sigterm_stops_a_watch_with_its_last_round_code() -> None:
    with SimServer(get_profile("healthy")) as server:
        proc = _spawn("check", "-e", server.url, "--watch", "0.2", "--json", "--samples", "2")
        assert proc.stdout is not None
        first = proc.stdout.readline()
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=60)
    _no_crash(err)
    assert json.loads(first)["exit_code"] == 0 and proc.returncode == 0
    for line in rest.splitlines():
        validate_report(json.loads(line))


def _fleet_with_one_stuck(tmp_path: Path, fast: SimServer, stuck: ScriptedServer) -> Path:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[endpoints.fast]\nurl = "{fast.url}"\n\n[endpoints.stuck]\nurl = "{stuck.url}"\nmodel = "m"\n')
    return fleet


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_fleet_prints_the_reports_it_completed(tmp_path: Path, sig: signal.Signals) -> None:
    with SimServer(get_profile("healthy")) as fast, ScriptedServer(_slow_stream(), keep_alive=True) as stuck:
        fleet = _fleet_with_one_stuck(tmp_path, fast, stuck)
        proc = _spawn("check", "--endpoints", str(fleet), "--json", "--select", "LD001,LD701", "--samples", "2",
                      "--timeout", "60", "--rate", "50")
        try:
            deadline = time.monotonic() + 60
            while fast.requests_received < 4 or not any(request_line(r).startswith("POST") for r in stuck.requests):
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)
            time.sleep(1.5)  # the fast endpoint's few requests are done by now
            proc.send_signal(sig)
            started = time.monotonic()
            out, err = proc.communicate(timeout=30)
            took = time.monotonic() - started
        finally:
            if proc.poll() is None:
                proc.kill()
    _no_crash(err)
    rows = {row["name"]: row for row in map(json.loads, out.splitlines())}
    assert took < 10, took
    validate_report({k: v for k, v in rows["fast"].items() if k != "name"})
    assert rows["fast"]["interrupted"] is False and rows["fast"]["exit_code"] == 0
    assert rows["stuck"]["exit_code"] == 3  # interrupted: its partial report, or an interrupted row
    assert proc.returncode == 3


def test_a_second_interrupt_exits_130_at_once(tmp_path: Path) -> None:
    """The first Ctrl-C lets the fleet wrap up (2 s for the endpoints in progress); the second leaves now."""
    with SimServer(get_profile("healthy")) as fast, ScriptedServer(_slow_stream(), keep_alive=True) as stuck:
        fleet = _fleet_with_one_stuck(tmp_path, fast, stuck)
        proc = _spawn("check", "--endpoints", str(fleet), "--json", "--select", "LD001,LD701", "--timeout", "60")
        try:
            deadline = time.monotonic() + 60
            while not any(request_line(r).startswith("POST") for r in stuck.requests):
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
            time.sleep(0.2)
            proc.send_signal(signal.SIGINT)
            started = time.monotonic()
            _, err = proc.communicate(timeout=30)
            took = time.monotonic() - started
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130 and took < 1.5, (proc.returncode, took)
    assert "interrupted again" in err and "Traceback" not in err


@pytest.fixture
def slow_journalctl(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A journalctl on PATH that prints two log lines, writes its pid, then never ends."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pid_file = tmp_path / "journalctl.pid"
    script = bin_dir / "journalctl"
    script.write_text(f"#!/bin/sh\necho $$ > {pid_file}\n"
                      "echo 'torch.OutOfMemoryError: CUDA out of memory.'\necho 'INFO started'\n"
                      "exec sleep 600\n")
    script.chmod(0o755)
    yield bin_dir, pid_file


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie is dead
        return fh.read().split()[2] != "Z"


def _wait_dead(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_a_slow_journalctl_is_bounded_by_the_deadline_and_stopped(slow_journalctl: tuple[Path, Path]) -> None:
    bin_dir, pid_file = slow_journalctl
    env = _env(PATH=f"{bin_dir}:{os.environ['PATH']}")
    started = time.monotonic()
    proc = _spawn("check", "-e", f"http://127.0.0.1:{unused_port()}", "--journal", "vllm", "--select", "LD2",
                  "--deadline", "3", "--json", env=env)
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - started < 3 + 4
    _no_crash(err)
    validate_report(json.loads(out))
    assert _wait_dead(int(pid_file.read_text()), 2.0), "journalctl outlived the run"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_journalctl_dies_with_a_killed_llmdoctor(slow_journalctl: tuple[Path, Path]) -> None:
    bin_dir, pid_file = slow_journalctl
    env = _env(PATH=f"{bin_dir}:{os.environ['PATH']}")
    proc = _spawn("check", "-e", f"http://127.0.0.1:{unused_port()}", "--journal", "vllm", "--select", "LD2",
                  env=env)
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    child = int(pid_file.read_text())
    proc.kill()  # SIGKILL: no handler, no finally
    proc.communicate(timeout=10)
    assert _wait_dead(child, 3.0), "journalctl was orphaned"


# -- proxies: curl's NO_PROXY, and the report says what happened ----------------------------------

class _Proxy(ScriptedServer):
    """An HTTP proxy that records what reaches it and answers every request with a 502."""

    def __init__(self) -> None:
        super().__init__(play([(0.0, http_response(502, body={"error": "proxy says no"}))]), keep_alive=True)


@pytest.mark.parametrize(("no_proxy", "proxied"), [
    ("", True),
    ("127.0.0.0/8", False),              # CIDR: curl honours it, httpx alone did not
    ("127.0.0.1:{port}", False),         # host:port: this endpoint's port
    ("127.0.0.1:{other}", True),         # another port: still proxied
    ("localhost, .example.com", True),   # names never match an IP host
    ("*", False),
])
def test_no_proxy_as_curl_documents_it_and_the_report_says_what_happened(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, no_proxy: str, proxied: bool) -> None:
    with SimServer(get_profile("healthy")) as server, _Proxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", f"http://user:{CANARY}@127.0.0.1:{proxy.port}")
        monkeypatch.setenv("NO_PROXY", no_proxy.format(port=server.port, other=unused_port()))
        monkeypatch.setenv("HARDENING_PROXY_KEY", CANARY + "k")
        result = run_cli(capsys, "check", "-e", server.url, "--select", "LD001,LD409", "--samples", "1",
                         "--api-key-env", "HARDENING_PROXY_KEY", "--json")
        at_proxy = list(proxy.requests)
    report = result.report
    ld409 = [f for f in report["findings"] if f["check_id"] == "LD409"]
    assert bool(at_proxy) is proxied, at_proxy
    assert bool(ld409) is proxied, report["findings"]
    if proxied:
        first = at_proxy[0]
        assert request_line(first).startswith(f"GET {server.url}/v1/models")  # absolute form: a real proxy request
        assert request_headers(first)["authorization"] == f"Bearer {CANARY}k"  # the key went to the proxy ...
        assert "clear text" in ld409[0]["message"] and "HTTP_PROXY" in ld409[0]["message"]  # ... and it says so
    assert CANARY not in result.out + result.err


# -- endurance -------------------------------------------------------------------------------------

def test_watch_keeps_a_bounded_number_of_rounds() -> None:
    import gc

    from llmdoctor.options import Options
    from llmdoctor.reporting.report import Report
    from llmdoctor.target import Target
    from llmdoctor.watch import KEEP_ROUNDS, watch

    alive: list[int] = []

    def reports() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if isinstance(o, Report))

    before = reports()  # other tests' reports still alive in this process (a whole-suite run) are not the watch's

    def count(n: int) -> None:
        alive.append(reports() - before)

    with SimServer(get_profile("healthy")) as server:
        code = watch(Target(base_url=server.url + "/v1"), Options.of(samples=1, warmup=0), interval_s=0.01,
                     count=KEEP_ROUNDS + 10, live=False, emit_json=lambda r: None, on_round=count)
    assert code == 0 and len(alive) == KEEP_ROUNDS + 10
    assert max(alive) <= KEEP_ROUNDS + 1, alive  # the rounds on show, and the one being made


def test_watch_ends_at_the_deadline() -> None:
    """`--watch 1 --deadline 3` ran forever: the deadline bounds the whole watch."""
    with SimServer(get_profile("healthy")) as server:
        started = time.monotonic()
        proc = _spawn("check", "-e", server.url, "--watch", "1", "--deadline", "3", "--json", "--samples", "1")
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - started
    _no_crash(err)
    rounds = [json.loads(line) for line in out.splitlines()]
    assert 3 <= took < 3 + 4, took
    assert rounds and all(not r["interrupted"] for r in rounds) and proc.returncode == rounds[-1]["exit_code"] == 0


def test_a_watch_with_no_complete_round_is_unknown() -> None:
    """Interrupted before its first round ended, a watch has nothing to say: exit 3, not 0."""
    with ScriptedServer(_slow_stream(), keep_alive=True) as srv:
        proc = _spawn("check", "-e", srv.url, "--model", "m", "--watch", "5", "--json", "--timeout", "60")
        _wait_for_post(srv, proc)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    _no_crash(err)
    assert proc.returncode == 3 and out == ""


def test_every_wait_is_bounded_when_stdin_is_closed() -> None:
    """`--request -` with stdin closed (<&-): one line, exit 3, no traceback."""
    proc = subprocess.run([sys.executable, "-m", "llmdoctor", "check", "-e", f"http://127.0.0.1:{unused_port()}",
                           "--request", "-"], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
                          env=_env(), preexec_fn=lambda: os.close(0))
    _no_crash(proc.stderr)
    assert proc.returncode == 3 and proc.stderr.startswith("llmdoctor: error:"), proc.stderr


def test_threads_do_not_outlive_an_interrupted_fleet_run() -> None:
    """The fleet's workers are daemons: the process never waits for a request still in flight."""
    from llmdoctor.fleet import FleetEntry, entry_spec, run_fleet
    from llmdoctor.options import Options
    from llmdoctor.target import TargetSpec

    with ScriptedServer(_slow_stream(), keep_alive=True) as stuck:
        timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.start()
        started = time.monotonic()
        entry = FleetEntry("stuck", stuck.url, "m")
        target = entry_spec(entry, TargetSpec(api_key_env="NO_SUCH_KEY")).build()
        results = run_fleet([(entry, target)], Options.of(timeout_s=60, samples=1), selected=["LD001", "LD701"])
        took = time.monotonic() - started
    ((_, report, error),) = results
    assert took < 1.0 + 2.0 + 1.0, took  # Ctrl-C, then at most the grace period
    assert (report is not None and report.interrupted) or "interrupted" in error
    assert all(t.daemon for t in threading.enumerate() if t.name.startswith("llmdoctor-fleet"))
