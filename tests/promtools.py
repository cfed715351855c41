"""Finding and running the real Prometheus tools (Debian's ``prometheus`` and ``prometheus-pushgateway``).

A test that needs one calls `require_tool`: without the binary it is skipped with the true reason,
unless ``LLMDOCTOR_REQUIRE_PROMETHEUS=1`` (set by ``.ci/run``), where it fails instead, so a missing
package cannot pass CI silently. `Daemon` runs a server in its own process group on loopback and
kills the whole group when done.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.tiers import require_slow

REQUIRE_ENV = "LLMDOCTOR_REQUIRE_PROMETHEUS"
# Debian names first, then the upstream release names.
_NAMES = {"prometheus": ("prometheus",), "promtool": ("promtool",),
          "pushgateway": ("prometheus-pushgateway", "pushgateway")}

T = TypeVar("T")


def require_tool(tool: str) -> str:
    """The path of `tool` (``prometheus``, ``promtool``, ``pushgateway``); skips or fails when missing."""
    for name in _NAMES[tool]:
        found = shutil.which(name)
        if found:
            return found
    reason = (f"{' or '.join(_NAMES[tool])} not on PATH "
              "(apt-get install prometheus prometheus-pushgateway; .ci/run does)")
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str, timeout_s: float = 5.0) -> Any:
    """GET `url` and decode its JSON answer."""
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - loopback test servers
        return json.loads(resp.read())


def poll(what: str, probe: Callable[[], tuple[T | None, str]], timeout_s: float, interval_s: float = 0.25) -> T:
    """Call `probe` until it returns a value (not None) or `timeout_s` passes; fail with the last thing seen.

    `probe` returns (value or None, a description of what it saw).
    """
    deadline = time.monotonic() + timeout_s
    seen = "nothing yet"
    while True:
        try:
            value, seen = probe()
        except (OSError, ValueError) as exc:
            value, seen = None, f"{type(exc).__name__}: {exc}"
        if value is not None:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not seen within {timeout_s:.0f} s; last seen: {seen}", pytrace=False)
        time.sleep(interval_s)


class Daemon:
    """A server process in its own process group, with its output in a log file."""

    def __init__(self, name: str, argv: Sequence[str], log: Path, ready_url: str) -> None:
        self.name, self.argv, self.log_path, self.ready_url = name, list(argv), log, ready_url
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30.0) -> Daemon:
        """Start it and wait (bounded) until `ready_url` answers 200."""
        require_slow(f"a real {self.name}")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

        def ready() -> tuple[bool | None, str]:
            assert self.proc is not None
            if self.proc.poll() is not None:
                pytest.fail(f"{self.name} exited with {self.proc.returncode}: {self.log_tail()}", pytrace=False)
            try:
                with urllib.request.urlopen(self.ready_url, timeout=2) as resp:  # noqa: S310 - loopback
                    return (True if resp.status == 200 else None), f"HTTP {resp.status}"
            except urllib.error.URLError as exc:
                return None, str(exc.reason)

        poll(f"{self.name} ready at {self.ready_url}", ready, timeout_s)
        return self

    def __enter__(self) -> Daemon:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, lines: int = 15) -> str:
        try:
            return " | ".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Kill the process group (SIGTERM, then SIGKILL after 10 s) and reap it."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        except ProcessLookupError:
            pass
