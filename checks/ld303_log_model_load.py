"""LD303: the server's logs report how long the model took to load (the cold start cost)."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.logscan import MODEL_LOAD
from llmdoctor.probes.catalog import LOGS

SLOW_LOAD_S = 30.0


class LogModelLoad(Check):
    """Model load and warm-up time found in the server logs: what each cold start costs.

    ## What it checks
    Reads the load times the backends log at start-up: vLLM "Loading weights took X seconds",
    "Model loading took X GiB and Y seconds" and "init engine (profile, create kv cache,
    warmup model) took Z seconds"; TGI "Shard ready in Xs"; Ollama "llama runner started in X
    seconds" (and `load_duration`); llama.cpp's elapsed time at "main: model loaded". Reports
    the longest start-up and how many starts the log shows.

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
    during a start. TGI shards load in parallel: the slowest one counts.
    """

    id = "LD303"
    name = "log-model-load"
    title = "Model load time in server logs"
    category = Category.COLD_START
    requires = (LOGS,)

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
            # several starts in the log: cold starts recur (scale-to-zero, unloads, restarts)
            frequency=Frequency.RECURRING_COLD_START if starts >= 2 else Frequency.COLD_START,
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
