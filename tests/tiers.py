"""The fast tier stays fast: a real server, gateway, network namespace or busy host runs only in a ``slow`` test.

`tests/conftest.py` records, around each test, whether it is marked ``slow``; every helper that starts a
real component (`tests/gateways.py`'s nginx, haproxy and tinyproxy, `tests/server_process.py`'s llama.cpp
and vLLM, `tests/promtools.py`'s Prometheus daemons, `tests/netpath.py`'s namespaces, the busy loops of
`tests/processes.py`) calls `require_slow` first, so a test that starts one without the marker fails with
the reason instead of slowing ``python -m pytest -m "not slow"`` down unnoticed.

`parallel_fast_tier` runs that tier on `FAST_TIER_WORKERS` pytest-xdist workers when no ``-n`` was given,
and `group_shared_runs` keeps the tests that read one shared live run on one of them.
"""

from __future__ import annotations

from typing import Any

import pytest

#: Workers of the fast tier. On 2 shared cores most of its time is spent waiting on the simulators'
#: latencies (~77 % of a serial run), so more workers than cores still pay.
FAST_TIER_WORKERS = 4
FAST_TIER_MARKEXPR = "not slow"
#: Module- and session-scoped fixtures that run the simulator live (a whole checklist, or every profile)
#: for the tests of their module to read: the tests that use one run on one worker (an ``xdist_group``),
#: so it runs once, not once per worker. Each costs 7-42 s; the first found in a test's fixtures names
#: its group.
SHARED_RUNS = ("runs", "recordings", "recording", "all_probes_requests")

#: Whether the running test is marked ``slow``; None outside a test (a helper run by hand, a benchmark).
CURRENT: dict[str, bool | None] = {"slow": None}


def require_slow(what: str) -> None:
    """Fail the running test when it is not marked ``slow``: it is about to start `what`."""
    if CURRENT["slow"] is False:
        pytest.fail(f"this test starts {what}: mark it @pytest.mark.slow (the fast tier, -m 'not slow', "
                    "starts no real server, gateway, namespace or busy host)", pytrace=False)


def parallel_fast_tier(config: Any) -> None:
    """``-m "not slow"`` and no ``-n``: run on `FAST_TIER_WORKERS` xdist workers (``-n 0``: one process).

    Nothing changes in an xdist worker, without pytest-xdist, for any other selection (the full run
    included: its real-server tests share ports, CPUs and one lock per server kind), when collecting only
    or under ``--pdb``. `config` is the `pytest.Config` of ``pytest_cmdline_main``, before xdist reads it.
    """
    option = config.option
    if (hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("xdist")
            or getattr(option, "numprocesses", 0) is not None
            or " ".join(str(getattr(option, "markexpr", "")).split()) != FAST_TIER_MARKEXPR
            or getattr(option, "collectonly", False) or getattr(option, "usepdb", False)):
        return
    option.numprocesses = FAST_TIER_WORKERS
    if getattr(option, "dist", "no") == "no":
        option.dist = "loadgroup"  # one test at a time to the next free worker, a group to one worker


def group_shared_runs(config: Any, items: list[Any]) -> None:
    """Mark each test that uses one of `SHARED_RUNS` ``xdist_group("<module>::<fixture>")`` (with xdist only)."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        names = getattr(item, "fixturenames", ())
        shared = next((name for name in SHARED_RUNS if name in names), None)
        if shared is not None:
            item.add_marker(pytest.mark.xdist_group(f"{item.nodeid.split('::')[0]}::{shared}"))
