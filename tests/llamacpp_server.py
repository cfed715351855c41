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

import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.server_process import ServerProcess, ServerProcessError, free_port

__all__ = ["DEFAULT_CTX", "LlamaCppServer", "LlamaCppServerError", "free_port", "llamacpp_available"]

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


class LlamaCppServerError(ServerProcessError):
    """The server exited or did not become ready in time; the message ends with its log's tail."""


class LlamaCppServer(ServerProcess):
    """A ``llama_cpp.server`` subprocess on a free loopback port, usable as a context manager.

    :meth:`start` launches it and waits until ``GET /v1/models`` answers 200 (or raises
    :class:`LlamaCppServerError` with the tail of the log). :meth:`stop` terminates it, then kills it
    after ``stop_timeout_s``. Attributes: :attr:`url` (``http://127.0.0.1:P``), :attr:`base_url`
    (``…/v1``), :attr:`log_path`, :attr:`pid`, :attr:`started_at` (``time.time()`` at launch),
    :attr:`ready_at` (when it first answered) and :attr:`startup_s`.
    """

    label = "llama_cpp.server"
    error_class = LlamaCppServerError

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
        super().__init__(host=host, port=port, log_path=log_path, ready_timeout_s=ready_timeout_s,
                         stop_timeout_s=stop_timeout_s, extra_args=extra_args, env=env)
        self.model = Path(model)
        self.n_ctx = n_ctx
        self.n_threads = n_threads if n_threads is not None else max(1, os.cpu_count() or 1)
        self.model_alias = model_alias

    @property
    def model_id(self) -> str:
        """The model id the server reports in ``/v1/models`` (its alias, else the model path given)."""
        return self.model_alias or str(self.model)

    def check_launchable(self) -> None:
        if not self.model.is_file():
            raise FileNotFoundError(self.model)

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
