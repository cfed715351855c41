"""The prefill cost per prompt token by the server's own clock (llmdoctor.probes.prefill.server_rate).

Pure cases on hand-built timings (the numbers are the test's own), then the whole path over HTTP
against the simulator: its llama.cpp flavor sends ``timings.prompt_ms`` in the final stream chunk,
so the costs the input checks use (LD101, LD102, LD103, LD608) rest on the server's clock and say
so; its OpenAI flavor sends none (control), so they stay the client's estimate and say it is
inferred.
"""

from __future__ import annotations

import math

import pytest

from llmdoctor.analysis.costs import token_costs
from llmdoctor.doctor import diagnose
from llmdoctor.measurements.timing import ClockKind, ClockOrigin, RequestTiming, ServerClock
from llmdoctor.options import Options
from llmdoctor.probes.prefill import server_rate
from llmdoctor.runner import Status
from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from llmdoctor.target import Target
from tests.checkcases import FIXTURES

PROMPT_MS = "timings.prompt_ms"


def _timing(ttft: float, prompt_ms: float | None = None) -> RequestTiming:
    clocks = [] if prompt_ms is None else [ServerClock(ClockKind.PREFILL, prompt_ms, PROMPT_MS, ClockOrigin.BODY)]
    return RequestTiming("POST", "/v1/chat/completions", streamed=True, status=200, sent_ms=0.5, ttfb_ms=2.0,
                         ttft_ms=ttft, token_times_ms=[ttft], total_ms=ttft + 1.0, reused_connection=True,
                         completion_tokens=1, server_clocks=clocks)


def test_the_servers_prompt_clock_gives_the_rate_and_names_itself() -> None:
    # 0.3 ms a token in front of the server grows with the prompt too: the client sees 0.4, the server 0.1.
    short, long = _timing(40.0, 12.0), _timing(40.0 + 0.4 * 1261, 12.0 + 0.1 * 1261)
    rate = server_rate(short, long, 39, 1300)
    assert rate.per_token_ms == pytest.approx(0.1)
    assert (rate.source, rate.clock, rate.note) == (PROMPT_MS, ClockOrigin.BODY, "")


@pytest.mark.parametrize(("short_ms", "long_ms", "why"), [
    (None, None, "no server clock"),
    (12.0, None, "no server clock"),          # a field missing from one answer
    (-3.0, 140.0, "negative"),
    (12.0, 9000.0, "longer than"),            # longer than the client's own wait for the first token
    (12.0, math.nan, "not a number"),
    (30.0, 12.0, "did not grow"),            # a long prompt served from a cache
])
def test_no_rate_from_a_missing_or_impossible_clock(short_ms: float | None, long_ms: float | None,
                                                    why: str) -> None:
    rate = server_rate(_timing(40.0, short_ms), _timing(545.0, long_ms), 39, 1300)
    assert rate.per_token_ms is None
    assert why in rate.note, rate.note


def _sim_run(flavor: str) -> tuple[object, object]:
    request = FIXTURES / "requests" / "half-window.json"
    with SimServer(get_profile("healthy", flavor=flavor, per_prompt_token_ms=0.4)) as sim:
        report, ctx = diagnose(Target(base_url=sim.base_url), Options.of(
            samples=3, followup=False, request_files=(str(request),)), selected=["LD101"])
    return report, ctx


def test_over_http_the_llamacpp_clock_prices_the_prompt() -> None:
    """The simulator's llama.cpp flavor times its prompts (0.4 ms a token): the costs use that clock."""
    report, ctx = _sim_run("llamacpp")
    costs = token_costs(ctx)  # type: ignore[arg-type]
    assert costs.prefill_clock == ClockOrigin.BODY, costs.prefill_basis
    assert costs.prefill_ms == pytest.approx(0.4, rel=0.25), costs.prefill_basis
    assert PROMPT_MS in costs.prefill_basis
    outcome = next(o for o in report.checks if o.check_id == "LD101")  # type: ignore[attr-defined]
    assert outcome.status == Status.FAILED, outcome.reason
    (finding,) = outcome.findings
    assert "server-measured prefill" in finding.impact_basis
    assert any("server_body clock" in e.label and PROMPT_MS in e.source for e in finding.evidence)


def test_over_http_without_a_server_clock_the_estimate_stays_inferred() -> None:
    """Control: the OpenAI flavor sends no prompt clock; the same prompt is priced by the client's clock."""
    report, ctx = _sim_run("openai")
    costs = token_costs(ctx)  # type: ignore[arg-type]
    assert costs.prefill_clock == "inferred", costs.prefill_basis
    assert costs.prefill_ms == pytest.approx(0.4, rel=0.5), costs.prefill_basis
    assert "inferred from the client's time to first token" in costs.prefill_basis
    assert "no server clock" in costs.prefill_basis
    outcome = next(o for o in report.checks if o.check_id == "LD101")  # type: ignore[attr-defined]
    (finding,) = outcome.findings
    assert PROMPT_MS not in finding.impact_basis
