"""LD303: the server's logs report how long the model took to load (the cold start cost)."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.analysis.measures import cold_start_noise_ms, cold_start_penalty_ms
from llmdoctor.analysis.request_metrics import queued_ms
from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.logs.engine import log_stamp_epoch
from llmdoctor.logs.scan import MODEL_LOAD, LoadDuration, LogScan
from llmdoctor.measurements.server_metrics import ServerMetricsResult
from llmdoctor.measurements.timing import RequestTiming
from llmdoctor.probes.catalog import BASELINE, FIRST_REQUEST, LOGS, SERVER_METRICS

#: Starts closer together than this on average (by the log's timestamps) recur often enough to matter:
#: an hourly restart loop, an unload after every idle gap (Ollama's default keep_alive is 5 minutes).
RECURRING_GAP_S = 3600.0
# Seconds a vLLM process may spend importing before its first log line (12-28 s measured on
# two cores); a larger gap means the log and the metrics describe different starts or clocks.
MAX_IMPORT_S = 600.0
# Whole-second log stamps against our clock: a start that ended more than this before our first request
# was over when the run began.
STAMP_SLACK_S = 2.0


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
    A past start-up is a risk, not this run's latency: the finding is a warning only when this
    run met a cold server or the log shows the server starting again and again (two or more
    starts, on average less than an hour apart by the log's timestamps); otherwise it is info
    with its cost, however long the start (measured on a warm, healthy vLLM 0.32 whose log held
    the 36 s start-up that ended minutes before the run). This run met a cold server when its
    first request paid a cold-start penalty beyond the warm requests' noise (as LD301 measures
    it, less the time the server's own clock says it queued) and the log's start had not ended
    before that request was sent: a start over before the run is not what it paid (measured on
    vLLM 0.32 with ``--max-num-seqs 1`` behind two streams on a busy host: a first request 3.8 s
    slower than warm ones, 141 s after the ready line). The load time only matters to
    requests that arrive during a start. TGI shards load in parallel: the slowest one counts. vLLM logs local time
    without a year or zone: the process start is used only when the log's ready line falls
    between it and the scrape, after the log's first line, as read in this machine's zone.
    """

    id = "LD303"
    name = "log-model-load"
    title = "Model load time in server logs"
    category = Category.COLD_START
    requires = (LOGS,)
    optional = (SERVER_METRICS, FIRST_REQUEST, BASELINE)

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
        gap = _mean_gap_s(scan, ctx.optional(SERVER_METRICS))
        recurring = starts >= 2 and gap is not None and gap <= RECURRING_GAP_S
        met = self._met_cold(ctx, entry)
        severity = Severity.WARNING if met is not None or recurring else Severity.INFO
        again = ""
        if starts >= 2:
            every = f", one every ~{_span(gap)} on average" if gap is not None else ""
            again = f" The log shows {starts} starts{every}: each one a cold start."
        if met is not None:
            again += f" This run met a cold server: {met}."
        elif not recurring:
            again += (" A past start-up: no request of this run met it, and the log shows no restarts often enough "
                      "to matter.")
        yield Finding(
            severity=severity,
            confidence=Confidence.HIGH,
            title=f"A cold start costs {seconds:.{0 if seconds >= 10 else 1}f} s (model load in server logs)",
            message=f"The server took {seconds:.1f} s to load and warm up ({basis}).{again}",
            impact_ms=round(seconds * 1000, 1),
            # starts close together in the log: cold starts recur (scale-to-zero, unloads, a restart loop)
            frequency=Frequency.RECURRING_COLD_START if recurring else Frequency.COLD_START,
            impact_basis="the load time, paid by every request that arrives during a cold start",
            evidence=(
                Evidence("load time", round(seconds, 1), "s", f"{entry.file}:{entry.line}"),
                Evidence("starts in log", starts, "", "logs"),
                *((Evidence("mean time between starts", round(gap), "s", "log timestamps"),)
                  if gap is not None else ()),
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


    @staticmethod
    def _met_cold(ctx: Context, entry: LoadDuration) -> str | None:
        """How this run's first request met a cold server (LD301's penalty beyond the warm noise, less what
        it queued by the server's clock), or None; None too when the log's start ended before the run."""
        first, base = ctx.optional(FIRST_REQUEST), ctx.optional(BASELINE)
        if first is None or base is None or first.ttft_ms is None or _ended_before(entry, first):
            return None
        warm_p50, warm_p90 = base.ttft_p50_ms, base.ttft_p90_ms
        if warm_p50 is None or warm_p90 is None:
            return None
        penalty = cold_start_penalty_ms(first.ttft_ms, first.setup_ms, warm_p50) - queued_ms(first)
        if penalty < cold_start_noise_ms(warm_p50, warm_p90):
            return None
        return f"its first request waited {penalty:,.0f} ms longer for its first token than warm ones"


def _ended_before(entry: LoadDuration, first: RequestTiming) -> bool:
    """The start the log shows was over before our first request was sent (by its timestamps): whatever
    that request paid, it was not this start. False when either time is unknown."""
    if not first.started_at:
        return False
    ready = log_stamp_epoch(entry.timestamp, first.started_at)
    return ready is not None and ready < first.started_at - STAMP_SLACK_S


def _mean_gap_s(scan: LogScan, metrics: ServerMetricsResult | None) -> float | None:
    """Mean seconds between the starts the log shows, by its timestamps (None: fewer than two stamped starts)."""
    near = metrics.latest.scraped_at if metrics is not None and metrics.latest.scraped_at else 0.0
    entries = scan.start_entries()
    stamps = sorted(t for d in entries if (t := log_stamp_epoch(d.timestamp, near)) is not None)
    if len(stamps) < 2 or len(stamps) < len(entries):
        return None
    return (stamps[-1] - stamps[0]) / (len(stamps) - 1)


def _span(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    return f"{seconds / 60:,.0f} min" if seconds >= 120 else f"{seconds:,.0f} s"


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
