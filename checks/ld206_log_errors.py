"""LD206: the server's logs report GPU OOM, host OOM kills or CUDA / NCCL / XID errors."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.logs.scan import GPU_ERROR, GPU_OOM, HOST_OOM
from llmdoctor.probes.catalog import LOGS

_WHAT = {
    GPU_OOM: "GPU out of memory",
    HOST_OOM: ("processes killed or refused for lack of host memory (an OOM kill by the kernel, systemd or Ray, "
               "exit 137, or Ollama refusing a model larger than the free RAM)"),
    GPU_ERROR: "CUDA / NCCL / XID errors",
}
_FIXES = {
    GPU_OOM: Fix(
        "Give the model more GPU memory headroom, or make it need less",
        (
            "vLLM: lower --max-model-len and --max-num-seqs, or tune --gpu-memory-utilization "
            "(lower it if other processes share the GPU).",
            "llama.cpp: lower -ngl (layers on the GPU) or --ctx-size; Ollama: smaller num_ctx.",
            "Serve a quantized model (AWQ, GPTQ, GGUF Q4/Q8) or a smaller one; add GPUs "
            "(tensor parallelism).",
        ),
    ),
    HOST_OOM: Fix(
        "Give the server process more RAM, or make it need less",
        (
            "Raise the container / cgroup memory limit (docker --memory, Kubernetes limits) and the shared "
            "memory size (--shm-size).",
            "Load fewer or smaller models; llama.cpp/Ollama: offload more layers to the GPU or use mmap.",
            "Check what else runs on the host (the kernel log names the killed process).",
        ),
    ),
    GPU_ERROR: Fix(
        "Treat the GPU or its driver stack as faulty until proven otherwise",
        (
            "XID 79/48/63/94: check `nvidia-smi -q` and the kernel log; drain the node and reset or replace "
            "the GPU.",
            "NCCL errors: check NCCL_DEBUG=INFO output, NVLink/PCIe health and the shared-memory size.",
            "Illegal memory access / device-side assert: upgrade the backend and driver; "
            "rerun with CUDA_LAUNCH_BLOCKING=1 to locate the kernel.",
        ),
    ),
}


class LogErrors(Check):
    """Errors in the server logs: GPU OOM, host OOM kills, CUDA / NCCL / XID errors.

    ## What it checks
    Reads the logs given with `--log FILE` (repeatable, `-` for stdin) or `--journal UNIT`
    and reports each class of error it finds: GPU out-of-memory (`CUDA out of memory`,
    `torch.OutOfMemoryError`, llama.cpp `cudaMalloc failed: out of memory` / `failed to
    allocate ... buffer`; vLLM's "No available memory for the cache blocks", SGLang's "Not enough
    memory. Please try to increase --mem-fraction-static", TGI's "Not enough memory to handle N
    prefill tokens"), host memory running out (the kernel's OOM killer, systemd's "killed by the OOM
    killer" / `Failed with result 'oom-kill'`, Ray's "Task was killed due to the node running low
    on memory", exit code 137, Ollama's "model requires more system memory ... than is available"),
    and CUDA / NCCL / XID
    errors (`CUDA error:`, `NCCL error`, `NVRM: Xid`, illegal memory access). A traceback
    counts once. Critical when the error repeats or is in the last part of the log.

    ## Why it adds latency
    A crashed or restarting server fails the requests in flight, and every request after it
    waits for the model to load again (the cold start of LD303). An OOM near the limit also
    means the server was running with no headroom: preemption and queueing come first.

    ## Example
    `vllm.log:12`: `torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 350.00 MiB`.

    ## Fix
    GPU OOM: lower `--max-model-len` / `--max-num-seqs`, tune `--gpu-memory-utilization`,
    serve a quantized or smaller model; llama.cpp: lower `-ngl` / `--ctx-size`. Host OOM:
    raise the container memory limit. CUDA/NCCL/XID: check the GPU and driver, drain the node.

    ## Caveats
    Old errors in a long log still count; use `--since` to look at recent events only (it
    applies to lines whose timestamp carries a year).
    """

    id = "LD206"
    name = "log-errors"
    title = "Errors in server logs"
    category = Category.SERVER
    requires = (LOGS,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        scan = ctx.get(LOGS)
        cold = scan.cold_start()
        for cls in (GPU_OOM, HOST_OOM, GPU_ERROR):
            count = scan.count(cls)
            first, last = scan.first(cls), scan.last(cls)
            if not count or first is None or last is None:
                continue
            recent = scan.near_end(last)
            severity = Severity.CRITICAL if count >= 2 or recent else Severity.WARNING
            when = "near the end of the log" if recent else "earlier in the log"
            evidence = [
                Evidence("events", count, "", "logs"),
                Evidence("first", first.text, "", first.where),
            ]
            if last is not first:
                evidence.append(Evidence("last", last.text, "", last.where))
            if cold is not None:
                evidence.append(Evidence("model load time", round(cold[0], 1), "s", cold[2].file))
            yield Finding(
                severity=severity,
                confidence=Confidence.HIGH,
                title=f"Logs report {_WHAT[cls].split(' (')[0]} ({count}x)",
                message=(
                    f"{count} event(s) of {_WHAT[cls]} in the server log, the last {when} at {last.where}: "
                    f"{last.text[:160]}"
                ),
                impact_ms=round(cold[0] * 1000, 1) if cold is not None else None,
                # a crash costs a restart; crashing again and again makes it a recurring one
                frequency=Frequency.RECURRING_COLD_START if count >= 2 else Frequency.COLD_START,
                impact_basis=(
                    f"each crash costs a restart: {cold[1]}"
                    if cold is not None
                    else "requests in flight fail; restart time unknown (no load time in the logs)"
                ),
                evidence=tuple(evidence),
                fix=_FIXES[cls],
                cause=Cause.SERVER_ERRORS,
            )
