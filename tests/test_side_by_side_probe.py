"""`compare`'s side-by-side loop is a catalog probe (`SIDE_BY_SIDE`): planned, dry-run, counted by probe.

Against real simulators over loopback: the dry run sends nothing and its bound is what the live run
sends to each endpoint; each side's requests are stamped by the probe that sent them; the other
endpoint's context is held to the probe's declaration and plan (`Context.measuring_as`).
"""

from __future__ import annotations

import pytest

from llmdoctor.context import Context, ProbeUnavailable, UndeclaredRead
from llmdoctor.options import Options
from llmdoctor.probes.catalog import BASELINE, DISCOVERY, SIDE_BY_SIDE
from llmdoctor.probes.client import PlanExceeded
from llmdoctor.probes.contract import Endpoint
from llmdoctor.sidebyside import probes_measured, run_side_by_side
from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from llmdoctor.target import build_target
from tests.cliutil import run_cli


def test_the_dry_run_sends_nothing_and_bounds_what_each_endpoint_gets(capsys: pytest.CaptureFixture[str]) -> None:
    with SimServer(get_profile("healthy")) as a, SimServer(get_profile("healthy", seed=1)) as b:
        dry = run_cli(capsys, "compare", "-e", a.url, "-e", b.url, "--samples", "6", "--dry-run")
        assert (a.requests_received, b.requests_received) == (0, 0)  # nothing was sent
        live = run_cli(capsys, "compare", "-e", a.url, "-e", b.url, "--samples", "6", "--json")
        sent = (a.requests_received, b.requests_received)
    assert dry.code == 0 and "nothing is sent" in dry.out, dry.err
    assert dry.out.count("at most 8 HTTP requests (plan 8, budget 16)") == 2  # /models, one warm-up, 6 samples
    assert dry.out.count("[side_by_side]") == dry.out.count("[discovery]") == 2
    assert "Probes, in the order they run, for each endpoint: discovery, side_by_side" in dry.out
    assert live.code in (0, 1) and sent == (8, 8)  # the live run sends the plan to each


def test_each_sides_requests_are_counted_by_the_probe_that_sent_them() -> None:
    options = Options.of(samples=5, max_requests=15)
    with SimServer(get_profile("healthy")) as a, SimServer(get_profile("healthy", seed=1)) as b:
        result = run_side_by_side([build_target(a.url, api_key_env=None), build_target(b.url, api_key_env=None)],
                                  options)
    plan = SIDE_BY_SIDE.max_requests(options, Endpoint.of(build_target(a.url, api_key_env=None)))
    assert plan == 6 and probes_measured(options) == [DISCOVERY, SIDE_BY_SIDE]
    for side in (result.a, result.b):
        assert not side.error and len(side.ok) == 5
        assert side.requests_by_probe == {"discovery": 1, "side_by_side": plan} and side.requests_sent == 7


def test_the_other_endpoint_is_held_to_the_probes_declaration_and_plan() -> None:
    options = Options.of(samples=5)
    with SimServer(get_profile("healthy")) as server:
        beside = Context(build_target(server.url, api_key_env=None), options, strict=True)
        with beside.measuring_as(SIDE_BY_SIDE):
            with pytest.raises(UndeclaredRead, match="probe side_by_side reads probe 'baseline' without declaring"):
                beside.get(BASELINE)
            model = beside.get(DISCOVERY).model  # declared: needs
            for _ in range(6):  # its plan: one warm-up and 5 samples
                assert beside.client.chat("Say ok.", max_tokens=1, extra={"model": model}).ok
            with pytest.raises(PlanExceeded, match="probe side_by_side sends POST .* beyond its declared plan of 6"):
                beside.client.chat("Say ok.", max_tokens=1, extra={"model": model})
        assert beside.requests_by_probe == {"discovery": 1, "side_by_side": 6}
        beside.close()


def test_the_probe_needs_two_endpoints() -> None:
    ctx = Context(build_target("http://127.0.0.1:9", api_key_env=None))
    with pytest.raises(ProbeUnavailable, match="needs two endpoints"):
        ctx.get(SIDE_BY_SIDE)
    assert ctx.requests_sent == 0
