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
  ``--watch`` test once left its child polling for an hour.
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
from tests.rawserver import Handler, ScriptedServer

os.environ[STRICT_ENV] = "1"

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
