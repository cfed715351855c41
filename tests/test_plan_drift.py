"""The dry-run plan is a static table: check it against what a real run sends, so they cannot drift."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from llmdoctor.checklist.registry import load_registry
from llmdoctor.options import Options
from llmdoctor.plan import plan_probes, plan_requests
from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from llmdoctor.target import Target
from tests.cliutil import run_cli


@pytest.mark.parametrize("profile", ["healthy", "slow-floor"])
def test_a_default_run_stays_inside_its_dry_run_plan(capsys: pytest.CaptureFixture[str], profile: str) -> None:
    with SimServer(get_profile(profile)) as server:
        result = run_cli(capsys, "check", "-e", server.url, "--json")
        by_path = server.requests_by_path
        target = Target(base_url=server.base_url)
    planned = plan_requests(target, Options(), plan_probes(load_registry().checks, Options()))
    planned_paths = {urlsplit(u.strip()).path for r in planned for u in r.url.split(",")}
    bound = min(sum(r.count for r in planned), Options().request.max_requests)
    sent = result.report["requests"]["sent"]
    assert sent == sum(by_path.values()) <= bound
    assert set(by_path) <= planned_paths, (by_path, planned_paths)
