"""A real server as a subprocess for the tests: free loopback port, log file, bounded readiness wait.

`ServerProcess` is the shared part of `tests.llamacpp_server.LlamaCppServer` and
`tests.vllm_server.VllmServer`: a subclass says which command to run (:meth:`ServerProcess.command`);
this class launches it in its own session (so that its children form one process group), sends
stdout and stderr to a log file, polls ``GET <ready_path>`` until it answers 200 or the deadline
passes, and stops the whole group: SIGTERM, then SIGKILL after ``stop_timeout_s``.

:meth:`ServerProcess.launch` returns at once (the start-up window is observable: a test can probe
the port while the server loads); :meth:`ServerProcess.wait_ready` blocks; :meth:`ServerProcess.start`
does both.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, TypeVar

import httpx

from tests.tiers import require_slow

S = TypeVar("S", bound="ServerProcess")


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class ServerProcessError(RuntimeError):
    """The server exited or did not become ready in time; the message ends with its log's tail."""


class ServerProcess:
    """A server subprocess on a loopback port, usable as a context manager.

    Attributes: :attr:`url` (``http://127.0.0.1:P``), :attr:`base_url` (``…/v1``), :attr:`log_path`,
    :attr:`pid`, :attr:`started_at` (``time.time()`` at launch), :attr:`ready_at` (when it first
    answered) and :attr:`startup_s`.
    """

    label = "server"
    ready_path = "/v1/models"
    error_class: type[ServerProcessError] = ServerProcessError

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        log_path: str | os.PathLike[str] | None = None,
        ready_timeout_s: float = 120.0,
        stop_timeout_s: float = 5.0,
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.extra_args = list(extra_args)
        self.env = env
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix=f"{self.label}-", suffix=".log")
            os.close(fd)
            log_path = name
        self.log_path = Path(log_path)
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None
        self.ready_at: float | None = None
        self._log_file: IO[bytes] | None = None

    # -- what subclasses provide ----------------------------------------------------------------
    def command(self) -> list[str]:
        """The command line that :meth:`launch` runs."""
        raise NotImplementedError

    def check_launchable(self) -> None:
        """Raise before launching when something the command needs is missing."""

    # -- addresses --------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """Root URL of the server, e.g. ``http://127.0.0.1:8123``."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """OpenAI-compatible base URL, e.g. ``http://127.0.0.1:8123/v1``."""
        return self.url + "/v1"

    @property
    def pid(self) -> int | None:
        """Process id of the server, or None before :meth:`launch`."""
        return self.process.pid if self.process is not None else None

    @property
    def startup_s(self) -> float | None:
        """Seconds from launch until the server first answered :attr:`ready_path`."""
        if self.started_at is None or self.ready_at is None:
            return None
        return self.ready_at - self.started_at

    # -- life cycle -------------------------------------------------------------------------------
    def launch(self: S) -> S:
        """Start the process and return at once (it is not ready yet)."""
        if self.process is not None:
            raise RuntimeError(f"{self.label} already started")
        require_slow(self.label)
        self.check_launchable()
        self._log_file = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.started_at = time.time()
        self.process = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(self.env or {})},
            start_new_session=True,
        )
        return self

    def wait_ready(self: S) -> S:
        """Block until :attr:`ready_path` answers 200; stop the server and raise if it never does."""
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def start(self: S) -> S:
        """Launch the server and block until it is ready; return self."""
        self.launch()
        return self.wait_ready()

    def _wait_ready(self) -> None:
        assert self.process is not None and self.started_at is not None
        deadline = self.started_at + self.ready_timeout_s
        with httpx.Client(timeout=2.0) as client:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise self.error_class(
                        f"{self.label} exited with code {code} before it was ready\n{self.log_tail()}"
                    )
                try:
                    if client.get(self.url + self.ready_path).status_code == 200:
                        self.ready_at = time.time()
                        return
                except httpx.TransportError:
                    pass
                if time.time() > deadline:
                    raise self.error_class(
                        f"{self.label} not ready after {self.ready_timeout_s:.0f} s\n{self.log_tail()}"
                    )
                time.sleep(0.1)

    def stop(self) -> int | None:
        """Stop the whole process group (SIGTERM, then SIGKILL after ``stop_timeout_s``); return the exit code."""
        code: int | None = None
        proc = self.process
        if proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=self.stop_timeout_s)
                except subprocess.TimeoutExpired:
                    pass
            # Children (vLLM's engine core and worker) may outlive the leader: kill what is left.
            if _group_alive(proc.pid):
                deadline = time.monotonic() + self.stop_timeout_s
                while _group_alive(proc.pid) and time.monotonic() < deadline:
                    time.sleep(0.1)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            if proc.poll() is None:
                proc.wait(timeout=self.stop_timeout_s)
            code = proc.returncode
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return code

    # -- the log ----------------------------------------------------------------------------------
    def log_text(self) -> str:
        """The whole server log so far (decoded leniently)."""
        try:
            return self.log_path.read_bytes().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server log."""
        return "\n".join(self.log_text().splitlines()[-lines:])

    def __enter__(self: S) -> S:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    """True while any process of the process group `pgid` exists (zombies included)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
