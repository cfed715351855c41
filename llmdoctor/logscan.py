"""Streaming scanner for inference-server logs: OOMs, CUDA errors, preemption, context overflow, load times.

Pure code, no probe machinery: `LogScanner` reads binary streams in large blocks and keeps
constant memory whatever the size of the log. It is built for speed on large files:

1. a *gate*: a handful of literal anchors (``bytes.find`` runs at memory speed in C) picks
   the few candidate lines of a block; everything else is never decoded;
2. only candidate lines are decoded (invalid UTF-8 replaced), stripped of ANSI colour codes,
   of docker / docker-compose / journald / syslog / vLLM / Ray prefixes, unwrapped from
   JSON-per-line records, and classified by per-class regular expressions;
3. a Python traceback is one event: from its header the scanner reads the block line by line
   and classifies it by its exception line (the last line of the block).

The formats recognised are those of vLLM, TGI, llama.cpp server, Ollama and SGLang (see
``fixtures/logs/SOURCES.md`` for the real excerpts each rule was written against).
Harmless warnings (vLLM's tokenizer "Special tokens have been added", ``FutureWarning`` and
other deprecation notices, usage-stats notices) are never reported. Hugging Face's
"Token indices sequence length is longer than the specified maximum ..." is *not* harmless:
it means a prompt longer than the tokenizer's maximum was tokenized, so it counts as
context overflow.
"""

from __future__ import annotations

import functools
import json
import re
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO

from llmdoctor.logstats import READY, START_MARKER, EngineStats, parse_stats_line, stamp_seconds
from llmdoctor.patterns import LazyPattern
from llmdoctor.redact import MASK

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

GPU_OOM = "gpu_oom"
HOST_OOM = "host_oom"
GPU_ERROR = "gpu_error"
KV_PREEMPTION = "kv_preemption"
CONTEXT_OVERFLOW = "context_overflow"
MODEL_LOAD = "model_load"
CLASSES = (GPU_OOM, HOST_OOM, GPU_ERROR, KV_PREEMPTION, CONTEXT_OVERFLOW, MODEL_LOAD)

# Error classes whose hits on nearby lines describe one failure (llama.cpp prints three lines
# per failed allocation, the kernel four per OOM kill): hits of the same class at most this
# many lines after the previous one are folded into that event.
BURST_CLASSES = frozenset({GPU_OOM, HOST_OOM, GPU_ERROR})
BURST_LINES = 5

MAX_HITS_KEPT = 20  # per class: the first 10 and the last 10
MAX_LINE_CHARS = 300  # evidence lines are cut to this
MAX_SCAN_LINE = 64 * 1024  # longer lines are classified on their first 64 KiB
BLOCK = 4 * 1024 * 1024
MAX_TRACEBACK_LINES = 400

# --- the gate --------------------------------------------------------------------------
# Literal anchors: a line is looked at only if it contains one of them. Each class rule
# below can only match a line that contains an anchor (tests check this).
GATE_ANCHORS: tuple[bytes, ...] = (
    b"emory",  # out of memory, OutOfMemoryError, cudaErrorMemoryAllocation, illegal memory access
    b"to allocate",  # llama.cpp: failed / unable to allocate CUDA0 buffer
    b"Killed",  # Killed process, OOMKilled, a shell's "Killed"
    b"oom-kill",  # systemd: Failed with result 'oom-kill'; kernel oom-kill:constraint=
    b"code 137",  # exited with code 137, exit code 137
    b"CUDA error",
    b"NCCL error",
    b"NVRM: Xid",  # kernel: NVRM: Xid (PCI:0000:44:00): 79, ...
    b"fallen off the bus",
    b"reempt",  # vLLM: preempted by PreemptionMode / Preempted request
    b"Retract",  # SGLang: KV cache pool is full. Retract requests.
    b"context",  # maximum context length, context size, context window
    b"is too long",  # vLLM V0: Input prompt (N tokens) is too long; llama.cpp: prompt is too long
    b"runcat",  # Ollama: truncating input prompt; llama.cpp: input truncated
    b"Token indices",  # transformers: Token indices sequence length is longer than ...
    b"`inputs`",  # TGI: Input validation error: `inputs` tokens + `max_new_tokens` must be <=
    b"took",  # vLLM: Loading weights took / Model loading took / init engine ... took
    b"ready in",  # TGI: Shard ready in 218.6s
    b"arming up",  # TGI: Warming up model; llama.cpp: warming up the model
    b"started in",  # Ollama: llama runner started in 0.25 seconds
    b"model loaded",  # llama.cpp: main: model loaded
    b"load_duration",  # Ollama API / JSON logs: load_duration (ns)
    b'" 400',  # uvicorn access line of a rejected request: "POST /v1/chat/completions HTTP/1.1" 400
    b"non-default args",  # vLLM: first line of a start (0.32: api_utils.py)
    b"vLLM ",  # vLLM: Starting vLLM [API ]server [N] on http://... (ready); older: vLLM API server version X
    b"Traceback (most recent call last)",
)
_TRACEBACK = b"Traceback (most recent call last)"


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


# --- line cleaning -----------------------------------------------------------------------
_ANSI = LazyPattern(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
_PREFIXES = LazyPattern(
    r"""(?:
        \[?[\w.-]+\]?\s+\|\s?                                          # docker-compose: svc-1  | , [svc] |
      | \d{4}-\d\d-\d\d[T\ ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+  # ISO / docker --timestamps
      | [A-Z][a-z]{2}\s+\d{1,2}\s\d\d:\d\d:\d\d\s\S+\s[^\s:\[]+(?:\[\d+\])?:\s  # syslog / journald short
      | \[\s*\d+\.\d+\]\s                                              # kernel uptime [  518.050606]
      | \([\w.-]+\s+pid=\d+(?:,\s*ip=[\d.]+)?\)\s?                      # vLLM / Ray: (EngineCore pid=1)
      | \[rank\d+\]:\s?                                               # torch.distributed: [rank0]:
      | (?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d\s[\d:.]+\s(?:\[[^\]]+\]|[\w.]+:\d+\])\s?
                                                                      # vLLM: INFO 06-02 00:51:39 [x.py:1]
    )""",
    re.VERBOSE,
)
_TIMESTAMP = LazyPattern(
    r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"  # ISO
    r"|\d{4}/\d\d/\d\d - \d\d:\d\d:\d\d"  # Ollama GIN
    r"|[A-Z][a-z]{2}\s+\d{1,2}\s\d\d:\d\d:\d\d"  # syslog
    r"|(?<![\d-])\d\d-\d\d \d\d:\d\d:\d\d"  # vLLM (no year)
)
_LLAMACPP_ELAPSED = LazyPattern(r"^(\d+)\.(\d\d)\.(\d\d\d)\.\d\d\d [IWED] ")

# --- secrets -----------------------------------------------------------------------------
# Same mask as everything else llmdoctor prints; log lines carry secrets nobody told us about,
# so they are found by shape (the probe client's `Redactor` masks the known ones).
_SECRETS = (
    (LazyPattern(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}"), rf"\1 {MASK}"),
    (LazyPattern(r"(?i)\b(authorization|x-api-key|api-key|cookie)(\"?\s*[:=]\s*\"?)[^\s\",;}]+"), rf"\1\2{MASK}"),
    (
        LazyPattern(r"(?i)\b(api[_-]?key|access[_-]?token|auth[_-]?token|token|secret|password|passwd)"
                   r"(\"?\s*[:=]\s*['\"]?)[^\s'\",;&}]+"),
        rf"\1\2{MASK}",
    ),
    (LazyPattern(r"\b(sk|rk|pk)-[A-Za-z0-9_-]{8,}"), rf"\1-{MASK}"),
    (LazyPattern(r"\bhf_[A-Za-z0-9]{16,}"), f"hf_{MASK}"),
)


def mask_secrets(text: str) -> str:
    """Mask bearer tokens, ``sk-...`` keys, ``api_key=...`` and ``Authorization:`` values."""
    for pattern, repl in _SECRETS:
        text = pattern.sub(repl, text)
    return text


# --- classification ----------------------------------------------------------------------
# Lines never reported, whatever they contain: harmless warnings, and lines that echo user
# text (vLLM's request log prints the prompt, which may say anything).
_HARMLESS = LazyPattern(
    r"Special tokens have been added in the vocabulary"
    r"|FutureWarning|DeprecationWarning|is deprecated"
    r"|[Uu]sage stats"
    r"|Received request \S+: prompt"
    r"|has been resumed"
    r"|^\s*(?:CUDA kernel errors might be asynchronously reported|For debugging consider passing"
    r"|Compile with `TORCH_USE_CUDA_DSA`|Search for `cuda)"
)

_RULES: tuple[tuple[str, str, LazyPattern], ...] = (
    # (class, kind, pattern) — first match wins; host OOM before GPU OOM ("Out of memory: Killed").
    (HOST_OOM, "oom-kill", LazyPattern(
        r"Killed process \d+|invoked oom-killer|\boom-kill\b|oom_kill_process|Memory cgroup out of memory"
        r"|OOMKilled|code=killed, status=9/KILL")),
    (HOST_OOM, "exit-137", LazyPattern(r"(?i)exit(?:ed)?(?: with)?(?: exit)? (?:code|status)[: =]*137\b")),
    (HOST_OOM, "killed", LazyPattern(r"^Killed\s*$|\b\d+\s+Killed\s+\S")),
    (GPU_OOM, "cuda-oom", LazyPattern(
        r"CUDA out of memory|OutOfMemoryError|cudaErrorMemoryAllocation|CUDA error: out of memory"
        r"|cudaMalloc failed: out of memory|out of device memory|ErrorOutOfDeviceMemory"
        r"|ggml_\w*cuda\w*.*out of memory")),
    (GPU_OOM, "alloc-failed", LazyPattern(
        r"(?:failed|unable) to allocate (?:\w+ )?(?:CUDA\d*|ROCm\d*|Metal|Vulkan\d*|SYCL\d*|GPU|backend|compute)"
        r"\w* buffer")),
    (GPU_ERROR, "xid", LazyPattern(r"NVRM: Xid|\bXid \(PCI|fallen off the bus")),
    (GPU_ERROR, "nccl", LazyPattern(r"NCCL error")),
    (GPU_ERROR, "cuda", LazyPattern(
        r"CUDA error\b|illegal memory access was encountered|device-side assert triggered")),
    (KV_PREEMPTION, "preempted", LazyPattern(
        r"is preempted by PreemptionMode\.\w+|Preempted request|preempted (?:\d+ )?(?:requests?|seq)")),
    (KV_PREEMPTION, "retracted", LazyPattern(r"KV cache pool is full\. Retract requests|Retract requests")),
    (CONTEXT_OVERFLOW, "truncated", LazyPattern(
        r"truncating input prompt|input truncated|prompt truncated|truncated prompt")),
    (CONTEXT_OVERFLOW, "rejected", LazyPattern(
        r"maximum context length is \d+|is too long and exceeds (?:the )?limit"
        r"|exceeds the available context size|exceed_context_size_error|prompt is too long"
        r"|Token indices sequence length is longer than the specified maximum"
        r"|`inputs` tokens \+ `max_new_tokens` must be <=|`inputs` must have less than \d+ tokens"
        r"|is longer than the model's context length|exceed(?:s)? context window")),
    # vLLM 0.32 logs a prompt over --max-model-len only as uvicorn's access line (its error goes to the
    # client alone: fixtures/vllm/requests.log); other invalid requests look the same, so LD209 says so.
    (CONTEXT_OVERFLOW, "http-400", LazyPattern(
        r'"POST /v1/(?:chat/completions|completions|responses)\S* HTTP/[\d.]+" 400\b')),
    (MODEL_LOAD, "load", LazyPattern(
        r"Loading weights took|Model loading took|init engine \(.*\) took|Shard ready in"
        r"|Warming up model|llama runner started in|main: model loaded|\bload_duration\b")),
)

_DURATIONS: tuple[tuple[str, str, LazyPattern, float], ...] = (
    # (backend, stage, pattern with the number as group 1, factor to seconds)
    ("vllm", "weights", LazyPattern(r"Loading weights took (\d+(?:\.\d+)?) ?s"), 1.0),
    ("vllm", "model_load", LazyPattern(r"Model loading took [\d.]+ ?GiB(?: memory)? and (\d+(?:\.\d+)?) ?s"), 1.0),
    ("vllm", "engine_init", LazyPattern(r"init engine \(.*\) took (\d+(?:\.\d+)?) ?s"), 1.0),
    ("tgi", "shard_ready", LazyPattern(r"Shard ready in (\d+(?:\.\d+)?)s"), 1.0),
    ("ollama", "runner_start", LazyPattern(r"llama runner started in (\d+(?:\.\d+)?) ?s"), 1.0),
    ("ollama", "load_duration", LazyPattern(r"\"?load_duration\"?\s*[:=]\s*(\d+)\b"), 1e-9),
)

_BACKENDS = (
    ("vllm", LazyPattern(
        r"vllm|PreemptionMode|EngineCore|\[(?:loggers|scheduler|core|gpu_model_runner)\.py"
        r"|^(?:\([\w.-]+ pid=\d+\) )?(?:DEBUG|INFO|WARNING|ERROR) \d\d-\d\d \d\d:\d\d:\d\d")),
    ("sglang", LazyPattern(r"sglang|\bTP\d+\]|Retract requests|Decode batch\.?,? #running-req")),
    ("tgi", LazyPattern(r"text_generation|shard-manager|Input validation error")),
    ("ollama", LazyPattern(r"ollama|level=\w+ source=\S+\.go:\d+|\[GIN\]|llama runner")),
    ("llama.cpp", LazyPattern(r"llama|ggml|\bsrv\s|\bslot\s|n_ctx")),
)


def clean_line(raw: str) -> tuple[str, str | None]:
    """Return ``(message, timestamp)``: ANSI codes, known prefixes and JSON wrapping removed.

    The message keeps its leading indentation after the prefixes (traceback frames rely on it).
    """
    text = raw.rstrip("\r\n")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    stamp_match = _TIMESTAMP.search(text, 0, 120)
    stamp = stamp_match.group(0) if stamp_match else None
    stripped = text.strip()
    if stripped.startswith("{") and stripped.endswith("}"):
        message, json_stamp = _from_json(stripped)
        if message is not None:
            text = message.rstrip("\r\n")
            stamp = json_stamp or stamp
    for _ in range(6):
        m = _PREFIXES.match(text)
        if not m or m.end() == 0:
            break
        text = text[m.end():]
    return text, stamp


def _from_json(text: str) -> tuple[str | None, str | None]:
    try:
        obj = json.loads(text)
    except ValueError:
        return None, None
    if not isinstance(obj, dict):
        return None, None
    found = obj.get("fields")
    fields = found if isinstance(found, dict) else {}
    for key in ("message", "msg", "log", "MESSAGE"):
        value = obj.get(key, fields.get(key))
        if isinstance(value, str):
            stamp = obj.get("timestamp") or obj.get("time") or obj.get("ts")
            extra = "".join(
                f" {k}={v}" for k, v in obj.items() if k == "load_duration" and isinstance(v, (int, float))
            )
            return value + extra, str(stamp) if stamp is not None else None
    return None, None


def classify_line(message: str) -> tuple[str, str] | None:
    """The ``(class, kind)`` of one cleaned log message, or None (also for harmless warnings)."""
    if _HARMLESS.search(message):
        return None
    for cls, kind, pattern in _RULES:
        if pattern.search(message):
            return cls, kind
    return None


def _guess_backend(text: str) -> str | None:
    for name, pattern in _BACKENDS:
        if pattern.search(text):
            return name
    return None


# --- results -----------------------------------------------------------------------------
@dataclass
class LogHit:
    """One event found in a log: where it is and what it says (cut and with secrets masked)."""

    cls: str
    kind: str
    file: str
    line: int
    text: str
    timestamp: str | None = None
    backend: str | None = None

    @property
    def where(self) -> str:
        """``file:line`` of the hit."""
        return f"{self.file}:{self.line}"


@dataclass
class LoadDuration:
    """A model load or warm-up duration reported by the server (cold start evidence)."""

    backend: str
    stage: str
    seconds: float
    file: str
    line: int
    timestamp: str | None = None
    started: str | None = None  # stage "startup": the timestamp of the start's first line


@dataclass
class LogFile:
    """One log source that was read."""

    name: str
    lines: int = 0
    bytes: int = 0
    error: str | None = None


@dataclass
class LogScan:
    """What the log scanner found: counts per class, bounded samples of hits, load durations."""

    files: list[LogFile] = field(default_factory=list)
    lines_read: int = 0
    bytes_read: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    hits: dict[str, list[LogHit]] = field(default_factory=dict)
    load_durations: list[LoadDuration] = field(default_factory=list)
    backends: dict[str, int] = field(default_factory=dict)
    since: str | None = None
    skipped_before_since: int = 0
    engine_stats: EngineStats = field(default_factory=EngineStats)

    @property
    def files_read(self) -> int:
        """Number of log sources read without error."""
        return sum(1 for f in self.files if f.error is None)

    def count(self, cls: str) -> int:
        """Events of one class (0 when none)."""
        return self.counts.get(cls, 0)

    def first(self, cls: str) -> LogHit | None:
        """The first kept hit of a class."""
        hits = self.hits.get(cls) or []
        return hits[0] if hits else None

    def last(self, cls: str) -> LogHit | None:
        """The last kept hit of a class."""
        hits = self.hits.get(cls) or []
        return hits[-1] if hits else None

    def file_lines(self, name: str) -> int:
        """Lines read from the named source (0 if unknown)."""
        return next((f.lines for f in self.files if f.name == name), 0)

    def near_end(self, hit: LogHit, tail: int = 1000) -> bool:
        """True when `hit` is in the last `tail` lines (or last tenth) of its file: a recent event."""
        total = self.file_lines(hit.file)
        return total > 0 and total - hit.line < max(tail, total // 10)

    def cold_start(self) -> tuple[float, str, LoadDuration] | None:
        """The longest start-up the logs report: ``(seconds, how it was added up, last entry)``.

        vLLM: from the first line of its last start to "Starting vLLM server on" (by the log's
        timestamps; the imports before the first line are not in it), else model loading (else
        weight loading) plus engine init (profiling, KV cache, warm-up), each the last reported;
        TGI: the slowest shard; Ollama: runner start or ``load_duration``; llama.cpp: elapsed time
        at ``main: model loaded``.
        """
        best: tuple[float, str, LoadDuration] | None = None
        by_stage: dict[tuple[str, str], LoadDuration] = {}
        for d in self.load_durations:
            key = (d.backend, d.stage)
            if d.stage == "shard_ready" and key in by_stage and by_stage[key].seconds >= d.seconds:
                continue
            by_stage[key] = d
        candidates: list[tuple[float, str, LoadDuration]] = []
        load = by_stage.get(("vllm", "model_load")) or by_stage.get(("vllm", "weights"))
        init = by_stage.get(("vllm", "engine_init"))
        parts = [d for d in (load, init) if d is not None]
        stages = " + ".join(f"{d.stage.replace('_', ' ')} {d.seconds:.1f} s" for d in parts)
        span = by_stage.get(("vllm", "startup"))
        if span is not None:
            basis = f"log {span.started} → ready {span.timestamp}: {span.seconds:.0f} s"
            candidates.append((span.seconds, basis + (f", of which {stages}" if stages else ""), span))
        elif parts:
            candidates.append((sum(d.seconds for d in parts), stages, parts[-1]))
        for (backend, stage), d in by_stage.items():
            if backend != "vllm":
                candidates.append((d.seconds, f"{backend} {stage.replace('_', ' ')} {d.seconds:.1f} s", d))
        for c in candidates:
            if best is None or c[0] > best[0]:
                best = c
        return best

    def starts(self) -> int:
        """How many server starts (model loads) the logs show."""
        primary = {"model_load", "weights", "shard_ready", "runner_start", "load_duration", "model_loaded"}
        seen: set[tuple[str, str]] = set()
        count = 0
        for d in self.load_durations:
            if d.stage not in primary or (d.backend == "vllm" and d.stage == "weights" and any(
                x.stage == "model_load" for x in self.load_durations)):
                continue
            key = (d.file, (d.timestamp or "")[:16]) if d.stage == "shard_ready" else (d.file, str(d.line))
            if key not in seen:
                seen.add(key)
                count += 1
        return count


# --- the scanner -------------------------------------------------------------------------
class _ClassHits:
    """Bounded hit store of one class: the first half and the last half of `MAX_HITS_KEPT`."""

    def __init__(self) -> None:
        self.count = 0
        self.first: list[LogHit] = []
        self.last: deque[LogHit] = deque(maxlen=MAX_HITS_KEPT // 2)
        self.last_file = ""
        self.last_line = -(10**9)

    def add(self, hit: LogHit) -> None:
        self.count += 1
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
                line_base += buf.count(b"\n", 0, cut)
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
                    return pending_tb
                continue
            self._line(raw.decode("utf-8", "replace"), lineno, name)
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
        text, stamp = clean_line(raw)
        if self._engine_line(text, stamp, lineno, name):
            return
        found = classify_line(text)
        if found is None:
            return
        self._record(found[0], found[1], text, raw, lineno, name, stamp)

    def _engine_line(self, text: str, stamp: str | None, lineno: int, name: str) -> bool:
        """vLLM's stats lines and start-up markers (llmdoctor/logstats.py); True when `text` was one."""
        # Stats lines come through the gate only when they report preemptions ("reempt"): the others are
        # one line in eight of a busy vLLM log, and /metrics has their gauges (llmdoctor/logstats.py).
        stats = parse_stats_line(text) if "Preemptions: " in text else None
        start = stats is None and START_MARKER.search(text) is not None
        ready = READY.search(text) if stats is None and not start and "Starting vLLM" in text else None
        if stats is None and not start and ready is None:
            return False
        if stamp and self._since_filter is not None and not self._since_filter(stamp):  # type: ignore[operator]
            return True
        self._backends["vllm"] = self._backends.get("vllm", 0) + 1
        shown = mask_secrets(text.strip())[:MAX_LINE_CHARS]
        if stats is not None:
            self._engine_stats.add(stats, f"{name}:{lineno}", shown, stamp)
        elif start:
            self._start_marks.setdefault(name, (stamp or "", lineno))
        else:
            mark = self._start_marks.pop(name, None)
            began, ended = stamp_seconds(mark[0] if mark else None), stamp_seconds(stamp)
            if mark and began is not None and ended is not None and ended >= began:
                self._loads.append(LoadDuration("vllm", "startup", ended - began, name, lineno, stamp, mark[0]))
        return True

    def _record(self, cls: str, kind: str, text: str, raw: str, lineno: int, name: str, stamp: str | None) -> None:
        if stamp and self._since_filter is not None and not self._since_filter(stamp):  # type: ignore[operator]
            self._skipped += 1
            return
        backend = _guess_backend(raw)
        if backend:
            self._backends[backend] = self._backends.get(backend, 0) + 1
        store = self._classes[cls]
        if cls in BURST_CLASSES and store.last_file == name and 0 <= lineno - store.last_line <= BURST_LINES:
            store.last_line = lineno  # same failure, reported over several lines
            return
        store.last_file, store.last_line = name, lineno
        shown = mask_secrets(text.strip())
        if len(shown) > MAX_LINE_CHARS:
            shown = shown[: MAX_LINE_CHARS - 1] + "…"
        store.add(LogHit(cls, kind, name, lineno, shown, stamp, backend))
        if cls == MODEL_LOAD:
            self._durations(text, raw, lineno, name, stamp, backend)

    def _durations(
        self, text: str, raw: str, lineno: int, name: str, stamp: str | None, backend: str | None
    ) -> None:
        for be, stage, pattern, factor in _DURATIONS:
            m = pattern.search(text)
            if m:
                self._loads.append(LoadDuration(be, stage, float(m.group(1)) * factor, name, lineno, stamp))
                return
        if "main: model loaded" in text:
            m = _LLAMACPP_ELAPSED.match(raw.lstrip())
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
