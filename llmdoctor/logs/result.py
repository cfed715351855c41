"""What the log scanner found: hits per event class, load durations, the files read (plain data).

`LogScan` is the ``logs`` probe's result (``llmdoctor/probes/logs.py``); the checks LD206, LD209, LD210
and LD303 read it. It is serialisable (``llmdoctor.serde``) so recorded runs replay it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmdoctor.logs.engine import EngineStats

__all__ = ["LoadDuration", "LogFile", "LogHit", "LogScan"]

# Stages that mark one start of a server (a model load); the others are parts of one or repeat per request.
_PRIMARY_STAGES = frozenset(
    {"model_load", "weights", "shard_ready", "runner_start", "load_duration", "model_loaded", "cuda_graph"})
# Stages every rank (TGI shard, SGLang TP worker) reports once per start: counted once per minute of stamp.
_PER_RANK_STAGES = frozenset({"shard_ready", "cuda_graph"})


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
    #: Events per ``"class:kind"`` (e.g. ``"kv_preemption:kv-saturated"``), summing to `counts` per class.
    kind_counts: dict[str, int] = field(default_factory=dict)
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

    def count_kind(self, cls: str, *kinds: str) -> int:
        """Events of one class and any of `kinds` (0 when none)."""
        return sum(self.kind_counts.get(f"{cls}:{kind}", 0) for kind in kinds)

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
        TGI: the slowest shard; SGLang: the slowest rank's CUDA-graph capture; Ollama: runner start or
        ``load_duration``; llama.cpp: elapsed time at ``main: model loaded`` or the timings block's
        ``load time``.
        """
        best: tuple[float, str, LoadDuration] | None = None
        by_stage: dict[tuple[str, str], LoadDuration] = {}
        for d in self.load_durations:
            key = (d.backend, d.stage)
            if d.stage in _PER_RANK_STAGES and key in by_stage and by_stage[key].seconds >= d.seconds:
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
        return len(self.start_entries())

    def start_entries(self) -> list[LoadDuration]:
        """One load entry per server start the logs show (the first shard or rank of a start), in log order."""
        seen: set[tuple[str, str]] = set()
        out = []
        for d in self.load_durations:
            if d.stage not in _PRIMARY_STAGES or (d.backend == "vllm" and d.stage == "weights" and any(
                x.stage == "model_load" for x in self.load_durations)):
                continue
            key = (d.file, (d.timestamp or "")[:16]) if d.stage in _PER_RANK_STAGES else (d.file, str(d.line))
            if key not in seen:
                seen.add(key)
                out.append(d)
        return out

