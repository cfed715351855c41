"""Time linting a JSONL of 1,000 logged requests with the input and parameter checks (no tokenizer).

    python bench/requests_lint.py [N]

Prints the wall time of reading + normalising + scanning + running LD1xx/LD6xx, without an
endpoint (no requests are sent) and without a tokenizer (token counts are estimates).
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from importlib.metadata import entry_points
from pathlib import Path

from llmdoctor.context import Context
from llmdoctor.options import Options
from llmdoctor.probes.catalog import REQUESTS
from llmdoctor.runner import run_checks


def main(n: int = 1000) -> None:
    rng = random.Random(1)
    words = "the river stone garden window paper light music forest winter summer table".split()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "logged.jsonl"
        with path.open("w") as f:
            for i in range(n):
                text = " ".join(rng.choice(words) for _ in range(rng.randint(20, 400)))
                if i % 20 == 0:
                    text += " caf\u00c3\u00a9\u200b" + " " * 40
                f.write(json.dumps({"messages": [{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": text}],
                                    "max_tokens": 256, "stream": True}) + "\n")
        checks = [e.load() for e in entry_points(group="llmdoctor.checks") if e.name[:3] in ("LD1", "LD6")]
        started = time.perf_counter()
        ctx = Context(target=None, options=Options.of(request_files=(str(path),), context_window=8192))
        outcomes = run_checks(checks, ctx)
        elapsed = time.perf_counter() - started
    size = sum(1 for _ in ctx.get(REQUESTS).requests)
    print(f"linted {size} requests with {len(checks)} checks in {elapsed * 1000:.0f} ms")
    for o in outcomes:
        print(f"  {o.check_id} {o.status:8} {o.duration_ms:7.1f} ms  {[f.title for f in o.findings]}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
