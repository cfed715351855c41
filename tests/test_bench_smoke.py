"""Smoke test of the benchmark script: `bench/run.py --quick` runs and writes every section.

No timing is asserted (these machines are noisy; the numbers belong to the benchmark's own
report): only that the script runs end to end against the real simulator, curl and the log
scanner, and that its JSON holds each section with numbers in it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow  # the whole benchmark, quick, against real processes


@pytest.mark.skipif(shutil.which("curl") is None, reason="the fidelity section compares with curl")
def test_bench_quick_writes_every_section(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "run.py"), "--quick", "--output", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["settings"]["quick"] is True
    for section in ("fidelity", "overhead", "startup", "logscan"):
        assert section in result, section

    fidelity = result["fidelity"]["rows"]
    metrics = {row["metric"] for row in fidelity}
    assert {"stream ttft, from headers", "stream total, from headers", "non-stream ttft, from start"} <= metrics
    for row in fidelity:
        assert isinstance(row["llmdoctor_median_abs_error_ms"], float | int)
        assert isinstance(row["curl_median_abs_error_ms"], float | int)
        assert row["n"] == result["settings"]["fidelity_repeats"]

    overhead = result["overhead"]
    run = overhead["zero_latency_runs"][0]
    assert run["exit_code"] in (0, 1, 2)  # a diagnosis was made (3 would be a tool failure)
    assert run["requests_at_server"] > 0 and run["timed_requests_saved"] > 0
    healthy = overhead["healthy_run"]
    assert healthy["requests_at_server"] == healthy["requests_reported"] > 0  # the report counts what the server saw
    assert overhead["peak_rss_mb"] > 0 and overhead["own_cost_s"] > 0 and overhead["slow_ratio"] > 0

    startup = result["startup"]
    for name in ("python -c pass", "llmdoctor --help", "llmdoctor check --help", "llmdoctor checks"):
        assert startup[name]["median_ms"] > 0

    logscan = result["logscan"]
    assert "skipped" not in logscan, logscan.get("skipped")
    assert logscan["scanner"]["mb_per_s"] > 0 and logscan["grep"]["mb_per_s"] > 0
    assert isinstance(result["all_met"], bool)
    assert "all targets met" in done.stdout
