"""LD207: several models loaded, the wrong model, or a model partly on the CPU (Ollama)."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check, CheckSkipped
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Severity
from llmdoctor.probes.catalog import SERVER_METRICS

OFFLOAD_WARN = 0.05
GIB = 1024**3


class LoadedModels(Check):
    """Loaded models: several resident, the requested one missing, or offloaded to the CPU.

    ## What it checks
    Ollama's ``/api/ps`` after our requests: which models are resident, and
    for each how much of its memory is in VRAM (``size_vram`` < ``size``
    means layers run on the CPU). Fires when the model we asked for is not
    among them, when part of a model is on the CPU, and (info) when several
    models share the server.

    ## Why it adds latency
    Layers on the CPU run many times slower than on the GPU, on every token.
    Several models compete for VRAM: one evicts the other, and each switch
    reloads weights from disk (seconds). A request for a model that is not
    loaded pays that load.

    ## Example
    `llama3.1:70b` 42.5 GB with 23.6 GB in VRAM: 44% on the CPU; also
    loaded: `mistral:latest`.

    ## Fix
    Keep the working set in VRAM: a smaller or more quantized model, one
    model per GPU (``OLLAMA_MAX_LOADED_MODELS=1``), a shorter ``num_ctx``, or
    ``num_gpu`` set so all layers fit; request the model name the server runs.

    ## Caveats
    Only Ollama reports loaded models with their VRAM share; other backends
    serve the model they were launched with, so the check is skipped for them.
    """

    id = "LD207"
    name = "loaded-models"
    title = "Models loaded on the server"
    category = Category.SERVER
    requires = (SERVER_METRICS,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        m = ctx.get(SERVER_METRICS)
        models = m.latest.models
        if models is None:
            raise CheckSkipped(f"{m.backend} does not list loaded models (only Ollama's /api/ps does)")
        names = [x.name for x in models]
        wanted = ctx.target.model if ctx.target else None
        fix = Fix(
            "Keep exactly the model you use resident, entirely in VRAM.",
            (
                "Set OLLAMA_MAX_LOADED_MODELS=1 on a GPU too small for several models.",
                "Use a smaller or more quantized model, or a smaller num_ctx, so all layers fit in VRAM.",
                "Set num_gpu (layers on the GPU) in the Modelfile or request options to all layers.",
                "Request the exact model name the server has loaded.",
            ),
        )
        listing = Evidence("loaded models", ", ".join(names) or "(none)", "", "/api/ps")
        if wanted and names and not any(n == wanted or n.split(":")[0] == wanted for n in names):
            yield Finding(
                Severity.WARNING, Confidence.MEDIUM, f"Requested model {wanted!r} is not loaded",
                f"After our requests the server holds {', '.join(names)} but not {wanted!r}: requests for it "
                "may be served by another model, or load it (and evict others) each time.",
                fix, impact_basis="a model load per switch (seconds); see LD301 for the measured penalty",
                evidence=(listing,), cause=Cause.COLD_START,
            )
        for x in models:
            if x.cpu_fraction < OFFLOAD_WARN:
                continue
            yield Finding(
                Severity.WARNING, Confidence.HIGH,
                f"{x.name}: {x.cpu_fraction:.0%} of the model runs on the CPU",
                f"{x.name} takes {x.size_bytes / GIB:.1f} GiB but only {x.size_vram_bytes / GIB:.1f} GiB "
                "is in VRAM: the remaining layers run on the CPU for every token.",
                fix, impact_basis="CPU layers slow every decode step; see LD703 for measured decode speed",
                evidence=(
                    Evidence("size", round(x.size_bytes / GIB, 2), "GiB", "/api/ps"),
                    Evidence("size in VRAM", round(x.size_vram_bytes / GIB, 2), "GiB", "/api/ps"),
                    listing,
                ),
                cause=Cause.SLOW_DECODE,  # layers on the CPU make every decode step slow
            )
        if len(models) > 1:
            yield Finding(
                Severity.INFO, Confidence.HIGH, f"{len(models)} models loaded at once",
                f"The server holds {', '.join(names)}: they share VRAM and may evict each other.",
                fix, impact_basis="contention only; a reload costs seconds when one evicts another",
                evidence=(listing,), cause=Cause.GPU_MEMORY,
            )
