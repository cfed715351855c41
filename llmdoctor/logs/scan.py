"""Streaming scanner for inference-server logs: OOMs, CUDA errors, KV pressure, context overflow, load times.

`LogScanner` reads binary streams in large blocks and keeps constant memory whatever the size of the
log. It is built for speed on large files:

1. a *gate*: a handful of literal anchors (``memmem`` / ``bytes.find`` run at memory speed in C) picks
   the few candidate lines of a block; everything else is never decoded;
2. only candidate lines are decoded (invalid UTF-8 replaced), cleaned (`llmdoctor.logs.clean`: ANSI
   codes, docker / journald / syslog / vLLM / Ray prefixes, JSON-per-line records) and classified by
   per-class regular expressions (`llmdoctor.logs.rules`);
3. engine stats lines (vLLM's periodic stats, SGLang's scheduler lines) that pass the gate are read
   for preemptions and for a saturated KV cache with requests waiting (`llmdoctor.logs.engine`);
4. a Python traceback is one event: from its header the scanner reads the block line by line
   and classifies it by its exception line (the last line of the block).

What is recognised, per backend and class, is the labelled corpus of real lines in
``fixtures/logs/corpus`` (``tests/test_log_corpus.py`` is the gate: a speed change that loses one line
fails it). Harmless warnings (vLLM's tokenizer "Special tokens have been added", ``FutureWarning`` and
other deprecation notices, usage-stats notices) are never reported. Hugging Face's "Token indices
sequence length is longer than the specified maximum ..." is *not* harmless: it means a prompt longer
than the tokenizer's maximum was tokenized, so it counts as context overflow.

The names below the scanner (classes, `LogScan`, `clean_line`, ...) are re-exported from the modules
that hold them, so ``from llmdoctor.logs.scan import ...`` keeps working for the checks.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Iterable
from typing import IO

from llmdoctor.logs.clean import MASK, clean_line, mask_secrets
from llmdoctor.logs.engine import (
    READY,
    SATURATED_KV_PCT,
    SATURATED_TOKEN_USAGE,
    START_MARKER,
    EngineStats,
    parse_stats_line,
    saturated,
    sglang_saturation,
    stamp_seconds,
)
from llmdoctor.logs.patterns import LazyPattern
from llmdoctor.logs.result import LoadDuration, LogFile, LogHit, LogScan
from llmdoctor.logs.rules import (
    BURST_CLASSES,
    BURST_LINES,
    CLASSES,
    CONTEXT_OVERFLOW,
    DURATIONS,
    GATE_ANCHORS,
    GPU_ERROR,
    GPU_OOM,
    HOST_OOM,
    KV_PREEMPTION,
    LLAMACPP_ELAPSED,
    MODEL_LOAD,
    classify_line,
    guess_backend,
)

__all__ = [
    "CLASSES",
    "MASK",
    "GPU_OOM",
    "HOST_OOM",
    "GPU_ERROR",
    "KV_PREEMPTION",
    "CONTEXT_OVERFLOW",
    "MODEL_LOAD",
    "GATE_ANCHORS",
    "LoadDuration",
    "LogFile",
    "LogHit",
    "LogScan",
    "LogScanner",
    "classify_line",
    "clean_line",
    "mask_secrets",
    "scan_lines",
]

MAX_HITS_KEPT = 20  # per class: the first 10 and the last 10
MAX_LINE_CHARS = 300  # evidence lines are cut to this
MAX_SCAN_LINE = 64 * 1024  # longer lines are classified on their first 64 KiB
BLOCK = 4 * 1024 * 1024
MAX_TRACEBACK_LINES = 400
_TRACEBACK = b"Traceback (most recent call last)"
_SATURATED = "kv-saturated"  # kind of a stats line with the KV cache full and requests waiting


@functools.cache
def _memmem() -> Callable[..., int | None] | None:
    """The C library's ``memmem`` (glibc's is 2-6x faster than ``bytes.find``), or None.

    Loaded on the first scan, not at import: ctypes and ``find_library`` (which runs
    ``ldconfig``) cost every ``llmdoctor`` start ~10 ms otherwise.
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        memmem = libc.memmem
    except (OSError, AttributeError):
        return None
    memmem.restype = ctypes.c_void_p
    memmem.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    probe = b"xx needle yy"
    base = ctypes.cast(ctypes.c_char_p(probe), ctypes.c_void_p).value or 0
    hit = memmem(base, len(probe), b"needle", 6)
    return memmem if hit is not None and hit - base == 3 else None


# --- the scanner -------------------------------------------------------------------------
# --- the scanner -------------------------------------------------------------------------
class _ClassHits:
    """Bounded hit store of one class: the first half and the last half of `MAX_HITS_KEPT`."""

    def __init__(self) -> None:
        self.count = 0
        self.kinds: dict[str, int] = {}
        self.first: list[LogHit] = []
        self.last: deque[LogHit] = deque(maxlen=MAX_HITS_KEPT // 2)
        self.last_file = ""
        self.last_line = -(10**9)

    def add(self, hit: LogHit) -> None:
        self.count += 1
        self.kinds[hit.kind] = self.kinds.get(hit.kind, 0) + 1
        if len(self.first) < MAX_HITS_KEPT // 2:
            self.first.append(hit)
        else:
            self.last.append(hit)

    def hits(self) -> list[LogHit]:
        return self.first + list(self.last)



class LogScanner:
    """Scan log streams into one `LogScan`; feed sources with `scan_stream`, then `result()`.

    `since_filter` (optional) takes a timestamp string and returns False for events to drop
    (older than ``--since``).
    """

    def __init__(self, since: str | None = None, since_filter: object | None = None) -> None:
        self._classes: dict[str, _ClassHits] = {c: _ClassHits() for c in CLASSES}
        self._loads: deque[LoadDuration] = deque(maxlen=200)
        self._files: list[LogFile] = []
        self._backends: dict[str, int] = {}
        self._since = since
        self._since_filter = since_filter
        self._skipped = 0
        self._engine_stats = EngineStats()
        self._start_marks: dict[str, tuple[str, int]] = {}  # file -> (stamp, line) of a start's first line
        self._counted: tuple[int, int] | None = None  # after `_scan_body`: (offset, lines before it) it counted

    # -- public ---------------------------------------------------------------------------
    def scan_stream(self, stream: IO[bytes], name: str) -> LogFile:
        """Read a binary stream to its end and record what it contains.

        Reads into one fixed buffer (`BLOCK` plus room for a partial last line), so memory
        stays flat whatever the size of the log.
        """
        info = LogFile(name)
        self._files.append(info)
        carry_max = MAX_SCAN_LINE * 4
        buf = bytearray(BLOCK + carry_max)
        view = memoryview(buf)
        filled = 0  # bytes of an unfinished line kept at the front of `buf`
        line_base = 0  # complete lines before `buf`
        in_giant = False  # inside a line longer than the buffer, whose parts were scanned already
        pending_tb: list[tuple[int, str, str | None, str]] | None = None
        readinto = getattr(stream, "readinto", None)
        try:
            while True:
                if readinto is not None:
                    n = readinto(view[filled : filled + BLOCK]) or 0
                else:
                    chunk = stream.read(BLOCK)
                    n = len(chunk)
                    buf[filled : filled + n] = chunk
                if not n:
                    break
                info.bytes += n
                size = filled + n
                cut = buf.rfind(b"\n", 0, size) + 1
                if cut == 0:
                    if size <= carry_max:
                        filled = size
                        continue
                    # a giant line: scan what we have as a part of it, keep nothing
                    pending_tb = self._scan_body(bytes(view[:size]) + b"\n", line_base, name, pending_tb)
                    filled, in_giant = 0, True
                    continue
                in_giant = False
                pending_tb = self._scan_body(buf, line_base, name, pending_tb, cut)
                # the lines before the last candidate were counted on the way: count only the rest
                counted = self._counted
                line_base += counted[1] + buf.count(b"\n", counted[0], cut) if counted else buf.count(b"\n", 0, cut)
                filled = size - cut
                buf[:filled] = view[cut:size]
            if filled:
                pending_tb = self._scan_body(bytes(view[:filled]) + b"\n", line_base, name, pending_tb)
            if filled or in_giant:
                line_base += 1
        finally:
            view.release()
        if pending_tb:
            self._emit_traceback(pending_tb, name)
        info.lines = line_base
        return info

    def add_error(self, name: str, error: str) -> None:
        """Record a source that could not be read."""
        self._files.append(LogFile(name, error=error))

    def replace_with_error(self, info: LogFile, error: str) -> None:
        """Replace a source already scanned (`info`, e.g. an empty journal) by an error entry under its name."""
        self._files.remove(info)
        self.add_error(info.name, error)

    def result(self) -> LogScan:
        """The scan so far, as a plain result."""
        return LogScan(
            files=list(self._files),
            lines_read=sum(f.lines for f in self._files),
            bytes_read=sum(f.bytes for f in self._files),
            counts={c: h.count for c, h in self._classes.items() if h.count},
            kind_counts={f"{c}:{k}": n for c, h in self._classes.items() for k, n in sorted(h.kinds.items())},
            hits={c: h.hits() for c, h in self._classes.items() if h.count},
            load_durations=list(self._loads),
            backends=dict(self._backends),
            since=self._since,
            skipped_before_since=self._skipped,
            engine_stats=self._engine_stats,
        )

    # -- internals ------------------------------------------------------------------------
    def _scan_body(
        self,
        body: bytes | bytearray,
        line_base: int,
        name: str,
        pending_tb: list[tuple[int, str, str | None, str]] | None,
        end: int | None = None,
    ) -> list[tuple[int, str, str | None, str]] | None:
        """Scan the complete lines in ``body[:end]`` (ending with a newline); return an unfinished traceback."""
        end = len(body) if end is None else end
        start = 0
        lineno = line_base  # number of the line before `start`
        if pending_tb is not None:
            start, lineno, pending_tb = self._continue_traceback(body, 0, line_base, name, pending_tb, end)
            if pending_tb is not None:
                self._counted = None
                return pending_tb
        starts = self._gate(body, start, end)
        pos = start
        for ls in starts:
            if ls < pos:
                continue  # consumed by a traceback
            lineno += body.count(b"\n", pos, ls)
            le = body.find(b"\n", ls)
            raw = body[ls:min(le, ls + MAX_SCAN_LINE)]
            pos = le + 1
            lineno += 1
            if _TRACEBACK in raw:
                text, stamp = clean_line(raw.decode("utf-8", "replace"))
                tb = [(lineno, text, stamp, raw.decode("utf-8", "replace"))]
                pos, lineno, pending_tb = self._continue_traceback(body, pos, lineno, name, tb, end)
                if pending_tb is not None:
                    self._counted = None
                    return pending_tb
                continue
            if _quiet_stats(raw):
                continue
            self._line(raw.decode("utf-8", "replace"), lineno, name)
        self._counted = (pos, lineno - line_base)
        return None

    @staticmethod
    def _gate(body: bytes | bytearray, start: int, size: int) -> list[int]:
        """Start offsets of the lines in ``body[start:size]`` that contain a gate anchor."""
        found: set[int] = set()
        memmem = _memmem()
        if memmem is not None:
            import ctypes

            if isinstance(body, bytearray):
                base = ctypes.addressof((ctypes.c_char * len(body)).from_buffer(body))
            else:
                base = ctypes.cast(ctypes.c_char_p(body), ctypes.c_void_p).value or 0
            for anchor in GATE_ANCHORS:
                off = start
                while off < size:
                    hit = memmem(base + off, size - off, anchor, len(anchor))
                    if not hit:
                        break
                    i = hit - base
                    found.add(body.rfind(b"\n", 0, i) + 1)
                    off = body.find(b"\n", i, size) + 1 or size
            return sorted(found)
        for anchor in GATE_ANCHORS:
            i = body.find(anchor, start, size)
            while i != -1:
                found.add(body.rfind(b"\n", 0, i) + 1)
                le = body.find(b"\n", i, size)
                i = body.find(anchor, le + 1, size) if le != -1 else -1
        return sorted(found)

    def _line(self, raw: str, lineno: int, name: str) -> None:
        if self._stats_line(raw, lineno, name):
            return
        text, stamp = clean_line(raw)
        if self._start_line(text, stamp, lineno, name):
            return
        found = classify_line(text)
        if found is None:
            return
        self._record(found[0], found[1], text, raw, lineno, name, stamp)

    def _stats_line(self, raw: str, lineno: int, name: str) -> bool:
        """Engine stats lines (llmdoctor/logs/engine.py); True when `raw` was one.

        Stats lines reach here only when the gate let them through: when they report preemptions
        ("reempt") or a cache 90 % full or more ("cache usage: 9", "token usage: 0.9", ...); the others,
        one line in eight of a busy log, are never decoded (``/metrics`` has their gauges). They are
        read before the line is cleaned, which only the ones that report something need.
        """
        if "Avg prompt throughput" in raw:
            stats = parse_stats_line(raw)
            if stats is None:
                return False
            full = saturated(stats)
            if not stats["preemptions"] and not full:
                return True
            text, stamp = clean_line(raw)
            if stamp and self._since_filter is not None and not self._since_filter(stamp):  # type: ignore[operator]
                return True
            self._engine_stats.add(stats, f"{name}:{lineno}", self._shown(text), stamp)
            if full:
                self._record(KV_PREEMPTION, _SATURATED, text, raw, lineno, name, stamp)
            else:
                self._count_backend("vllm")
            return True
        if "#queue-req" in raw:
            if sglang_saturation(raw) is not None:
                text, stamp = clean_line(raw)
                self._record(KV_PREEMPTION, _SATURATED, text, raw, lineno, name, stamp)
            return True
        return False

    def _start_line(self, text: str, stamp: str | None, lineno: int, name: str) -> bool:
        """vLLM's start-up markers (llmdoctor/logs/engine.py); True when `text` was one."""
        start = START_MARKER.search(text) is not None
        ready = READY.search(text) if not start and "Starting vLLM" in text else None
        if not start and ready is None:
            return False
        if stamp and self._since_filter is not None and not self._since_filter(stamp):  # type: ignore[operator]
            return True
        self._count_backend("vllm")
        if start:
            self._start_marks.setdefault(name, (stamp or "", lineno))
        else:
            mark = self._start_marks.pop(name, None)
            began, ended = stamp_seconds(mark[0] if mark else None), stamp_seconds(stamp)
            if mark and began is not None and ended is not None and ended >= began:
                self._loads.append(LoadDuration("vllm", "startup", ended - began, name, lineno, stamp, mark[0]))
        return True

    def _count_backend(self, backend: str) -> None:
        self._backends[backend] = self._backends.get(backend, 0) + 1

    @staticmethod
    def _shown(text: str) -> str:
        shown = mask_secrets(text.strip())
        return shown if len(shown) <= MAX_LINE_CHARS else shown[: MAX_LINE_CHARS - 1] + "…"

    def _record(self, cls: str, kind: str, text: str, raw: str, lineno: int, name: str, stamp: str | None) -> None:
        if stamp and self._since_filter is not None and not self._since_filter(stamp):  # type: ignore[operator]
            self._skipped += 1
            return
        backend = guess_backend(raw)
        if backend:
            self._count_backend(backend)
        store = self._classes[cls]
        if cls in BURST_CLASSES and store.last_file == name and 0 <= lineno - store.last_line <= BURST_LINES:
            store.last_line = lineno  # same failure, reported over several lines
            return
        store.last_file, store.last_line = name, lineno
        store.add(LogHit(cls, kind, name, lineno, self._shown(text), stamp, backend))
        if cls == MODEL_LOAD:
            self._durations(text, raw, lineno, name, stamp, backend)

    def _durations(
        self, text: str, raw: str, lineno: int, name: str, stamp: str | None, backend: str | None
    ) -> None:
        for be, stage, pattern, factor in DURATIONS:
            m = pattern.search(text)
            if m:
                self._loads.append(LoadDuration(be, stage, float(m.group(1)) * factor, name, lineno, stamp))
                return
        if "main: model loaded" in text:
            m = LLAMACPP_ELAPSED.match(raw.lstrip())
            if m:
                seconds = int(m.group(1)) * 60 + int(m.group(2)) + int(m.group(3)) / 1000
                self._loads.append(LoadDuration("llama.cpp", "model_loaded", seconds, name, lineno, stamp))

    def _continue_traceback(
        self,
        body: bytes | bytearray,
        pos: int,
        lineno: int,
        name: str,
        tb: list[tuple[int, str, str | None, str]],
        end: int | None = None,
    ) -> tuple[int, int, list[tuple[int, str, str | None, str]] | None]:
        """Read traceback lines from `pos`; return (next pos, line number, unfinished block)."""
        after_exception = any(kind == "exc" for kind in (_tb_kind(t) for _, t, _, _ in tb[1:]))
        while True:
            if len(tb) >= MAX_TRACEBACK_LINES:
                self._emit_traceback(tb, name)
                return pos, lineno, None
            le = body.find(b"\n", pos, len(body) if end is None else end)
            if le == -1:
                return pos, lineno, tb  # the block goes on in the next read
            raw = body[pos:min(le, pos + MAX_SCAN_LINE)].decode("utf-8", "replace")
            text, stamp = clean_line(raw)
            kind = _tb_kind(text)
            if after_exception and kind not in ("blank", "chain", "header", "continuation"):
                self._emit_traceback(tb, name)
                return pos, lineno, None
            if kind == "exc":
                after_exception = True
            elif kind in ("chain", "header"):
                after_exception = False
            tb.append((lineno + 1, text, stamp, raw))
            lineno += 1
            pos = le + 1

    def _emit_traceback(self, tb: list[tuple[int, str, str | None, str]], name: str) -> None:
        best: tuple[tuple[str, str], int, str, str | None, str] | None = None
        for lineno, text, stamp, raw in tb:
            kind = _tb_kind(text)
            if kind in ("exc", "header") or lineno == tb[0][0]:
                found = classify_line(text)
                if found is not None and found[0] != MODEL_LOAD:
                    best = (found, lineno, text, stamp, raw)
        if best is not None:
            (cls, kind), lineno, text, stamp, raw = best
            self._record(cls, kind, text, raw, lineno, name, stamp)


def _first_number(raw: bytes | bytearray, after: bytes) -> float | None:
    """The number right after the first `after` in `raw` (None when absent or not a number)."""
    i = raw.find(after)
    if i < 0:
        return None
    i += len(after)
    j = i
    while j < len(raw) and raw[j] in b"0123456789.":
        j += 1
    try:
        return float(raw[i:j])
    except ValueError:
        return None


def _quiet_stats(raw: bytes | bytearray) -> bool:
    """True for an engine stats line the gate let through (its cache 90 % full or more) that reports nothing.

    Checked on the raw bytes, before decoding and cleaning, because such lines are most of what a busy
    engine's log sends through the gate: a vLLM stats line without preemptions below `SATURATED_KV_PCT`,
    an SGLang scheduler line below `SATURATED_TOKEN_USAGE` or with nothing queued. Anything it cannot
    read is not quiet (the full parse decides).
    """
    if b"Avg prompt throughput" in raw:
        if b"reempt" in raw:
            return False
        kv = _first_number(raw, b"cache usage: ")
        return kv is not None and kv < SATURATED_KV_PCT
    if b"#queue-req: " in raw:
        queued = _first_number(raw, b"#queue-req: ")
        if queued == 0:
            return True
        usage = [_first_number(raw[i:], b"token usage: ") for i in _offsets(raw, b"token usage: ")]
        return bool(usage) and all(u is not None and u < SATURATED_TOKEN_USAGE for u in usage)
    return False


def _offsets(raw: bytes | bytearray, needle: bytes) -> list[int]:
    out, i = [], raw.find(needle)
    while i >= 0:
        out.append(i)
        i = raw.find(needle, i + 1)
    return out


_CONTINUATION = LazyPattern(
    r"(?:CUDA kernel errors might be|For debugging consider passing|Compile with `TORCH_USE_CUDA_DSA`"
    r"|Search for `cuda|If reserved but unallocated memory|See documentation for Memory Management)"
)


def _tb_kind(text: str) -> str:
    """Role of a cleaned line inside a traceback block."""
    if not text.strip():
        return "blank"
    if text[0] in " \t":
        return "frame"
    if text.startswith("Traceback (most recent call last)") or text.endswith("Traceback (most recent call last):"):
        return "header"
    if text.startswith(("During handling of the above exception", "The above exception was the direct cause")):
        return "chain"
    if _CONTINUATION.match(text):
        return "continuation"
    if text.startswith("File \"") or set(text.strip()) <= set("^~ "):
        return "frame"
    return "exc"


def scan_lines(lines: Iterable[str], name: str = "<lines>") -> LogScan:
    """Scan text lines (a convenience for tests and small inputs)."""
    import io

    data = "".join(line if line.endswith("\n") else line + "\n" for line in lines).encode("utf-8")
    scanner = LogScanner()
    scanner.scan_stream(io.BytesIO(data), name)
    return scanner.result()
