"""Fewer requests for the same diagnosis (issue 18 item 7): follow-ups only when they can change the conclusion.

- A first request that was not slower argues against a cold start even when llmdoctor lagged (a stall
  of its own only makes a request look slower), so the idle test is not ordered for nothing.
- Cheap prompt tokens argue against a prefix-cache miss being a cause (a cache saves prompt work),
  so the repeated-prompt test is not ordered for nothing; on a slow prefill it still is.
- The lone-request test reads the checklist's scrapes around the baseline (its requests are sent one
  at a time) when nothing else moved the server's histograms; with other traffic it sends its own.
- First tokens spread by a busy host (llmdoctor lagging, or the server's host pinned) raise no queueing
  hypothesis, so the concurrency step is not ordered for the host's noise.
- A default check on the healthy simulator sends at most 20 requests, counted at the server.

The faulty profiles keep their diagnosis: tests/test_diagnosis.py.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from llmdoctor.context import Context
from llmdoctor.diagnosis.confounders import Confounders
from llmdoctor.diagnosis.evidence import FOLLOWUPS, Facts, first_pass
from llmdoctor.diagnosis.scoring import STRONG, WEAK
from llmdoctor.options import Options
from llmdoctor.probes.catalog import FIRST_REQUEST, LONE_REQUEST, PREFILL, SERVER_METRICS
from llmdoctor.probes.followup import LoneRequestResult
from llmdoctor.probes.prefill import PrefillResult
from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from llmdoctor.target import Target
from tests.test_diagnosis import BackgroundLoad

#: Issue 18's target for a default check on a healthy endpoint, counted at the server.
HEALTHY_REQUESTS = 20


def _facts(**kw: Any) -> Facts:
    base: dict[str, Any] = dict(warm_ttft_ms=40.0, warm_total_ms=60.0, ttft_p90_ms=44.0, decode_ms=4.0,
                                first_ttft_ms=None, first_setup_ms=0.0, models_ms=1.0, fresh=1, reused=4,
                                confounders=Confounders(jitter_ms=2.0))
    return Facts(**{**base, **kw})


def _cold(seen: list[tuple[str, float, str]]) -> list[float]:
    return [lr for hyp, lr, _ in seen if hyp == "cold_start"]


def test_a_first_request_not_slower_argues_against_a_cold_start_though_the_client_lagged() -> None:
    seen, _ = first_pass(_facts(first_ttft_ms=45.0, first_lag_ms=12.0))
    assert _cold(seen) == [1 / WEAK]
    # control: a difference the lag explains says nothing either way
    seen, _ = first_pass(_facts(first_ttft_ms=190.0, first_lag_ms=100.0))
    assert _cold(seen) == []


def _queueing(seen: list[tuple[str, float, str]]) -> list[float]:
    return [lr for hyp, lr, _ in seen if hyp == "queueing"]


def test_first_tokens_spread_by_a_busy_host_are_not_queueing() -> None:
    spread = dict(warm_ttft_ms=40.0, ttft_p90_ms=90.0)
    busy = Confounders(jitter_ms=50.0, host_cpu=100.0, server_local=True)
    assert _queueing(first_pass(_facts(**spread, confounders=busy))[0]) == []
    lagging = Confounders(jitter_ms=50.0, lag_ms=8.0)
    assert _queueing(first_pass(_facts(**spread, confounders=lagging))[0]) == []
    # control: the same spread on a quiet host is (weak) evidence of waiting
    quiet = Confounders(jitter_ms=50.0, host_cpu=20.0, server_local=True, lag_ms=0.5)
    assert _queueing(first_pass(_facts(**spread, confounders=quiet))[0]) == [WEAK]


def _read_prefill(per_token_ms: float) -> dict[str, float]:
    test = next(t for t in FOLLOWUPS if t.probe is PREFILL)
    short, long = 40.0, 40.0 + per_token_ms * 970
    r = PrefillResult(34, 1004, short, long, per_token_ms, "usage", lag_ms=1.0)
    seen, _ = test.read(r, _facts())  # type: ignore[attr-defined]
    return {hyp: lr for hyp, lr, _ in seen}


def test_cheap_prompt_tokens_argue_against_a_prefix_cache_miss() -> None:
    assert _read_prefill(0.05)["prefix_cache_miss"] == pytest.approx(1 / STRONG)
    # control: where prompt tokens are dear, a cache miss may cost a lot: the repeat test decides
    assert "prefix_cache_miss" not in _read_prefill(1.5)


def _lone_after_baseline(other_traffic: bool) -> tuple[LoneRequestResult, int]:
    """The run's order (first request, then scrape, baseline, scrape), then the lone-request test:
    its result and the requests it sent, counted at the server."""
    with SimServer(get_profile("healthy")) as server:
        ctx = Context(target=Target(base_url=server.base_url), options=Options())
        try:
            ctx.get(FIRST_REQUEST)
            with BackgroundLoad(server.url) if other_traffic else contextlib.nullcontext():
                ctx.get(SERVER_METRICS)
            before = server.requests_received
            lone = ctx.get(LONE_REQUEST)
            return lone, server.requests_received - before
        finally:
            ctx.close()


def test_lone_request_reads_the_baseline_scrapes_when_only_ours_moved_them() -> None:
    lone, sent = _lone_after_baseline(other_traffic=False)
    assert sent == 0
    assert lone.from_baseline == 5 and lone.requests_seen == 5
    assert lone.server_queue_ms is not None and lone.server_queue_ms < 5
    assert lone.client_ttft_ms is not None and lone.server_ttft_ms is not None


def test_lone_request_is_sent_when_other_traffic_moved_the_histograms() -> None:
    lone, sent = _lone_after_baseline(other_traffic=True)
    assert lone.from_baseline == 0
    assert sent == 3  # scrape, one lone request, scrape


def test_a_default_check_on_a_healthy_endpoint_sends_at_most_20_requests(tmp_path: Path) -> None:
    from llmdoctor.cli import main

    out = tmp_path / "report.json"
    with SimServer(get_profile("healthy")) as server:
        with pytest.raises(SystemExit):
            main(["check", "-e", server.base_url, "--json", "-o", str(out)])
        at_server = server.requests_received
    report = json.loads(out.read_text())
    assert report["requests"]["sent"] == at_server
    tests = {t["probe"]: t for t in report["diagnosis"]["tests"] if t["ran"]}
    # nothing argues for a cold start or a costly cache miss: neither test can change the conclusion
    assert "followup_idle" not in tests and "repeat_prompt" not in tests
    by_probe = {p["probe"]: p["sent"] for p in report["requests"]["by_probe"]}
    assert by_probe.get("lone_request", 0) == 0  # read from the baseline's own scrapes
    first = {h["id"]: h for h in report["diagnosis"]["hypotheses"]}
    # On a busy host the baseline's first tokens can spread enough to raise queueing above its prior:
    # then the concurrency step can change the conclusion and is worth its requests.
    raised = first["queueing"]["after_first_pass"] > first["queueing"]["prior"]
    extra = tests["followup_concurrency"]["cost_requests"] if raised and "followup_concurrency" in tests else 0
    assert at_server - extra <= HEALTHY_REQUESTS, (at_server, list(tests))
