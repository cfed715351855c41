"""LD202: GPU memory is nearly full."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Severity
from llmdoctor.probes.backends import knob
from llmdoctor.probes.catalog import SERVER_METRICS
from llmdoctor.probes.gpu import ANY_GPU, GpuSnapshot, any_gpu

NEAR_FULL = 0.95
# Backends that reserve most of the GPU for their KV cache at start, by design.
PREALLOCATING = {"vllm", "sglang", "tgi"}


class GpuMemoryFull(Check):
    """GPU memory near full: little room left for KV cache or other work.

    ## What it checks
    Reads used / total memory of each GPU (NVML locally, or DCGM
    ``DCGM_FI_DEV_FB_USED`` / ``FB_FREE``) and fires at 95% or more.

    ## Why it adds latency
    With no free memory the server cannot grow its KV cache: it admits fewer
    sequences per batch, queues the rest, or preempts running ones and
    recomputes them. Offloading engines spill layers to the CPU instead.

    ## Example
    GPU 0 `NVIDIA A100-SXM4-40GB`: 39.1 of 40.0 GiB used (97.8%), 2 processes.

    ## Fix
    Free or add memory: stop other processes on the GPU, use a quantized
    model (AWQ, GPTQ, GGUF INT4/INT8), shorten the maximum context, or move
    to a GPU with more memory; then the backend's own knob (below).

    ## Caveats
    vLLM, SGLang and TGI reserve most of the GPU for their KV cache at start,
    so "full" is their normal state: for them this is reported as info, and
    LD204 (KV-cache pressure) says whether that cache is actually full.
    """

    id = "LD202"
    name = "gpu-memory-full"
    title = "GPU memory near full"
    category = Category.SERVER
    optional = (*ANY_GPU, SERVER_METRICS)

    def run(self, ctx: Context) -> Iterator[Finding]:
        snap: GpuSnapshot = any_gpu(ctx)
        metrics = ctx.optional(SERVER_METRICS)
        backend = metrics.backend if metrics is not None else None
        for g in snap.gpus:
            frac = g.memory_fraction
            if frac is None or frac < NEAR_FULL:
                continue
            assert g.memory_used_bytes is not None and g.memory_total_bytes is not None
            gib = 1024**3
            by_design = backend in PREALLOCATING and len(g.processes) <= 1
            others = len(g.processes)
            yield Finding(
                Severity.INFO if by_design else Severity.WARNING,
                Confidence.LOW if by_design else Confidence.HIGH,
                f"GPU {g.index} memory {frac:.0%} used"
                + (" (preallocated by the server)" if by_design else ""),
                f"GPU {g.index} ({g.name or 'unknown'}) has {g.memory_used_bytes / gib:.1f} of "
                f"{g.memory_total_bytes / gib:.1f} GiB in use"
                + (f" by {others} processes" if others > 1 else "")
                + (
                    f"; {backend} reserves this for its KV cache, see LD204 for its pressure."
                    if by_design
                    else "; the server has no room to grow its KV cache or batch."
                ),
                Fix(
                    "Free GPU memory or give the model less of it.",
                    (
                        "Stop other processes on this GPU (nvidia-smi lists them).",
                        "Serve a quantized model (AWQ/GPTQ, GGUF Q4/Q8) or a smaller one; shorten max context.",
                        *knob(backend, "memory"),
                        *knob(backend, "kv"),
                    ),
                ),
                impact_basis="memory pressure shows as queueing/preemption; see LD203-LD205 for measured cost",
                evidence=(
                    Evidence("memory used", round(g.memory_used_bytes / gib, 2), "GiB", snap.source),
                    Evidence("memory total", round(g.memory_total_bytes / gib, 2), "GiB", snap.source),
                    Evidence("processes on the GPU", others, "", snap.source),
                ),
                cause=Cause.GPU_MEMORY,
            )
