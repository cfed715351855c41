"""Hostile inputs around the endpoint (issue 19): every one a usage error before probing, or bounded.

Each case is one of the findings of the hardening round: an option or input file that used to
reach the probes and come back as a skipped LD001 and exit 0, a wrong blame (an endpoint failure
for a bad header), a traceback, a hang on a FIFO, or a secret in a skip reason. Each must now end
in one line ``llmdoctor: error: …`` and exit 3 before anything is sent, or be bounded.
"""

from __future__ import annotations

import base64
import json
import os
import tracemalloc
from pathlib import Path

import pytest

from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from tests.cliutil import Result, record_sim_run, run_cli, run_process, validate_report
from tests.rawserver import ScriptedServer, http_response, play, unused_port

CANARY = "CANARY5-7d1e0c9b44f2"
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy",
                   "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def refusing() -> str:
    """An endpoint nobody listens on: a run that gets to probing ends at once with LD001 (exit 2)."""
    return f"http://127.0.0.1:{unused_port()}"


def _usage_error(result: Result, fragment: str) -> None:
    """Exit 3, one line on stderr naming the problem, nothing on stdout, no traceback, no canary."""
    assert result.code == 3, (result.code, result.out[-400:], result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmdoctor: error:"), result.err
    assert fragment in lines[0], lines[0]
    assert result.out == "" and "Traceback" not in result.err
    assert CANARY not in result.err


# -- silent false OKs: the client could not be built, or a number was not a number ----------------

@pytest.mark.parametrize(("flag", "value"), [("--deadline", "nan"), ("--timeout", "nan"), ("--idle-test", "nan"),
                                             ("--rate", "nan"), ("--watch", "nan")])
def test_a_number_that_is_not_finite_is_a_usage_error(capsys: pytest.CaptureFixture[str], refusing: str,
                                                      flag: str, value: str) -> None:
    _usage_error(run_cli(capsys, "check", "-e", refusing, flag, value), f"{flag} nan: not a finite number")


@pytest.mark.parametrize(("endpoint", "fragment"), [
    ("http://☃.net", "not a valid international host name"),
    ("ht!tp:/nope", "not a valid host name"),
    ("http://" + "a" * 64 + ".example.com", "63"),
    ("http://" + ".".join(["abcdefghi"] * 26) + ".com", "253"),
    ("http://256.1.1.1:8000", "not a valid IPv4 address"),
    ("http://127.0.0.1:0", "port 0"),
    ("http://example.com/" + "x" * 70_000, "the most accepted is 8,192"),
    ("http://example.com/a b", "percent-encode"),
    ("http://example.com/\udcff", "percent-encode"),  # a byte that was not UTF-8 on the command line
])
def test_an_unusable_endpoint_url_is_a_usage_error_not_an_endpoint_failure(
        capsys: pytest.CaptureFixture[str], endpoint: str, fragment: str) -> None:
    _usage_error(run_cli(capsys, "check", "-e", endpoint, "--select", "LD001"), fragment)


@pytest.mark.parametrize(("flag", "url", "fragment"), [
    ("--push-gateway", "http://☃.net", "not a valid international host name"),
    ("--push-gateway", "http://256.1.1.1:9091", "not a valid IPv4 address"),
    ("--push-gateway", f"http://u:{CANARY}@127.0.0.1:0/", "port 0"),
    ("--metrics-url", "http://☃.net/metrics", "not a valid international host name"),
    ("--gpu-metrics-url", f"http://127.0.0.1:0/metrics?token={CANARY}", "port 0"),
])
def test_an_unusable_metrics_or_push_url_is_a_usage_error(capsys: pytest.CaptureFixture[str], refusing: str,
                                                          flag: str, url: str, fragment: str) -> None:
    """`--push-gateway http://☃.net` was an internal error (UnicodeEncodeError) after the whole run."""
    _usage_error(run_cli(capsys, "check", "-e", refusing, "--select", "LD001", flag, url), fragment)


@pytest.mark.parametrize(("header", "fragment"), [
    ("Bad Name: x", "not a valid header name"),
    ("X-Api-Key: €x" + CANARY, "U+20AC"),
    ("X-Foo: a\rb" + CANARY, "line break"),
    ("X-Foo: a\x01" + CANARY, "control character"),
])
def test_a_header_that_cannot_be_sent_is_a_usage_error(capsys: pytest.CaptureFixture[str], refusing: str,
                                                       header: str, fragment: str) -> None:
    _usage_error(run_cli(capsys, "check", "-e", refusing, "--header", header), fragment)


def test_a_key_that_cannot_be_sent_is_a_usage_error(capsys: pytest.CaptureFixture[str], refusing: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARDENING_KEY", f"it’s-{CANARY}")  # a typographic apostrophe, pasted from a page
    _usage_error(run_cli(capsys, "check", "-e", refusing, "--api-key-env", "HARDENING_KEY"), "U+2019")


def test_a_latin1_header_value_is_sent_as_latin1(capsys: pytest.CaptureFixture[str]) -> None:
    """What HTTP/1.1 carries (httpx alone encodes str values as ASCII and failed inside LD001)."""
    with ScriptedServer(play([(0.0, http_response(404, body={"error": "no"}))]), keep_alive=True) as srv:
        result = run_cli(capsys, "check", "-e", srv.url, "--header", "X-Team: équipe", "--select", "LD001")
        sent = b"".join(srv.requests)
    assert result.code == 2 and b"x-team: \xe9quipe" in sent.lower()


@pytest.mark.parametrize(("variable", "value", "fragment"), [
    ("HTTP_PROXY", "::::x", "not a proxy URL the client can use"),
    ("HTTP_PROXY", "ftp://proxy.corp:21", "unsupported proxy scheme 'ftp'"),
    ("ALL_PROXY", f"socks5://u:{CANARY}@127.0.0.1:1080", "socksio"),
])
def test_a_proxy_the_client_cannot_use_is_a_usage_error(capsys: pytest.CaptureFixture[str], refusing: str,
                                                        monkeypatch: pytest.MonkeyPatch, variable: str, value: str,
                                                        fragment: str) -> None:
    if "socks" in value:
        import importlib.util

        if importlib.util.find_spec("socksio") is not None:
            pytest.skip("socksio is installed: a SOCKS proxy is usable")
    monkeypatch.setenv(variable, value)
    _usage_error(run_cli(capsys, "check", "-e", refusing, "--select", "LD001"), fragment)


def test_a_proxy_for_another_scheme_does_not_matter(capsys: pytest.CaptureFixture[str], refusing: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "::::x")  # the endpoint is plain http: this proxy is never used
    assert run_cli(capsys, "check", "-e", refusing, "--select", "LD001").code == 2


@pytest.mark.parametrize("bundle", ["not-pem", "/dev/zero", "fifo", "missing"])
def test_a_ca_bundle_that_does_not_load_is_a_usage_error(capsys: pytest.CaptureFixture[str], refusing: str,
                                                         tmp_path: Path, bundle: str) -> None:
    path = {"/dev/zero": "/dev/zero"}.get(bundle, str(tmp_path / bundle))
    if bundle == "not-pem":
        Path(path).write_bytes(os.urandom(2000))
    elif bundle == "fifo":
        os.mkfifo(path)
    args = ["check", "-e", refusing.replace("http:", "https:"), "--select", "LD001", "--ca-bundle", path]
    if bundle == "missing":  # click says so itself
        assert run_cli(capsys, *args).code == 3
        return
    _usage_error(run_cli(capsys, *args), "CA bundle")


@pytest.mark.parametrize(("host", "fragment"), [("256.1.1.1", "not a valid IPv4 address"),
                                              ("☃.net", "not a valid international host name"),
                                              ("nosuch.invalid", "no such address on this host")])
def test_serve_sim_on_a_host_it_cannot_bind_is_a_usage_error(capsys: pytest.CaptureFixture[str], host: str,
                                                             fragment: str) -> None:
    """`serve-sim --host 256.1.1.1` was an internal error (gaierror from the bind)."""
    _usage_error(run_cli(capsys, "serve-sim", "--host", host, "--port", "0"), fragment)


# -- --dry-run sends nothing ----------------------------------------------------------------------

def test_dry_run_sends_nothing_with_watch_or_endpoints(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with ScriptedServer(play([(0.0, http_response(200, body={"data": []}))])) as srv:
        watch = run_cli(capsys, "check", "-e", srv.url, "--watch", "1", "--dry-run")
        fleet_file = tmp_path / "fleet.txt"
        fleet_file.write_text(f"{srv.url}\n")
        fleet = run_cli(capsys, "check", "--endpoints", str(fleet_file), "--dry-run", "--json")
        assert srv.connections == 0
    assert watch.code == 3 and "without --watch" in watch.err
    assert fleet.code == 0 and "nothing is sent" in fleet.out


def test_watch_with_an_output_file_is_a_usage_error(capsys: pytest.CaptureFixture[str], refusing: str,
                                                   tmp_path: Path) -> None:
    """`--watch --json -o FILE` printed every round on stdout and left FILE alone (found by the fuzz harness)."""
    _usage_error(run_cli(capsys, "check", "-e", refusing, "--watch", "1", "-o", str(tmp_path / "r.json")),
                 "-o is for single runs and fleets")
    assert not (tmp_path / "r.json").exists()


# -- bounds: deadline, sizes, depth, FIFOs, devices -------------------------------------------------

def test_request_files_are_read_within_the_deadline(capsys: pytest.CaptureFixture[str], refusing: str,
                                                    tmp_path: Path) -> None:
    """A FIFO nobody writes to used to block forever; now the deadline (started with the command) ends it."""
    fifo = tmp_path / "requests.json"
    os.mkfifo(fifo)
    result = run_cli(capsys, "check", "-e", refusing, "--request", str(fifo), "--deadline", "1")
    _usage_error(result, "--deadline 1 s reached while reading --request")


def test_a_wait_cut_short_by_the_deadline_ends_at_the_deadline_though_the_clock_reads_a_hair_before(
        tmp_path: Path) -> None:
    """CI (2026-12-01) read the FIFO above as "no data for 10 s" after 1 s: poll counted whole milliseconds and
    returned just before the deadline, whose clock then said "not yet". Here the deadline's clock stands still
    (never expired by it), so only the wait itself can tell that it ended at the deadline, not the idle bound."""
    from llmdoctor.deadline import Deadline, DeadlineExceeded
    from llmdoctor.inputs.bounded import open_input

    fifo = tmp_path / "silent.jsonl"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # holds the pipe open, writes nothing
    try:
        frozen = Deadline(seconds=0.05, clock=lambda: 0.0)
        with open_input(str(fifo), "--request", limit=1024, deadline=frozen, idle_s=10.0) as stream:
            with pytest.raises(DeadlineExceeded, match=r"--deadline 0.05 s reached while reading --request"):
                stream.read(10)
        with open_input(str(fifo), "--request", limit=1024, idle_s=0.05) as stream:  # control: no deadline
            with pytest.raises(Exception, match=r"no data for 0.05 s"):
                stream.read(10)
    finally:
        os.close(writer)


def test_an_idle_test_longer_than_the_deadline_is_not_started(capsys: pytest.CaptureFixture[str]) -> None:
    """`--idle-test 3600 --deadline 4` slept the full hour; the wait that cannot fit is not begun."""
    import time

    with SimServer(get_profile("healthy")) as server:
        started = time.monotonic()
        result = run_cli(capsys, "check", "-e", server.url, "--select", "LD304", "--samples", "2",
                         "--idle-test", "3600", "--deadline", "4", "--json")
        took = time.monotonic() - started
    assert took < 4 + 4, took
    (ld304,) = [c for c in result.report["checks"] if c["check_id"] == "LD304"]
    assert ld304["status"] == "skipped" and "deadline reached" in ld304["reason"], ld304


@pytest.mark.parametrize(("flag", "kind"), [("--request", "fifo"), ("--endpoints", "fifo"), ("--request", "device"),
                                            ("--endpoints", "device")])
def test_an_input_fifo_or_device_is_bounded(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch, flag: str, kind: str) -> None:
    monkeypatch.setattr("llmdoctor.inputs.bounded.PIPE_IDLE_S", 0.5)  # a FIFO silent this long ends
    path = "/dev/zero"
    if kind == "fifo":
        path = str(tmp_path / "input")
        os.mkfifo(path)
    result = run_cli(capsys, "check", flag, path)
    _usage_error(result, "no data for 0.5 s" if kind == "fifo" else "is a device, not a file")


def test_replay_of_a_fifo_or_device_is_bounded(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("llmdoctor.inputs.bounded.PIPE_IDLE_S", 0.5)
    fifo = tmp_path / "rec.json"
    os.mkfifo(fifo)
    _usage_error(run_cli(capsys, "replay", str(fifo)), "no data for 0.5 s")
    _usage_error(run_cli(capsys, "replay", "/dev/zero"), "is a device")


@pytest.mark.parametrize("flag", ["-o", "--save-measurements"])
def test_an_output_fifo_nobody_reads_is_refused_not_blocked_on(capsys: pytest.CaptureFixture[str], refusing: str,
                                                               tmp_path: Path, flag: str) -> None:
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    result = run_cli(capsys, "check", "-e", refusing, "--select", "LD001", flag, str(fifo))
    assert result.code == 3 and "a FIFO that nothing reads" in result.err and "Traceback" not in result.err


def _nested(depth: int) -> str:
    return '{"messages": [{"role": "user", "content": "x", "meta": ' + "[" * depth + "]" * depth + "}]}"


@pytest.mark.parametrize("what", ["--request", "replay", "--compare", "--endpoints", "llmdoctor.toml"])
@pytest.mark.parametrize("hostile", ["deep", "digits", "binary"])
def test_hostile_input_files_are_one_line_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch, refusing: str, what: str,
                                                 hostile: str) -> None:
    """Deep nesting (RecursionError), 5,000-digit integers (ValueError), binary or UTF-16 text."""
    monkeypatch.chdir(tmp_path)
    toml = what in ("--endpoints", "llmdoctor.toml")
    if hostile == "deep":
        text = ("[endpoints.a]\nurl = " + "[" * 5000 + "]" * 5000) if toml else _nested(5000)
        data = text.encode()
    elif hostile == "digits":
        data = (('[slo]\nttft_p90 = ' if what == "llmdoctor.toml" else '[endpoints.a]\nurl = ') + "1" * 5000
                if toml else '{"prompt": "x", "max_tokens": ' + "1" * 5000 + "}").encode()
    else:
        data = "[endpoints.a]\nurl = 'http://a'\n".encode("utf-16") if toml else os.urandom(512)
    path = tmp_path / ("llmdoctor.toml" if what == "llmdoctor.toml" else "input.toml" if toml else "input.json")
    path.write_bytes(data)
    args = {"--request": ["check", "-e", refusing, "--request", str(path)],
            "replay": ["replay", str(path)],
            "--compare": ["check", "-e", refusing, "--compare", str(path)],
            "--endpoints": ["check", "--endpoints", str(path)],
            "llmdoctor.toml": ["check", "-e", refusing, "--select", "LD001"]}[what]
    result = run_cli(capsys, *args)
    assert result.code == 3, (result.code, result.err)
    assert len(result.err.strip().splitlines()) == 1 and result.err.startswith("llmdoctor: error:"), result.err
    assert "Traceback" not in result.err and "internal error" not in result.err


def test_request_files_are_streamed_memory_follows_what_is_kept(tmp_path: Path) -> None:
    """20 MB of JSONL: reading it holds one body at a time (the normalised form is what stays)."""
    from llmdoctor.inputs.request_files import iter_bodies

    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "word " * 400}], "max_tokens": 8})
    path = tmp_path / "gateway.jsonl"
    with path.open("w") as fh:
        for _ in range(20_000_000 // len(body)):
            fh.write(body + "\n")
    tracemalloc.start()
    try:
        count = sum(1 for _ in iter_bodies([str(path)]))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count > 9000
    assert peak < 2_000_000, f"peak {peak / 1e6:.1f} MB reading a 20 MB file"


def test_a_big_body_is_read_whole_and_a_bigger_one_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llmdoctor.inputs.request_files import RequestFileError, load_requests

    prompt = base64.b64encode(bytes(range(256)) * 14_649).decode()  # a 5 MB base64 prompt
    path = tmp_path / "b64.json"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": prompt}]}))
    (info,) = load_requests([str(path)])
    assert info.prompt_chars == len(prompt) > 4_999_000 and any(r.kind == "base64" for r in info.odd)
    monkeypatch.setattr("llmdoctor.inputs.request_files.MAX_BODY_CHARS", 1 << 20)
    with pytest.raises(RequestFileError, match="a request larger than 1 MiB"):
        load_requests([str(tmp_path / "b64.json"), str(path)])


# -- logs: bounded reading ---------------------------------------------------------------------------

def test_a_huge_log_is_read_within_the_deadline(refusing: str, tmp_path: Path) -> None:
    """A 1 GiB log (sparse: no disk) took ~14 s to scan; --deadline 3 ends the run at 3 s."""
    log = tmp_path / "huge.log"
    with log.open("wb") as fh:
        fh.truncate(1 << 30)
    import time

    started = time.perf_counter()
    result = run_process("check", "-e", refusing, "--log", str(log), "--select", "LD2", "--deadline", "3", "--json",
                         timeout=60)
    elapsed = time.perf_counter() - started
    assert elapsed < 3 + 4, elapsed
    assert "Traceback" not in result.err
    validate_report(json.loads(result.out))


def test_a_gzip_bomb_stops_at_the_decompressed_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gzip

    from llmdoctor.context import Context
    from llmdoctor.options import Options
    from llmdoctor.probes.logs import scan_logs

    bomb = tmp_path / "server.log.gz"
    with gzip.open(bomb, "wb", compresslevel=1) as fh:
        for _ in range(64):
            fh.write(b"\0" * (1 << 20))
    monkeypatch.setattr("llmdoctor.probes.logs.MAX_LOG_BYTES", 4 << 20)
    scan = scan_logs(Context(target=None, options=Options.of(logs=(str(bomb),))))
    assert scan.files[0].bytes == 4 << 20
    rest = scan.files[1]
    assert rest.name.endswith("(the rest)") and "first 4 MiB" in (rest.error or "")


def test_log_from_dev_zero_on_stdin_ends(refusing: str) -> None:
    import subprocess
    import sys

    with open("/dev/zero", "rb") as zero:
        proc = subprocess.run([sys.executable, "-m", "llmdoctor", "check", "-e", refusing, "--log", "-",
                               "--select", "LD2", "--deadline", "2", "--json"], stdin=zero, capture_output=True,
                              text=True, timeout=60)
    assert "Traceback" not in proc.stderr
    validate_report(json.loads(proc.stdout))


def test_a_log_fifo_is_refused_with_the_way_to_pipe_it(capsys: pytest.CaptureFixture[str], refusing: str,
                                                       tmp_path: Path) -> None:
    fifo = tmp_path / "log"
    os.mkfifo(fifo)
    _usage_error(run_cli(capsys, "check", "-e", refusing, "--log", str(fifo)), "use --log -")


# -- secrets ---------------------------------------------------------------------------------------

def test_metrics_url_credentials_never_appear_in_skip_reasons(capsys: pytest.CaptureFixture[str]) -> None:
    port = unused_port()
    with SimServer(get_profile("healthy")) as server:
        args = ["check", "-e", server.url, "--select", "LD2", "--samples", "1",
                "--metrics-url", f"http://alice:{CANARY}@127.0.0.1:{port}/metrics?token={CANARY}x",
                "--gpu-metrics-url", f"http://127.0.0.1:{port}/metrics?sig=abc&token=t0k"]
        as_json = run_cli(capsys, *args, "--json")
        text = run_cli(capsys, *args)
    reasons = [p["reason"] for p in as_json.report["probes"] if "metrics" in p["name"]]
    assert any("http://***@127.0.0.1" in r for r in reasons), reasons
    for out in (as_json.out, as_json.err, text.out, text.err):
        assert CANARY not in out and "t0k" not in out


def test_verbose_never_prints_a_header_value(capsys: pytest.CaptureFixture[str], refusing: str) -> None:
    result = run_cli(capsys, "check", "-e", refusing, "-v", "--header", f"X-Foo: {CANARY}", "--select", "LD001")
    assert "x-foo: ***redacted***" in result.err and CANARY not in result.err + result.out


def test_a_plugin_error_is_redacted_everywhere(capsys: pytest.CaptureFixture[str], refusing: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib.metadata import EntryPoint

    import llmdoctor.checklist.registry as registry

    (tmp_path / "leaky_plugin.py").write_text(
        "import os\nraise RuntimeError('backend refused token ' + os.environ['HARDENING_PLUGIN_TOKEN'])\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("HARDENING_PLUGIN_TOKEN", CANARY)
    real = registry.entry_points

    def with_leaky(group: str) -> list[EntryPoint]:
        return [*real(group=group), EntryPoint("leaky", "leaky_plugin:Check", group)]

    monkeypatch.setattr(registry, "entry_points", with_leaky)
    listing = run_cli(capsys, "checks")
    report = run_cli(capsys, "check", "-e", refusing, "--select", "LD001", "--json")
    assert "plugin leaky failed to load" in listing.err
    assert any(c["check_id"] == "leaky" and "backend refused token" in c["reason"] for c in report.report["checks"])
    for out in (listing.out, listing.err, report.out, report.err):
        assert CANARY not in out


# -- JSON always valid -----------------------------------------------------------------------------

def test_replayed_nan_and_negative_timings_give_valid_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = record_sim_run(tmp_path / "rec.json", "healthy", ["LD001", "LD701", "LD702"])
    data = json.loads(path.read_text())
    baseline = data["measurements"]["baseline"]
    for sample in baseline["samples"][:2]:
        sample["total_ms"] = -10.0
        sample["ttft_ms"] = float("nan")
    data["endpoint"] = "http://host\udcff/v1"
    path.write_text(json.dumps(data, ensure_ascii=True))  # NaN written bare, as an old or edited file may have it
    result = run_cli(capsys, "replay", str(path), "--json")
    report = result.report  # parsed and validated against the schema
    assert "NaN" not in result.out and "\udcff" not in result.out and result.out.encode("utf-8")
    assert report["breakdown"] is None or report["breakdown"]["total_ms"] >= 0


def test_a_fit_interval_below_zero_is_kept_not_nulled() -> None:
    """The robust fit's interval may reach below 0 ("fixed cost −12 to 40 ms": not determined); the
    pass that nulls negative durations must leave it, or the report breaks its own schema
    (``[None, 40.0]``: found on real llama.cpp, where the intercept is near zero)."""
    from llmdoctor.render.json import sanitise

    data = sanitise({"fixed_interval_ms": [-12.5, 40.0], "fixed_ms": None, "total_ms": -3.0, "ttft_ms": -1.0})
    assert data == {"fixed_interval_ms": [-12.5, 40.0], "fixed_ms": None, "total_ms": 0.0, "ttft_ms": None}
