"""Start and stop a real llama.cpp server (llama-cpp-python's ``python -m llama_cpp.server``).

Used by the integration tests and by benchmark scripts::

    from tests.llamacpp_server import LlamaCppServer, llamacpp_available

    ok, reason = llamacpp_available()
    with LlamaCppServer("tiny.gguf", log_path="server.log") as server:
        httpx.get(server.base_url + "/models")

The server listens on a free loopback port; its stdout and stderr go to a log file (the llama.cpp
load log and uvicorn's access log), which :attr:`LlamaCppServer.log_path` names.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

import httpx

DEFAULT_CTX = 4096
READY_TIMEOUT_S = 120.0


def llamacpp_available() -> tuple[bool, str]:
    """Return ``(True, version)`` when llama-cpp-python and its server extra import, else ``(False, why)``."""
    try:
        import llama_cpp
    except ModuleNotFoundError as exc:
        if exc.name not in (None, "llama_cpp"):
            return False, f"llama_cpp cannot be imported: {exc}"
        return False, "llama-cpp-python is not installed (pip install 'llama-cpp-python[server]')"
    except Exception as exc:  # a broken build fails at import (missing shared library...)
        return False, f"llama_cpp cannot be imported: {type(exc).__name__}: {exc}"
    missing = [m for m in ("fastapi", "uvicorn", "sse_starlette", "pydantic_settings")
               if importlib.util.find_spec(m) is None]
    if missing:
        return False, f"llama-cpp-python's [server] extra is missing: {', '.join(missing)}"
    return True, str(getattr(llama_cpp, "__version__", "unknown"))


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class LlamaCppServerError(RuntimeError):
    """The server exited or did not become ready in time; the message ends with its log's tail."""


class LlamaCppServer:
    """A ``llama_cpp.server`` subprocess on a free loopback port, usable as a context manager.

    :meth:`start` launches it and waits until ``GET /v1/models`` answers 200 (or raises
    :class:`LlamaCppServerError` with the tail of the log). :meth:`stop` terminates it, then kills it
    after ``stop_timeout_s``. Attributes: :attr:`url` (``http://127.0.0.1:P``), :attr:`base_url`
    (``…/v1``), :attr:`log_path`, :attr:`pid`, :attr:`started_at` (``time.time()`` at launch),
    :attr:`ready_at` (when it first answered) and :attr:`startup_s`.
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        n_ctx: int = DEFAULT_CTX,
        n_threads: int | None = None,
        model_alias: str | None = None,
        log_path: str | os.PathLike[str] | None = None,
        ready_timeout_s: float = READY_TIMEOUT_S,
        stop_timeout_s: float = 5.0,
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.model = Path(model)
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.n_ctx = n_ctx
        self.n_threads = n_threads if n_threads is not None else max(1, os.cpu_count() or 1)
        self.model_alias = model_alias
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.extra_args = list(extra_args)
        self.env = env
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix="llamacpp-server-", suffix=".log")
            os.close(fd)
            log_path = name
        self.log_path = Path(log_path)
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None
        self.ready_at: float | None = None
        self._log_file: IO[bytes] | None = None

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
        """Process id of the server, or None before :meth:`start`."""
        return self.process.pid if self.process is not None else None

    @property
    def startup_s(self) -> float | None:
        """Seconds from launch until the server first answered ``/v1/models``."""
        if self.started_at is None or self.ready_at is None:
            return None
        return self.ready_at - self.started_at

    @property
    def model_id(self) -> str:
        """The model id the server reports in ``/v1/models`` (its alias, else the model path given)."""
        return self.model_alias or str(self.model)

    def command(self) -> list[str]:
        """The command line that :meth:`start` runs."""
        cmd = [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(self.model),
            "--host", self.host,
            "--port", str(self.port),
            "--n_ctx", str(self.n_ctx),
            "--n_threads", str(self.n_threads),
            "--n_threads_batch", str(self.n_threads),
        ]
        if self.model_alias:
            cmd += ["--model_alias", self.model_alias]
        return cmd + self.extra_args

    def start(self) -> LlamaCppServer:
        """Launch the server and block until it is ready; return self."""
        if self.process is not None:
            raise RuntimeError("server already started")
        if not self.model.is_file():
            raise FileNotFoundError(self.model)
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
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        assert self.process is not None
        with httpx.Client(timeout=2.0) as client:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise LlamaCppServerError(
                        f"llama_cpp.server exited with code {code} before it was ready\n{self.log_tail()}"
                    )
                try:
                    if client.get(self.base_url + "/models").status_code == 200:
                        self.ready_at = time.time()
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise LlamaCppServerError(
                        f"llama_cpp.server not ready after {self.ready_timeout_s:.0f} s\n{self.log_tail()}"
                    )
                time.sleep(0.1)

    def log_text(self) -> str:
        """The whole server log so far (decoded leniently)."""
        try:
            return self.log_path.read_bytes().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server log."""
        return "\n".join(self.log_text().splitlines()[-lines:])

    def stop(self) -> int | None:
        """Terminate the server (SIGTERM, then SIGKILL after ``stop_timeout_s``); return its exit code."""
        code: int | None = None
        proc = self.process
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=self.stop_timeout_s)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=self.stop_timeout_s)
            code = proc.returncode
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return code

    def __enter__(self) -> LlamaCppServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
