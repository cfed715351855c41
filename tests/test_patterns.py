"""Patterns compile on use: `LazyPattern` behaves as the compiled pattern; the scanners compile nothing at import."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from llmdoctor.logs.patterns import LazyPattern

ROOT = Path(__file__).resolve().parent.parent


def test_a_lazy_pattern_answers_as_the_compiled_one() -> None:
    source, text = r"(?P<word>[a-z]+)-(\d+)", "ab-1 cd-22 EF-3 gh-"
    for flags in (0, re.IGNORECASE):
        lazy, compiled = LazyPattern(source, flags), re.compile(source, flags)
        assert lazy.findall(text) == compiled.findall(text)
        assert [m.span() for m in lazy.finditer(text, 2)] == [m.span() for m in compiled.finditer(text, 2)]
        assert lazy.sub("<\\g<word>>", text) == compiled.sub("<\\g<word>>", text)
        assert lazy.subn(lambda m: m.group(2), text, 1) == compiled.subn(lambda m: m.group(2), text, 1)
        assert lazy.split(text, 2) == compiled.split(text, 2)
        for method in ("search", "match", "fullmatch"):
            mine, theirs = getattr(lazy, method)(text, 5, 9), getattr(compiled, method)(text, 5, 9)
            assert (mine and mine.group(0)) == (theirs and theirs.group(0)), method


def test_a_lazy_pattern_compiles_once_then_uses_the_compiled_methods() -> None:
    lazy = LazyPattern(r"x+", re.IGNORECASE)
    assert "compiled" not in vars(lazy) and repr(lazy) == "LazyPattern('x+', re.IGNORECASE)"
    assert lazy.search("aXXb") is not None
    compiled = lazy.compiled()
    assert compiled.flags & re.IGNORECASE and compiled is lazy.compiled()
    assert lazy.search == compiled.search and lazy.sub == compiled.sub  # bound methods of the compiled pattern


_COUNT_COMPILES = """
import json, re, sys
calls = []
original = re.compile
def counting(pattern, flags=0):
    calls.append(sys._getframe(1).f_globals.get("__name__", "?"))
    return original(pattern, flags)
re.compile = counting
import llmdoctor.logs.scan, llmdoctor.logs.engine, llmdoctor.redact, llmdoctor.inputs.textscan
print(json.dumps([c for c in calls if c.startswith("llmdoctor")]))
"""


def test_the_scanners_compile_no_pattern_at_import() -> None:
    done = subprocess.run([sys.executable, "-c", _COUNT_COMPILES], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_the_scanners_still_find_what_they_found() -> None:
    from llmdoctor.inputs.textscan import clean, scan
    from llmdoctor.logs.scan import GPU_OOM, classify_line, clean_line, mask_secrets

    line = "\x1b[31mINFO 06-02 00:51:39 [x.py:1] torch.OutOfMemoryError: CUDA out of memory\x1b[0m"
    message, stamp = clean_line(line)
    assert classify_line(message) == (GPU_OOM, "cuda-oom") and stamp == "06-02 00:51:39"
    assert "abcdefghijkl" not in mask_secrets("Authorization: Bearer abcdefghijkl")
    assert {r.kind for r in scan("a\u200bb" + "=" * 50)} == {"zero_width", "repeated_run"}
    assert clean("a\u200bb") == "ab"
