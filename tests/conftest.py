"""Test-suite settings: strict probe reads, and tests that do not depend on how pytest was started.

- Every probe read is checked against its reader's declaration (strict mode), set in the
  environment so the CLI run in-process and ``python -m llmdoctor`` subprocesses are strict too.
- Nothing is inherited that a test did not set: the proxy variables (``HTTP_PROXY`` and the rest,
  in both cases), an ``OPENAI_API_KEY``, ``COLUMNS``/``LINES``, ``NO_COLOR``/``FORCE_COLOR`` and
  ``LLMDOCTOR_DEBUG`` are removed from the environment of every test (a test sets them itself with
  ``monkeypatch.setenv`` or a subprocess's ``env``).
- SIGINT and SIGTERM have their default disposition in every test, even when whoever started pytest
  ignored them (``cmd &`` from a non-interactive script, ``nohup``, some CI runners): an ignored
  signal is inherited by every child, so a ``python -m llmdoctor`` sent Ctrl-C by its test would never
  see it. A handler (unlike "ignore") is reset to the default on ``exec``, so children start with
  the default too, whatever each test's ``Popen`` says.
- Every process a test started is stopped when the test ends, even when it failed: a failed
  ``--watch`` test once left its child polling for an hour. A SIGTERM to pytest (``timeout``) kills
  them before pytest dies (`tests.terminate`): no teardown runs then, and an orphaned vLLM once kept
  the next run's "quiet" host busy.
- A test that starts a real server, gateway, network namespace or busy host is marked ``slow``: the
  helpers that start them fail the test otherwise (`tests/tiers.py`).
- The fast tier, ``python -m pytest -m "not slow"``, runs on `tests.tiers.FAST_TIER_WORKERS` pytest-xdist workers
  when pytest-xdist is installed (the ``test`` extra) and no ``-n`` was given (``-n 0`` runs it in one
  process): most of its time is spent waiting on the simulators' latencies, not on the CPU. Every other
  selection, the full run included, stays in one process: the real-server tests share ports, CPUs and
  one lock per server kind, and their timings are measured against an otherwise quiet host.
"""

from __future__ import annotations

import os
import signal
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest

from llmdoctor.context import STRICT_ENV
from tests import terminate, tiers
from tests.rawserver import Handler, ScriptedServer

os.environ[STRICT_ENV] = "1"

@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """``-m "not slow"`` with no ``-n``: the fast tier on xdist workers (before xdist reads ``-n``)."""
    tiers.parallel_fast_tier(config)


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM (``timeout``, a runner's cancel) kills the processes the tests started first (`tests.terminate`)."""
    terminate.install()


@pytest.hookimpl(tryfirst=True)  # before an xdist worker reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests that read one shared live run go to one xdist worker (`tests.tiers.SHARED_RUNS`)."""
    tiers.group_shared_runs(config, items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Around each test (its fixtures included): is it ``slow``? (`tests.tiers.require_slow` asks.)"""
    tiers.CURRENT["slow"] = item.get_closest_marker("slow") is not None
    try:
        yield
    finally:
        tiers.CURRENT["slow"] = None


#: Variables a test must set itself if it wants them: the proxy routing (curl's and httpx's names, both
#: cases), a real API key, the terminal's size and colour wishes, the debug switch.
INHERITED_VARIABLES = (
    "http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
    "OPENAI_API_KEY", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "LLMDOCTOR_DEBUG",
)


@pytest.fixture(autouse=True)
def _no_inherited_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in INHERITED_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def _default_interrupts() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt and SIGTERM terminates, in this process and in its children."""
    restore = {}
    for sig, handler in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(sig) is signal.SIG_IGN:
            restore[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in restore.items():
            signal.signal(sig, old)


@pytest.fixture(autouse=True)
def _stop_leftover_processes() -> Iterator[None]:
    """Kill the processes a test started and left running (after its own fixtures stopped theirs)."""
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    yield
    leftovers = [p for p in me.children(recursive=True) if p.pid not in before]
    if not leftovers:
        return
    names = []
    for proc in leftovers:
        try:
            names.append(" ".join(proc.cmdline()[:6]))
            proc.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(leftovers, timeout=10)
    if names:
        warnings.warn(f"a test left {len(names)} process(es) running, now killed: {names}", stacklevel=1)


@pytest.fixture
def servers() -> Iterator[Callable[..., ScriptedServer]]:
    """Make scripted servers (`tests/rawserver.py`): ``servers(handler, **kwargs)``; all are stopped at teardown.

    A test module may define a `servers` fixture of its own (`tests/test_probe_contract.py` does).
    """
    made: list[ScriptedServer] = []

    def make(handler: Handler, **kwargs: Any) -> ScriptedServer:
        srv = ScriptedServer(handler, **kwargs)
        made.append(srv)
        return srv

    yield make
    for srv in made:
        srv.stop()
