"""LD303: the server's logs report how long the model took to load (the cold start cost)."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Severity
from llmdoctor.logscan import MODEL_LOAD, LoadDuration
from llmdoctor.logstats import log_stamp_epoch
from llmdoctor.probes.catalog import LOGS, SERVER_METRICS
from llmdoctor.probes.metrics import ServerMetricsResult

SLOW_LOAD_S = 30.0
# Seconds a vLLM process may spend importing before its first log line (12-28 s measured on
# two cores); a larger gap means the log and the metrics describe different starts or clocks.
MAX_IMPORT_S = 600.0


class LogModelLoad(Check):
    """Model load and warm-up time found in the server logs: what each cold start costs.

    ## What it checks
    Reads the load times the backends log at start-up: vLLM "Loading weights took X seconds",
    "Model loading took X GiB and Y seconds" and "init engine (profile, create kv cache,
    warmup model) took Z seconds"; TGI "Shard ready in Xs"; Ollama "llama runner started in X
    seconds" (and `load_duration`); llama.cpp's elapsed time at "main: model loaded". Reports
    the longest start-up and how many starts the log shows.

    For vLLM the whole start-up counts, not only the load: from the first line of its last start
    ("non-default args", 0.32) to "Starting vLLM server on" by the log's own timestamps, and,
    when ``/metrics`` is read too, from ``process_start_time_seconds`` (which also covers the
    imports before the first line) to that ready line. On vLLM 0.32 (CPU build, two cores) the
    load and engine init take 1-2 s of a 26-114 s start.

    ## Why it adds latency
    Every request that arrives while the server starts (after a crash, a deploy, a scale-out
    or a scale-from-zero, an Ollama unload) waits for the whole load: reading weights,
    uploading them to the GPU, compiling kernels and warming up.

    ## Example
    `vllm.log:9`: model loading 2.2 s + engine init 90.8 s = 93 s per cold start.

    ## Fix
    Avoid cold starts: keep instances warm (min replicas >= 1, no scale to zero, Ollama
    `OLLAMA_KEEP_ALIVE=-1`), send a warm-up request after start, fix crashes (LD206).
    Shorten them: quantized weights (less to read), weights on local NVMe, vLLM's
    torch.compile cache kept between starts, fewer CUDA-graph sizes.

    ## Caveats
    Info when a single start is quick; the load time only matters to requests that arrive
    during a start. TGI shards load in parallel: the slowest one counts. vLLM logs local time
    without a year or zone: the process start is used only when the log's ready line falls
    between it and the scrape, after the log's first line, as read in this machine's zone.
    """

    id = "LD303"
    name = "log-model-load"
    title = "Model load time in server logs"
    category = Category.COLD_START
    requires = (LOGS,)
    optional = (SERVER_METRICS,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        scan = ctx.get(LOGS)
        cold = scan.cold_start()
        loads = scan.count(MODEL_LOAD)
        if cold is None:
            last = scan.last(MODEL_LOAD)
            if loads and last is not None:
                yield Finding(
                    severity=Severity.INFO,
                    confidence=Confidence.LOW,
                    title="Model (re)loaded, load time not in the log",
                    message=f"The log shows the model loading ({last.where}) but no duration.",
                    impact_basis="unknown: the log has no load time",
                    evidence=(Evidence("last load", last.text, "", last.where),),
                    fix=Fix("Keep instances warm", ("min replicas >= 1; OLLAMA_KEEP_ALIVE=-1",)),
                    cause=Cause.COLD_START,
                )
            return
        seconds, basis, entry = cold
        if entry.stage == "startup":
            full = _since_process_start(entry, ctx.optional(SERVER_METRICS))
            if full is not None:
                seconds = full
                basis = (f"process start (process_start_time_seconds) → ready {entry.timestamp}: {full:.0f} s; "
                         f"the log alone: {basis}")
        starts = scan.starts()
        slow = seconds >= SLOW_LOAD_S
        severity = Severity.WARNING if slow or starts >= 2 else Severity.INFO
        again = f" The log shows {starts} starts: each one a cold start." if starts >= 2 else ""
        yield Finding(
            severity=severity,
            confidence=Confidence.HIGH,
            title=f"A cold start costs {seconds:.{0 if seconds >= 10 else 1}f} s (model load in server logs)",
            message=f"The server took {seconds:.1f} s to load and warm up ({basis}).{again}",
            impact_ms=round(seconds * 1000, 1),
            impact_basis="the load time, paid by every request that arrives during a cold start",
            evidence=(
                Evidence("load time", round(seconds, 1), "s", f"{entry.file}:{entry.line}"),
                Evidence("starts in log", starts, "", "logs"),
                Evidence("backend", entry.backend, "", f"{entry.file}:{entry.line}"),
            ),
            fix=Fix(
                "Keep the model warm, and make loading faster",
                (
                    "Min replicas >= 1, no scale to zero; Ollama: OLLAMA_KEEP_ALIVE=-1 (or keep_alive per request).",
                    "Send a warm-up request right after start, before taking traffic (readiness probe).",
                    "Quantized weights (GPTQ/AWQ/GGUF) on local NVMe load faster; keep vLLM's torch.compile cache.",
                ),
            ),
            cause=Cause.COLD_START,
        )


def _since_process_start(entry: LoadDuration, metrics: ServerMetricsResult | None) -> float | None:
    """Seconds from the server process's start (its ``/metrics``) to the log's ready line, if consistent."""
    if metrics is None:
        return None
    start, scraped = metrics.latest.process_start_time, metrics.latest.scraped_at
    if not start or not scraped:
        return None
    ready = log_stamp_epoch(entry.timestamp, scraped)
    first = log_stamp_epoch(entry.started, scraped)
    if ready is None or first is None:
        return None
    # Whole-second stamps against a start time read from /proc: allow two seconds either way.
    if not (start - 2 <= first <= start + MAX_IMPORT_S and ready <= scraped + 2):
        return None
    return max(ready - start, entry.seconds)
