"""A fuzz harness over the command line (issue 19): options, input files and environment, drawn at random.

Each example builds one ``llmdoctor`` command line from hostile pieces — numbers that are not
numbers, URLs with credentials and odd hosts, headers that cannot be sent, request files, logs,
baselines, fleets, CA bundles and recordings that are deep, huge, binary or UTF-16, proxies from
the environment, outputs that are full or FIFOs — and runs it in this process against a real
loopback endpoint: a port nobody listens on, or the simulator. Whatever it is, the run must

- end without a traceback or an "internal error" (and no thread may die with an exception),
- exit 0-3 (the monitoring-plugin codes),
- print JSON that parses and satisfies the shipped schema whenever a JSON report was asked for,
- never show a secret: each example has its own canary, put only where secrets go (the API
  key, header values, URL passwords and ``?token=`` values, proxy passwords), and searched in
  stdout, stderr and every file the run wrote,
- end within its ``--deadline`` plus a margin (every example has one), and
- send nothing with ``--dry-run``.

Hypothesis runs derandomized (the same examples every time, so CI is repeatable) with a fixed
number of examples; a failure is shrunk to the smallest command line that shows it.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from tests.cliutil import Result, record_sim_run, run_cli, validate_report
from tests.rawserver import unused_port

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")

#: Wall time a run may take past its --deadline: the checks, ranking and rendering after the last
#: probe, on a host shared with other test runs (a load of 12 on 2 cores was seen to stretch a
#: 2 s run to 8.7 s). What this catches is a wait that is not bounded at all (a FIFO, /dev/zero,
#: an hour of --idle-test, a watch that never ends), which overshoots by far more.
MARGIN_S = 20.0
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy",
                   "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
KEY_VARIABLE = "FUZZ_CLI_API_KEY"
_serial = itertools.count()

FUZZ = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])

# -- the pieces ---------------------------------------------------------------------------------------

NUMBERS = ["nan", "inf", "-inf", "-1", "0", "1", "2", "0.5", "1e309", "1" * 5000, "abc", "", " 3", "0x10",
           "١", "1e-9", "3600", "1_000"]
DEADLINES = ["nan", "-1", "0", "0.2", "0.5", "1", "1.5", "2", "abc", "1e-9"]
IDS = ["LD001", "LD1", "LD2", "LD3", "LD4", "LD5", "LD6", "LD7", "LD701", "LD999", "", "X", ",", "LD001,LD702", "ld7"]
SLOS = ["ttft_p90=800ms", "total_p50=2s", "fixed_cost=nanms", "per_token=-1ms", "x=y", "ttft_p90", "=",
        "ttft_p90=1e309s"]
BUDGETS = ["requests=2,seconds=1", "requests=nan", "seconds=-1", "requests=1" + "0" * 400, "x", ""]
DNS_SERVERS = ["127.0.0.1:{port}", "256.1.1.1", "nan", "::1", "[::1]:0", "☃", "127.0.0.1:99999"]
HEADER_NAMES = ["X-Foo", "X-Api-Key", "Authorization", "Bad Name", "X-€", "", "X:Y", "Host"]
TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
WILD_TEXT = st.text(max_size=12)  # surrogates too: a byte that was not UTF-8 on the command line


def _nested(depth: int) -> bytes:
    return ('{"messages": [{"role": "user", "content": "x", "m": ' + "[" * depth + "]" * depth + "}]}").encode()


JSON_FILES: list[bytes] = [
    b"",
    b"{",
    b"null",
    b"[]",
    b'{"messages": [{"role": "user", "content": "Say ok."}], "max_tokens": 8}',
    b'{"prompt": "x", "max_tokens": ' + b"1" * 5000 + b"}",
    b'{"messages": [{"role": "user", "content": "x"}], "temperature": NaN, "max_tokens": -5}',
    b'{"messages": "not a list"}\n{"messages": [{"role": "tool"}]}\n',
    '{"messages": [{"role": "user", "content": "x"}]}'.encode("utf-16"),
    b"\xff\xfe\x00garbage\x80",
    _nested(5000),
    b'{"a": 1}\n' * 500,
]
TOML_FILES: list[bytes] = [
    b"",
    b"[endpoints.a]\nurl = 'http://127.0.0.1:{port}'\n",
    b"http://127.0.0.1:{port}\nhttp://127.0.0.1:{port}/v1\n",
    b"[endpoints.a]\nurl = " + b"[" * 3000 + b"]" * 3000,
    b"[slo]\nttft_p90 = " + b"9" * 5000,
    b"[endpoints.a]\nurl = 42\n",
    "[endpoints.a]\nurl = 'http://a'\n".encode("utf-16"),
    b"[[[\n",
    b"[slo]\nttft_p90 = 'nanms'\n",
    b"[check]\ntimeout = nan\n",
]
LOG_FILES: list[bytes] = [
    b"",
    b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
    b"INFO 01-01 00:00:00 engine.py:1] Avg prompt throughput: nan tokens/s, Running: -1 reqs\n" * 50,
    b"\x00" * 10_000,
    b"\xff\xfe" + "x\n".encode("utf-16") * 100,
    b"x" * 200_000 + b"\n",
]
PEM_FILES: list[bytes] = [b"", b"-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n", os.urandom(300)]


@dataclass
class Case:
    """One drawn command line and what it needs around it."""

    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)  # name in the run's folder -> content
    fifos: list[str] = field(default_factory=list)
    canary: str = ""
    deadline: str = "1"
    dry_run: bool = False
    json_out: bool = False
    fleet: bool = False  # NDJSON: one report per endpoint
    watch: bool = False  # NDJSON: one report per round


@dataclass
class Endpoints:
    """The real endpoints the examples use: a refusing port and the simulator."""

    refusing: str
    sim: SimServer


@pytest.fixture(scope="module")
def endpoints() -> Iterator[Endpoints]:
    with SimServer(get_profile("healthy")) as sim:
        yield Endpoints(f"http://127.0.0.1:{unused_port()}", sim)


HOSTILE_URLS = ["http://☃.net", "http://256.1.1.1:8000", "http://127.0.0.1:0", "http://" + "a" * 64 + ".example",
                "ftp://127.0.0.1", "", "::::", "http://[::1", "http://h:99999"]
#: The parts of a command line an example may make hostile (the others get ordinary values).
CATEGORIES = ["endpoint", "deadline", "numbers", "header", "key", "slo", "budget", "dns", "request", "compare", "log",
              "ca", "toml", "metrics", "proxy", "format", "outputs", "fleet"]


class Drawer:
    """Draws one example's pieces: ordinary ones, or hostile ones for the few categories chosen."""

    def __init__(self, draw: Any, hostile: set[str]) -> None:
        self.draw = draw
        self.hostile = hostile

    def pick(self, category: str, ordinary: list[Any], hostile: list[Any]) -> Any:
        return self.draw(st.sampled_from(hostile if category in self.hostile or not ordinary else ordinary))

    def wants(self, category: str, often: int = 2) -> bool:
        """Whether this example uses the option at all (always when it is to be hostile)."""
        return category in self.hostile or self.draw(st.integers(0, often)) == 0


def _input_file(d: Drawer, case: Case, flag: str, name: str, category: str, ordinary: list[bytes],
                hostile: list[bytes]) -> None:
    if not d.wants(category, 3):
        return
    how = "file" if category not in d.hostile else d.draw(st.sampled_from(["file", "file", "missing", "fifo",
                                                                            "device"]))
    if how == "file":
        content = d.pick(category, ordinary, hostile)
        if flag == "--log" and d.draw(st.booleans()):
            name, content = name + ".gz", gzip.compress(content)
        case.files[name] = content
        case.args += [flag, name]
    elif how == "missing":
        case.args += [flag, "no-such-file"]
    elif how == "fifo":
        case.fifos.append(name)
        case.args += [flag, name]
    else:
        case.args += [flag, d.draw(st.sampled_from(["/dev/zero", "/dev/null"]))]


@st.composite
def check_cases(draw: Any, ends: Endpoints) -> Case:
    """`llmdoctor check` with a random set of options: most ordinary, zero to two kinds of them hostile."""
    canary = f"CANARY{next(_serial):04d}q7z"
    d = Drawer(draw, set(draw(st.lists(st.sampled_from(CATEGORIES), max_size=2, unique=True))))
    case = Case(args=["check"], canary=canary)
    refusing_port = ends.refusing.rsplit(":", 1)[1]
    if d.wants("fleet", 5):
        fleet = [f"{ends.refusing}\n{ends.sim.url}\n".encode(),
                 f"[endpoints.a]\nurl = '{ends.sim.url}'\n[endpoints.b]\nurl = '{ends.refusing}'\n".encode()]
        content = d.pick("fleet", fleet, [t.replace(b"{port}", refusing_port.encode()) for t in TOML_FILES])
        case.files["fleet.toml"] = content
        case.args += ["--endpoints", "fleet.toml"]
        case.fleet = True
    else:
        base = draw(st.sampled_from([ends.refusing, ends.sim.url, ends.sim.url]))
        ordinary = [base, base.replace("://", f"://user:{canary}@"), f"{base}/v1?token={canary}"]
        url = d.pick("endpoint", ordinary, HOSTILE_URLS + [base + "/" + "x" * 9000, base + "/a b"])
        if "endpoint" in d.hostile and draw(st.booleans()):
            url = f"{base}/{draw(WILD_TEXT)}"
        case.args += ["-e", url]
    case.deadline = d.pick("deadline", ["0.5", "1", "1.5", "2"], ["nan", "-1", "0", "0.2", "abc", "1e-9", "inf"])
    case.args += ["--deadline", case.deadline]
    # A run against the simulator stays short: one sample, no follow-ups (the deadline bounds it anyway).
    case.args += ["--samples", "1", "--no-followup"]
    if draw(st.booleans()):
        case.args += ["--select", draw(st.sampled_from(IDS))]
    if draw(st.integers(0, 3)) == 0:
        case.args += ["--ignore", draw(st.sampled_from(IDS))]

    ordinary_numbers = {"--timeout": ["1", "5"], "--max-requests": ["5", "30"], "--typical-output-tokens": ["64"],
                        "--context-window": ["4096"], "--concurrency": ["0", "2"], "--idle-test": ["0", "1", "3600"],
                        "--rate": ["5", "50"], "--watch": ["0.2"], "--watch-count": ["2"],
                        "--pid": [str(os.getpid()), "1"]}
    if d.wants("numbers"):
        for flag in draw(st.lists(st.sampled_from(sorted(ordinary_numbers)), min_size=1, max_size=3, unique=True)):
            case.args += [flag, d.pick("numbers", ordinary_numbers[flag], NUMBERS)]
            case.watch = case.watch or flag == "--watch"
    if d.wants("header"):
        name = d.pick("header", ["X-Foo", "X-Api-Key", "Authorization"], HEADER_NAMES)
        text = draw(WILD_TEXT if "header" in d.hostile else st.text("abcXYZ019-_. ", max_size=8))
        case.args += ["--header", f"{name}: {text}{canary}"]
    if d.wants("key"):
        case.env[KEY_VARIABLE] = d.pick("key", ["sk-", "key_"], ["it’s-", "sk\n", "€", "\x7f"]) + canary
        case.args += ["--api-key-env", KEY_VARIABLE]
    if d.wants("slo", 3):
        case.args += ["--slo", d.pick("slo", SLOS[:2], SLOS[2:])]
    if d.wants("budget", 4):
        case.args += ["--budget", d.pick("budget", BUDGETS[:1], BUDGETS[1:])]
    if d.wants("dns", 4):
        case.args += ["--dns-server", d.pick("dns", DNS_SERVERS[:1], DNS_SERVERS[1:]).format(port=unused_port())]
    _input_file(d, case, "--request", "req.json", "request", JSON_FILES[4:5] + JSON_FILES[-1:], JSON_FILES)
    _input_file(d, case, "--compare", "base.json", "compare", [], JSON_FILES)
    _input_file(d, case, "--log", "server.log", "log", LOG_FILES[1:3], LOG_FILES)
    if "ca" in d.hostile:
        _input_file(d, case, "--ca-bundle", "ca.pem", "ca", [], PEM_FILES)
    if d.wants("toml", 5):
        case.files["llmdoctor.toml"] = d.pick("toml", [b"[slo]\nttft_p90 = '800ms'\n"],
                                              [t.replace(b"{port}", b"1") for t in TOML_FILES])
    for flag in ("--metrics-url", "--gpu-metrics-url", "--push-gateway"):
        if d.wants("metrics", 4):
            url = d.pick("metrics", [f"http://u:{canary}@127.0.0.1:{unused_port()}/metrics",
                                     f"http://127.0.0.1:{unused_port()}/metrics?token={canary}"],
                         ["http://☃.net/metrics", "ftp://x", "http://127.0.0.1:0", "http://256.1.1.1/"])
            case.args += [flag, url]
    if d.wants("proxy", 4):
        variable = draw(st.sampled_from(["HTTP_PROXY", "ALL_PROXY", "HTTPS_PROXY"]))
        case.env[variable] = d.pick("proxy", [f"http://u:{canary}@127.0.0.1:{unused_port()}"],
                                    [f"socks5://u:{canary}@127.0.0.1:1", "::::x", "ftp://p:21", "http://☃:1"])
        if draw(st.booleans()):
            case.env["NO_PROXY"] = draw(st.sampled_from(["127.0.0.0/8", "*", "localhost", "127.0.0.1:1", ",,"]))
    fmt = d.pick("format", ["", "--json", "--json", "--format=markdown", "--format=junit", "--format=prometheus",
                            "--format=html"], ["--format=nope", "--format="])
    if fmt:
        case.args.append(fmt)
        case.json_out = fmt == "--json"
    for flag, name in (("-o", "report.out"), ("--save-measurements", "rec.json"), ("--save-baseline", "bl.json")):
        if d.wants("outputs", 3):
            how = d.pick("outputs", ["file"], ["full", "fifo", "dir"])
            if how == "file":
                case.args += [flag, name]
            elif how == "full":
                case.args += [flag, "/dev/full"]
            elif how == "dir":
                case.args += [flag, "."]
            else:
                case.fifos.append(name + ".fifo")
                case.args += [flag, name + ".fifo"]
    for flag in ("--dry-run", "-v", "--insecure"):
        if draw(st.integers(0, 4)) == 0:
            case.args.append(flag)
            case.dry_run = case.dry_run or flag == "--dry-run"
    return case


# -- running one case --------------------------------------------------------------------------------

def _run(capsys: pytest.CaptureFixture[str], folder: Path, case: Case) -> tuple[Result, float]:
    for name, content in case.files.items():
        (folder / name).write_bytes(content)
    for name in case.fifos:
        os.mkfifo(folder / name)
    saved_env = {k: os.environ.get(k) for k in (*PROXY_VARIABLES, KEY_VARIABLE)}
    saved_cwd = os.getcwd()
    for name in (*PROXY_VARIABLES, KEY_VARIABLE):
        os.environ.pop(name, None)
    os.environ.update(case.env)
    os.chdir(folder)
    capsys.readouterr()
    started = time.monotonic()
    try:
        result = run_cli(capsys, *case.args)
    finally:
        took = time.monotonic() - started
        os.chdir(saved_cwd)
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return result, took


def _deadline_s(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        return 0.0
    return number if 0.5 <= number <= 86400 else 0.0  # out of range: a usage error, nothing runs


def _written(folder: Path, case: Case) -> str:
    """Everything the run left in its folder (reports, recordings, baselines), as text."""
    texts = []
    for path in folder.iterdir():
        if path.is_file() and path.name not in case.files:
            texts.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(texts)


def _count(result: Result) -> None:
    """Tally the outcomes (pytest --hypothesis-show-statistics shows how many runs got past the usage checks)."""
    event(f"exit {result.code}" + (" (usage error)" if result.code == 3 and not result.out else ""))


def _assert_sound(result: Result, took: float, folder: Path, case: Case) -> None:
    shown = f"llmdoctor {' '.join(case.args)!r} env={case.env}"
    assert result.code in (0, 1, 2, 3), (shown, result.code, result.err[-2000:])
    for marker in ("Traceback", "internal error", "Exception ignored", "Exception in thread"):
        assert marker not in result.err, (shown, result.err[-3000:])
    for where, text in (("stdout", result.out), ("stderr", result.err), ("files", _written(folder, case))):
        assert case.canary not in text, (shown, where)
    assert took < _deadline_s(case.deadline) + MARGIN_S, (shown, took)
    if case.json_out and result.out.strip() and not case.dry_run:
        for line in (result.out.splitlines() if case.fleet or case.watch else [result.out]):
            data = json.loads(line)
            if case.fleet:
                data.pop("name", None)
                if "error" in data and "schema_version" not in data:
                    continue  # a fleet row for an endpoint that could not be checked
            validate_report(data)


# -- the tests ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("result", "took", "json_out"), [
    (Result(4, "", ""), 0.1, False),
    (Result(2, "", "Traceback (most recent call last):"), 0.1, False),
    (Result(3, "", "llmdoctor: error: internal error: KeyError"), 0.1, False),
    (Result(2, "token CANARY0000t3s", ""), 0.1, False),
    (Result(0, "", ""), 1 + MARGIN_S + 1, False),
    (Result(0, "NaN", ""), 0.1, True),
    (Result(0, '{"schema_version": 1}', ""), 0.1, True),
], ids=["exit-4", "traceback", "internal-error", "canary", "too-slow", "not-json", "not-the-schema"])
def test_the_harness_catches_what_it_looks_for(tmp_path: Path, result: Result, took: float, json_out: bool) -> None:
    """Each invariant fails when broken, so a passing fuzz run means something."""
    case = Case(args=["check"], canary="CANARY0000t3s", deadline="1", json_out=json_out)
    with pytest.raises((AssertionError, json.JSONDecodeError, jsonschema.ValidationError)):
        _assert_sound(result, took, tmp_path, case)


def test_the_harness_searches_written_files(tmp_path: Path) -> None:
    (tmp_path / "report.out").write_text("key CANARY0000f1l")
    case = Case(args=["check"], canary="CANARY0000f1l", deadline="1")
    with pytest.raises(AssertionError):
        _assert_sound(Result(0, "", ""), 0.1, tmp_path, case)


@FUZZ
@given(data=st.data())
def test_fuzzed_check_command_lines(capsys: pytest.CaptureFixture[str], tmp_path_factory: pytest.TempPathFactory,
                                    endpoints: Endpoints, data: st.DataObject) -> None:
    case = data.draw(check_cases(endpoints))
    folder = tmp_path_factory.mktemp("fuzz")
    before = endpoints.sim.requests_received
    result, took = _run(capsys, folder, case)
    _count(result)
    _assert_sound(result, took, folder, case)
    if case.dry_run:
        assert endpoints.sim.requests_received == before, ("--dry-run sent requests", case.args)


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = record_sim_run(tmp_path_factory.mktemp("rec") / "rec.json", "demo", ["LD001", "LD3", "LD701", "LD702"])
    data: dict[str, Any] = json.loads(path.read_text())
    return data


HOSTILE_LEAVES: list[Any] = [float("nan"), float("inf"), -1e12, -10.0, 0, 10 ** 400, "", "x" * 10_000, None, True,
                             [], {}, [[[[]]]], "http://u:{canary}@h/?token={canary}", "\udcff", -0.0]


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a leaf of a JSON-like value."""
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(data, list) and data:
        for i, v in enumerate(data):
            yield from _paths(v, (*prefix, i))
    else:
        yield prefix


def _put(data: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


@settings(FUZZ, max_examples=100)
@given(data=st.data())
def test_fuzzed_recordings_replay_to_valid_json(capsys: pytest.CaptureFixture[str],
                                                tmp_path_factory: pytest.TempPathFactory,
                                                recording: dict[str, Any], data: st.DataObject) -> None:
    """A saved recording with leaves replaced by NaN, negatives, huge numbers, wrong types: valid JSON or exit 3."""
    canary = f"CANARY{next(_serial):04d}r3p"
    mutated = json.loads(json.dumps(recording))
    paths = [p for p in _paths(mutated) if p]
    for path in data.draw(st.lists(st.sampled_from(paths), min_size=1, max_size=6)):
        leaf = data.draw(st.sampled_from(HOSTILE_LEAVES))
        _put(mutated, path, leaf.format(canary=canary) if isinstance(leaf, str) and "{" in leaf else leaf)
    folder = tmp_path_factory.mktemp("replay")
    text = json.dumps(mutated, ensure_ascii=data.draw(st.booleans()))  # NaN written bare, as an edited file may be
    (folder / "rec.json").write_text(text, encoding="utf-8", errors="surrogatepass")
    fmt = data.draw(st.sampled_from(["--json", "--json", "--format=markdown", ""]))
    case = Case(args=["replay", "rec.json", *([fmt] if fmt else [])], canary=canary, json_out=fmt == "--json",
                files={"rec.json": b""}, deadline="nan")
    capsys.readouterr()
    started = time.monotonic()
    saved = os.getcwd()
    os.chdir(folder)
    try:
        result = run_cli(capsys, *case.args)
    finally:
        os.chdir(saved)
    took = time.monotonic() - started
    _count(result)
    _assert_sound(result, took, folder, case)
    if case.json_out and result.code != 3:
        assert result.out.strip(), "a replay that did not fail printed no report"
