"""The probe contract: one declaration per probe, and what derives from it.

- For every ``--select`` group (each category prefix, each single check, the default) the dry
  run's "At most N HTTP requests" bounds what the simulator counts for the same run, and the
  probes the dry run lists are exactly the probes the run reports (``probes[]``).
- The checks' order does not change the findings: the run measures one canonical schedule.
- Strict mode (on for the whole suite, tests/conftest.py) fails a read nobody declared.
- The declarations agree with the code they name.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from llmdoctor.check import Category, Check
from llmdoctor.checklist.registry import Registry, load_registry
from llmdoctor.context import Context, ProbeUnavailable, UndeclaredRead, probe_function
from llmdoctor.diagnosis.evidence import FOLLOWUPS, Facts
from llmdoctor.findings import Confidence, Finding, Fix, Severity
from llmdoctor.options import Options
from llmdoctor.probes import catalog
from llmdoctor.probes.catalog import (
    BASELINE,
    CLIENT_HOST,
    CLIENT_LIMITS,
    DIAGNOSIS,
    DISCOVERY,
    GPU,
    HOST,
    ORDER,
    OUTCOMES,
    PROBES,
    SWEEP,
)
from llmdoctor.probes.contract import Endpoint, Probe, Reads, schedule
from llmdoctor.runner import run_checks
from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from llmdoctor.target import Target
from tests.cliutil import run_cli

ROOT = Path(__file__).resolve().parent.parent
REQUEST_FILE = str(ROOT / "fixtures" / "requests" / "params-heavy.json")
REGISTRY = load_registry()
CHECK_IDS = [c.id for c in REGISTRY.checks]
CATEGORIES = [f"LD{i}" for i in range(8)]


# -- dry run against the real run ----------------------------------------------------------------
@dataclass
class DryRun:
    bound: int
    probes: set[str]
    may_order: set[str]


def _dry_run(capsys: pytest.CaptureFixture[str], url: str, args: list[str]) -> DryRun:
    result = run_cli(capsys, "check", "-e", url, "--dry-run", *args)
    assert result.code == 0, result.err
    out = result.out
    bound = re.search(r"^At most (\d+) HTTP requests", out, re.M)
    listed = re.search(r"^Probes, in the order they run: (.*)$", out, re.M)
    ordered = re.search(r"^The diagnosis may also order, within its budget: (.*)$", out, re.M)
    assert bound and listed, out
    names = set() if listed.group(1) == "none" else set(listed.group(1).split(", "))
    return DryRun(int(bound.group(1)), names, set(ordered.group(1).split(", ")) if ordered else set())


def _live(capsys: pytest.CaptureFixture[str], server: SimServer, args: list[str]) -> tuple[dict[str, Any], int]:
    before = server.requests_received
    result = run_cli(capsys, "check", "-e", server.url, "--json", *args)
    assert result.code in (0, 1, 2), result.err
    return result.report, server.requests_received - before


def _args(group: str, *, followup: bool = False) -> list[str]:
    args = ["--select", group] if group else []
    if not group or group[:3] in ("LD1", "LD6"):
        args += ["--request", REQUEST_FILE]  # the input and parameter checks read the app's requests
    return args + ([] if followup else ["--no-followup"])


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, SimServer]]:
    with SimServer(get_profile("healthy")) as healthy, SimServer(get_profile("demo")) as demo:
        yield {"healthy": healthy, "demo": demo}


def _assert_plan_holds(capsys: pytest.CaptureFixture[str], server: SimServer, args: list[str]) -> None:
    plan = _dry_run(capsys, server.url, args)
    report, counted = _live(capsys, server, args)
    ran = {p["name"] for p in report["probes"]}
    assert counted == report["requests"]["sent"], (counted, report["requests"])
    assert counted <= plan.bound, f"{args}: the simulator counted {counted} requests, the dry run promised {plan.bound}"
    if "--no-followup" in args:
        assert ran == plan.probes, f"{args}: ran {sorted(ran)}, dry run listed {sorted(plan.probes)}"
    else:  # the diagnosis orders follow-ups within its own planned budget
        assert plan.probes <= ran <= plan.probes | plan.may_order, (sorted(ran), plan)


@pytest.mark.parametrize("profile", ["healthy", "demo"])
@pytest.mark.parametrize("group", [*CATEGORIES, ""], ids=[*CATEGORIES, "default"])
def test_dry_run_bounds_each_category_and_the_default(capsys: pytest.CaptureFixture[str],
                                                      servers: dict[str, SimServer], profile: str, group: str) -> None:
    _assert_plan_holds(capsys, servers[profile], _args(group))


@pytest.mark.parametrize("check_id", CHECK_IDS)
def test_dry_run_bounds_each_single_check(capsys: pytest.CaptureFixture[str], servers: dict[str, SimServer],
                                          check_id: str) -> None:
    _assert_plan_holds(capsys, servers["healthy"], _args(check_id))


@pytest.mark.parametrize("extra", [["--select", "LD710", "--slo", "ttft_p90=5000ms", "--slo", "per_token=500ms"],
                                   ["--select", "LD304", "--idle-test", "0.2"],
                                   ["--select", "LD503", "--concurrency", "2"],
                                   ["--select", "LD101", "--request", REQUEST_FILE, "--context-window", "8192"],
                                   ["--select", "LD406", "--dns-server", "127.0.0.1:9"]],
                         ids=["slo", "idle-test", "concurrency", "context-window", "dns-server"])
def test_dry_run_bounds_opt_in_probes(capsys: pytest.CaptureFixture[str], servers: dict[str, SimServer],
                                      extra: list[str]) -> None:
    _assert_plan_holds(capsys, servers["healthy"], [*extra, "--no-followup"])


def test_dry_run_bounds_the_default_run_with_follow_ups(capsys: pytest.CaptureFixture[str],
                                                        servers: dict[str, SimServer]) -> None:
    _assert_plan_holds(capsys, servers["demo"], _args("", followup=True))


def test_the_transport_probe_schedules_dns_only_under_dns_server(capsys: pytest.CaptureFixture[str],
                                                                 servers: dict[str, SimServer]) -> None:
    """Transport connects where ``--dns-server``'s answers point: only then does it read (and schedule) dns."""
    url = servers["healthy"].url
    assert "dns" not in _dry_run(capsys, url, ["--select", "LD406"]).probes
    assert {"dns", "transport"} <= _dry_run(capsys, url, ["--select", "LD406", "--dns-server", "127.0.0.1:9"]).probes
    transport, dns = catalog.TRANSPORT, catalog.DNS
    assert transport.optional_under(Options()) == (BASELINE,)
    assert transport.optional_under(Options.of(dns_server="127.0.0.1")) == (BASELINE, dns)
    assert dns in transport.reads  # every read it may make, under some options


def test_the_issue_example_no_longer_promises_zero(capsys: pytest.CaptureFixture[str],
                                                   servers: dict[str, SimServer]) -> None:
    """``--select LD1,LD6 --request req.json`` promised 0 requests and sent 16."""
    args = ["--select", "LD1,LD6", "--request", REQUEST_FILE]
    plan = _dry_run(capsys, servers["healthy"].url, args)
    _, counted = _live(capsys, servers["healthy"], args)
    assert counted > 0 and plan.bound >= counted


# -- the order of the checks does not matter ---------------------------------------------------
def _shuffled(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    def load() -> Registry:
        registry = load_registry()
        checks = list(registry.checks)
        random.Random(seed).shuffle(checks)
        return Registry(checks, registry.errors)

    monkeypatch.setattr("llmdoctor.doctor.load_registry", load)


def _findings(report: dict[str, Any]) -> list[tuple[str, str, str, float | None]]:
    return [(f["check_id"], f["severity"], f["confidence"],
             None if f["impact_ms"] is None else round(f["impact_ms"], 1)) for f in report["findings"]]


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory, servers: dict[str, SimServer]) -> Path:
    """Measurements of a full demo run with follow-ups and the app's requests."""
    from llmdoctor.cli import main

    path = tmp_path_factory.mktemp("recording") / "measurements.json"
    with pytest.raises(SystemExit):
        main(["check", "-e", servers["demo"].url, "--json", "-o", str(path.with_suffix(".report")),
              "--request", REQUEST_FILE, "--save-measurements", str(path)])
    return path


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_replay_in_a_shuffled_order_gives_the_same_findings(capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch, recording: Path,
                                                            seed: int) -> None:
    in_order = run_cli(capsys, "replay", str(recording), "--json").report
    _shuffled(monkeypatch, seed)
    shuffled = run_cli(capsys, "replay", str(recording), "--json").report
    assert [c["check_id"] for c in shuffled["checks"]] != [c["check_id"] for c in in_order["checks"]]
    assert _findings(shuffled) == _findings(in_order) and _findings(in_order)
    assert shuffled["diagnosis"] == in_order["diagnosis"]


def _reads_this_machine(check_id: str) -> bool:
    """Whether the check reads this machine's state now (load, GPU, sockets), which two runs need not share."""
    check = REGISTRY.by_id(check_id)
    return check is not None and any(p in (HOST, GPU, CLIENT_LIMITS) for p in check.declared())


def _reads_client_noise(check_id: str) -> bool:
    """Whether the check's confidence reads the client's own lag (the client host probe)."""
    check = REGISTRY.by_id(check_id)
    return check is not None and CLIENT_HOST in check.declared()


def test_a_live_run_in_a_shuffled_order_measures_and_finds_the_same(capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    runs = []
    for seed in (None, 7):
        if seed is not None:
            _shuffled(monkeypatch, seed)
        with SimServer(get_profile("demo")) as server:
            runs.append(_live(capsys, server, ["--request", REQUEST_FILE])[0])
    in_order, shuffled = runs
    # The same probes, measured in the same order whatever the checks' order.
    assert [p["name"] for p in shuffled["probes"]] == [p["name"] for p in in_order["probes"]]
    # The same findings; checks reading this machine (host load, GPU) can change between two runs.
    a = [f for f in _findings(in_order) if not _reads_this_machine(f[0])]
    b = [f for f in _findings(shuffled) if not _reads_this_machine(f[0])]
    assert [f[:2] for f in a] == [f[:2] for f in b] and a
    # A timing conclusion's confidence is lowered on a noisy client (`noise.timing_confidence` reads the
    # client host's lag): two live runs on a busy machine may differ there, and only there.
    assert [f[:3] for f in a if not _reads_client_noise(f[0])] == [f[:3] for f in b if not _reads_client_noise(f[0])]
    for x, y in zip(a, b):  # two live runs: the impacts agree within the simulator's jitter
        if x[3] is not None and y[3] is not None:
            assert abs(x[3] - y[3]) <= max(100.0, 0.25 * max(x[3], y[3])), (x, y)


# -- strict mode -----------------------------------------------------------------------------------
class _ReadsUndeclared(Check):
    """Toy check: declares the baseline, reads the sweep too."""

    id, name, title, category = "LD999", "toy", "Toy", Category.BASELINE
    requires = (BASELINE,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        ctx.get(BASELINE)
        ctx.optional(SWEEP)
        yield from ()


class _ReadsDeclared(_ReadsUndeclared):
    """Toy check: declares everything it reads."""

    optional = (SWEEP,)


class _ReadsResults(_ReadsUndeclared):
    """Toy check: peeks at the report assembly's results."""

    def run(self, ctx: Context) -> Iterator[Finding]:
        ctx.results()
        yield Finding(Severity.INFO, Confidence.LOW, "t", "m", Fix("f"))


def _replay_ctx(*, strict: bool = True) -> Context:
    recorded = {"baseline": {"model": "m", "max_tokens": 8}, "sweep": {"unavailable": "not measured"}}
    return Context(Target("http://127.0.0.1:9/v1"), Options(), recorded=recorded, strict=strict)


def test_the_suite_runs_strict() -> None:
    assert Context(None).strict


def test_strict_mode_fails_a_check_reading_an_undeclared_probe() -> None:
    with pytest.raises(UndeclaredRead, match="LD999 reads probe 'sweep'"):
        run_checks([_ReadsUndeclared], _replay_ctx())
    [outcome] = run_checks([_ReadsDeclared], _replay_ctx())
    assert outcome.status == "passed"  # declared: the read is fine
    [lenient] = run_checks([_ReadsUndeclared], _replay_ctx(strict=False))
    assert lenient.status == "passed"  # outside strict mode the read is served


def test_strict_mode_fails_reading_results_inside_a_check() -> None:
    with pytest.raises(UndeclaredRead, match="results"):
        run_checks([_ReadsResults], _replay_ctx())


def test_strict_mode_fails_a_check_reading_a_probe_the_run_did_not_schedule() -> None:
    ctx = _replay_ctx()
    ctx.measure([BASELINE])
    with pytest.raises(UndeclaredRead, match="did not schedule"):
        with ctx.reading_as("LD999", [BASELINE, SWEEP]):
            ctx.optional(SWEEP)


def _toy_probe(ctx: Context) -> str:
    ctx.optional(DISCOVERY)  # not among its needs
    return "measured"


TOY: Probe[str] = Probe("toy", f"{__name__}:_toy_probe", "builtins:str", "toy probe")
TOY_DECLARED: Probe[str] = Probe("toy_declared", f"{__name__}:_toy_probe", "builtins:str", "toy probe",
                                 optional=(DISCOVERY,))


def test_strict_mode_fails_a_probe_reading_an_undeclared_probe() -> None:
    with pytest.raises(UndeclaredRead, match="probe toy reads probe 'discovery'"):
        Context(None).get(TOY)
    assert Context(None).get(TOY_DECLARED) == "measured"


def _dns_server_given(options: Options) -> bool:
    return bool(options.network.dns_server)


TOY_CONDITIONAL: Probe[str] = Probe("toy_conditional", f"{__name__}:_toy_probe", "builtins:str", "toy probe",
                                    optional_if=((DISCOVERY, _dns_server_given),))


def test_a_conditional_read_is_declared_and_scheduled_only_under_its_options() -> None:
    with pytest.raises(UndeclaredRead, match="probe toy_conditional reads probe 'discovery'"):
        Context(None).get(TOY_CONDITIONAL)
    assert Context(None, Options.of(dns_server="127.0.0.1")).get(TOY_CONDITIONAL) == "measured"
    readers = [Reads((TOY_CONDITIONAL,))]
    assert schedule(readers, lambda p: None, ORDER, Options()) == [TOY_CONDITIONAL]
    # DISCOVERY sends requests, so the run's closing probes (its requests' outcomes, its host) come last.
    assert schedule(readers, lambda p: None, ORDER, Options.of(dns_server="127.0.0.1")) == [DISCOVERY,
                                                                                             TOY_CONDITIONAL,
                                                                                             OUTCOMES, CLIENT_HOST]


def test_a_run_that_sends_ends_with_its_closing_probes_and_one_that_does_not_has_none() -> None:
    sending = schedule([Reads((SWEEP,))], lambda p: None, ORDER, Options())
    assert sending[-2:] == [OUTCOMES, CLIENT_HOST] and DIAGNOSIS not in sending
    assert schedule([Reads((HOST,))], lambda p: None, ORDER, Options()) == [HOST]


def test_probes_are_read_through_handles_only() -> None:
    with pytest.raises(TypeError, match="handles"):
        Context(None).get("baseline")  # type: ignore[call-overload]
    assert not hasattr(Context, "peek")


# -- the declarations agree with the code they name ----------------------------------------------
def test_the_catalog_lists_every_probe_once_in_its_order() -> None:
    handles = [v for v in vars(catalog).values() if isinstance(v, Probe)]
    assert set(handles) == set(ORDER) and len(ORDER) == len(set(ORDER)) == len(PROBES)
    closing = [p for p in ORDER if p.closing]
    assert closing == list(ORDER[-len(closing):]) == [OUTCOMES, CLIENT_HOST]  # the run's summaries come last
    derived = tuple(p for p in ORDER if p.derived)  # derived probes are computed after the measured ones
    assert derived and ORDER[-len(closing) - len(derived):-len(closing)] == derived  # just before the summaries
    for probe in ORDER:
        for dep in probe.reads:
            assert dep in PROBES.values(), (probe, dep)
        conditional = tuple(d for d, _ in probe.optional_if)
        if probe.needs or probe.optional or conditional:
            assert all(ORDER.index(d) < ORDER.index(probe) or probe.name == "server_metrics"
                       for d in (*probe.needs, *probe.optional, *conditional)), probe


@pytest.mark.parametrize("probe", ORDER, ids=lambda p: p.name)
def test_each_declaration_names_its_function_and_result_type(probe: Probe[object]) -> None:
    function = probe_function(probe)
    result_type = probe.resolve_type()
    returns = function.__annotations__["return"]  # a string: the probe modules use postponed annotations
    assert returns == result_type.__name__, f"{probe.function} returns {returns}, declared {result_type}"
    # The handle's static type (Probe[T] in catalog.py) is the declared result type.
    annotation = catalog.__annotations__[next(k for k, v in vars(catalog).items() if v is probe)]
    assert annotation == f"Probe[{result_type.__name__}]", annotation


def test_every_check_declares_catalog_probes() -> None:
    for check in REGISTRY.checks:
        declared = check.declared()
        assert all(p in PROBES.values() for p in declared), check.id
        assert len(declared) == len(set(declared)), check.id
        assert set(check.reads(Options()).all) <= set(declared), check.id


def test_the_diagnosis_declares_the_follow_ups_it_orders_and_charges_their_plans() -> None:
    assert {p for f in FOLLOWUPS for p in f.sources()} == set(DIAGNOSIS.orders)
    facts = Facts(warm_ttft_ms=100.0, warm_total_ms=200.0, ttft_p90_ms=150.0, decode_ms=5.0, first_ttft_ms=None,
                  first_setup_ms=0.0, models_ms=None, fresh=0, reused=0)
    for f in FOLLOWUPS:
        plan = sum(r.count for r in f.probe.requests(Endpoint.of(None), Options()))
        assert f.cost(facts, Options())[0] == plan, f.probe
    assert SWEEP.max_requests(Options()) == 2 * 2 * 3  # each sweep request may be resent without ignore_eos


def test_an_off_probe_says_why_and_sends_nothing() -> None:
    ctx = Context(Target("http://127.0.0.1:9/v1"), Options())
    with pytest.raises(ProbeUnavailable, match="--request"):
        ctx.get(catalog.PROMPT_TOKENS)  # off because its need (the requests) is
    assert ctx.requests_sent == 0 and [s.name for s in ctx.statuses()] == ["prompt_tokens"]


def test_importing_the_catalog_imports_no_probe_module() -> None:
    code = ("import json, sys, llmdoctor.probes.catalog\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('llmdoctor.') and m not in "
            "('llmdoctor.probes', 'llmdoctor.probes.catalog', 'llmdoctor.probes.contract', "
            "'llmdoctor.probes.sizes'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == []


class _OldStyle(Check):
    """Toy plugin still naming its probes by string."""

    id, name, title, category = "LD998", "old-style", "Old style", Category.BASELINE
    requires = ("baseline",)  # type: ignore[assignment]


def test_a_plugin_naming_probes_by_string_is_a_load_error_not_a_crash() -> None:
    from importlib.metadata import EntryPoint

    registry = load_registry([EntryPoint("LD998", f"{__name__}:_OldStyle", "llmdoctor.checks")])
    assert registry.checks == [] and "not a probe handle" in registry.errors[0].reason


def test_a_plugin_probe_outside_the_catalog_is_measured_after_the_catalog_ones() -> None:
    plugin = Probe("plugin", f"{__name__}:_toy_probe", "builtins:str", "a plugin's probe", optional=(DISCOVERY,))
    order = schedule([Reads((plugin, SWEEP))], lambda p: None, ORDER)
    # after the catalog's probes, before the run's closing summaries (which count its requests too)
    assert order[-3:] == [plugin, OUTCOMES, CLIENT_HOST] and order.index(DISCOVERY) < order.index(SWEEP)
