"""The idle probe and LD304 against the simulator's idle unload (a real HTTP server on loopback)."""

from __future__ import annotations

from llmdoctor.checks.ld304_after_idle import AfterIdlePenalty

from llmdoctor.context import Context
from llmdoctor.options import Options
from llmdoctor.probes.catalog import IDLE
from llmdoctor.runner import run_one
from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from llmdoctor.target import Target


def test_unload_after_idle_is_measured_and_reported():
    profile = get_profile("healthy", cold_start_ms=400.0, idle_unload_s=0.5)
    with SimServer(profile) as sim:
        ctx = Context(Target(sim.base_url), Options.of(samples=3, idle_test_s=1.0))
        outcome = run_one(AfterIdlePenalty, ctx)
        idle = ctx.get(IDLE)
    assert idle.idle_s == 1.0 and idle.after_idle.ok
    assert idle.penalty_ms is not None and 350 <= idle.penalty_ms <= 600
    assert outcome.status == "failed" and outcome.findings[0].impact_ms == round(idle.penalty_ms, 1)


def test_no_unload_no_finding():
    with SimServer(get_profile("healthy")) as sim:
        ctx = Context(Target(sim.base_url), Options.of(samples=3, idle_test_s=0.3))
        assert run_one(AfterIdlePenalty, ctx).status == "passed"


def test_idle_test_is_opt_in():
    ctx = Context(Target("http://127.0.0.1:9/v1"), Options())
    outcome = run_one(AfterIdlePenalty, ctx)
    assert outcome.status == "skipped" and "--idle-test" in outcome.reason and ctx.requests_sent == 0
