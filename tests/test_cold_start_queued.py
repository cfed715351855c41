"""A first request that queued behind other traffic on a warm server is no cold start (issue 26 item 4).

Replays ``fixtures/vllm/queue_clocked_first_queued.measurements.json``: a real vLLM 0.32 with
``--max-num-seqs 1 --enable-per-request-metrics`` behind two background streams, checked with a busy
loop per core (see ``fixtures/vllm/README.md``). Its first request took 3,838 ms to the first token,
1,568 ms of it in vLLM's queue by the request's own ``metrics.queue_time_ms``; the warm "Say ok."
took 38-67 ms; the log's start-up (``queue_clocked_startup.log``) had ended 141 s before. Before, LD301
counted the whole 3,791 ms as a cold start and LD303 called that start "met by this run" (a warning).
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmdoctor.checklist.registry import load_registry
from llmdoctor.context import Context
from llmdoctor.logs.engine import log_stamp_epoch
from llmdoctor.options import Options
from llmdoctor.runner import run_one
from llmdoctor.target import Target

V = Path(__file__).resolve().parent.parent / "fixtures" / "vllm"
RECORDED: dict[str, Any] = json.loads((V / "queue_clocked_first_queued.measurements.json").read_text())["measurements"]
LOG = "queue_clocked_startup.log"
REGISTRY = load_registry()


@pytest.fixture(autouse=True)
def utc() -> Iterator[None]:
    """The recording's machine logged in UTC: read the log's stamps in that zone."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TZ", "UTC")
    time.tzset()
    yield
    mp.undo()
    time.tzset()


def _run(check_id: str, measurements: dict[str, Any], logs: tuple[str, ...] = ()) -> Any:
    check = REGISTRY.by_id(check_id)
    assert check is not None
    ctx = Context(target=Target(base_url="http://127.0.0.1:9/v1"),
                  options=Options.of(logs=tuple(str(V / name) for name in logs)), recorded=measurements,
                  replay_local=True)
    return run_one(check, ctx)


def _first(measurements: dict[str, Any]) -> dict[str, Any]:
    first: dict[str, Any] = measurements["first_request"]
    return first


def _queue_clock(measurements: dict[str, Any]) -> float:
    return float(next(c["ms"] for c in _first(measurements)["server_clocks"] if c["source"] == "metrics.queue_time_ms"))


def _without_clocks(measurements: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(measurements)
    _first(out)["server_clocks"] = []
    return out


def _penalty_ms(measurements: dict[str, Any]) -> float:
    base = [t["ttft_ms"] for t in measurements["baseline"]["samples"] if t.get("status") == 200]
    first = _first(measurements)
    return float(first["ttft_ms"] - first.get("setup_ms", 0.0) - sorted(base)[len(base) // 2])


def test_ld301_does_not_count_the_first_requests_own_queue_time_as_a_cold_start() -> None:
    queued = _queue_clock(RECORDED)
    assert queued > 1000  # the case: the first request waited behind the background streams
    (finding,) = _run("LD301", RECORDED).findings
    assert finding.impact_ms == pytest.approx(_penalty_ms(RECORDED) - queued, abs=1)
    assert "queue by its own clock" in finding.message
    # control: the same request without the server's clock is charged its whole extra wait
    (charged,) = _run("LD301", _without_clocks(RECORDED)).findings
    assert charged.impact_ms == pytest.approx(_penalty_ms(RECORDED), abs=1)


def test_ld303_a_start_up_that_ended_before_the_run_is_info_whatever_the_first_request_paid() -> None:
    (finding,) = _run("LD303", RECORDED, logs=(LOG,)).findings
    assert finding.severity.value == "info" and "A past start-up" in finding.message, finding.message
    # control: the same slow first request sent while that start was under way met it
    text = (V / LOG).read_text()
    ready_line = next(line for line in text.splitlines() if "Starting vLLM server on" in line)
    ready = log_stamp_epoch(ready_line.split(" INFO ")[1][:14], time.time())
    assert ready is not None
    during = copy.deepcopy(RECORDED)
    _first(during)["started_at"] = ready - 1.0
    (met,) = _run("LD303", during, logs=(LOG,)).findings
    assert met.severity.value == "warning" and "This run met a cold server" in met.message, met.message
