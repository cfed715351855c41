"""The test tiers: the fast tier runs on xdist workers, and starts no real server (`tests/tiers.py`)."""

from __future__ import annotations

import shutil
from types import SimpleNamespace
from typing import Any

import pytest

from tests import tiers
from tests.gateways import Nginx
from tests.netpath import DelayedPath
from tests.processes import busy_loops


def _config(markexpr: str, numprocesses: int | None = None, *, xdist: bool = True, **more: Any) -> Any:
    option = SimpleNamespace(markexpr=markexpr, numprocesses=numprocesses, dist="no", collectonly=False,
                             usepdb=False, **more)
    return SimpleNamespace(option=option, pluginmanager=SimpleNamespace(hasplugin=lambda name: xdist))


def test_the_fast_tier_runs_on_workers_unless_told_otherwise() -> None:
    for markexpr in ("not slow", " not  slow "):
        config = _config(markexpr)
        tiers.parallel_fast_tier(config)
        assert (config.option.numprocesses, config.option.dist) == (tiers.FAST_TIER_WORKERS, "loadgroup")
    # -n 0 (one process), -n 2, another selection, the full run, no xdist, collecting, --pdb: as given.
    for config in (_config("not slow", 0), _config("not slow", 2), _config("slow"), _config(""),
                   _config("not slow and not vllm"), _config("not slow", xdist=False)):
        before = (config.option.numprocesses, config.option.dist)
        tiers.parallel_fast_tier(config)
        assert (config.option.numprocesses, config.option.dist) == before
    for more in ({"collectonly": True}, {"usepdb": True}):
        config = _config("not slow")
        vars(config.option).update(more)
        tiers.parallel_fast_tier(config)
        assert config.option.numprocesses is None
    worker = _config("not slow")
    worker.workerinput = {"workerid": "gw0"}
    tiers.parallel_fast_tier(worker)
    assert worker.option.numprocesses is None  # a worker runs its share in its own process


def test_a_fast_test_cannot_start_a_real_component() -> None:
    assert tiers.CURRENT["slow"] is False  # set by tests/conftest.py around this (unmarked) test
    nginx = Nginx([("127.0.0.1", 9)])
    try:
        for start in (nginx.start, DelayedPath(0.05).start, busy_loops().__enter__):
            with pytest.raises(pytest.fail.Exception, match="mark it @pytest.mark.slow"):
                start()
    finally:
        shutil.rmtree(nginx.dir, ignore_errors=True)


def test_the_tests_of_a_shared_live_run_share_a_worker(request: pytest.FixtureRequest) -> None:
    items = [SimpleNamespace(nodeid="tests/test_x.py::test_a", fixturenames=["tmp_path", "recordings", "rendered"],
                             marks=[], add_marker=None),
             SimpleNamespace(nodeid="tests/test_x.py::test_b", fixturenames=["capsys"], marks=[], add_marker=None)]
    for item in items:
        item.add_marker = item.marks.append
    tiers.group_shared_runs(request.config, items)
    assert [m.kwargs.get("name", m.args[0] if m.args else None) for m in items[0].marks] == \
        ["tests/test_x.py::recordings"]
    assert items[1].marks == []  # the others go one by one to whichever worker is free


@pytest.mark.slow
def test_a_slow_test_may() -> None:
    assert tiers.CURRENT["slow"] is True
    tiers.require_slow("a real nginx")  # no failure
