"""LD703: slow decode — each output token costs a lot."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check, CheckSkipped
from llmdoctor.context import Context
from llmdoctor.findings import Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.probes.catalog import SWEEP

SLOW_TOKEN_MS = 40.0  # 25 tokens/s: slower than people read


class DecodeSpeed(Check):
    """Decode speed: milliseconds per output token from the flat-latency fit.

    ## What it checks
    Reads the per-token slope of the output-length sweep (LD702's
    measurements, not a new probe) and fires when one output token costs more
    than 40 ms (under 25 tokens/s, slower than people read).

    ## Why it adds latency
    Each output token runs every layer of the model once. A slow decode makes
    long answers slow even when the first token is fast; the cost grows
    with ``max_tokens``.

    ## Example
    45 ms per token: a 64-token answer spends 2.9 s decoding after its first
    token.

    ## Fix
    A GPU with more memory bandwidth, a quantized or smaller model, fewer
    concurrent sequences per GPU (decode is shared by the batch), speculative
    decoding where the backend offers it; shorter answers (``max_tokens``,
    stop sequences).

    ## Caveats
    Under load the slope includes other tenants' batch work. CPU-only servers
    are expected to be slow here.
    """

    id = "LD703"
    name = "decode-speed"
    title = "Decode speed per output token"
    category = Category.BASELINE
    requires = (SWEEP,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        sweep = ctx.get(SWEEP)
        fit = sweep.separable_fit
        if fit is None:
            raise CheckSkipped("the sweep generated a single output length: no per-token slope")
        per_token = fit.per_token_ms
        if per_token < SLOW_TOKEN_MS:
            return
        typical = ctx.options.workload.typical_output_tokens
        yield Finding(
            Severity.WARNING,
            fit.confidence(),
            f"Slow decode: {per_token:.0f} ms per output token ({1000 / per_token:.0f} tokens/s)",
            f"Each output token costs {per_token:.1f} ms: a {typical}-token answer spends "
            f"{per_token * typical:,.0f} ms decoding.",
            Fix(
                "Make each token cheaper, or generate fewer.",
                (
                    "Use a quantized or smaller model, or a GPU with more memory bandwidth.",
                    "Lower concurrent sequences per GPU (vLLM --max-num-seqs) if latency matters more than "
                    "throughput; enable speculative decoding where supported.",
                    "Cap max_tokens and add stop sequences for short answers.",
                ),
            ),
            cause=Cause.SLOW_DECODE,
            impact_ms=per_token * typical,
            frequency=Frequency.EVERY_REQUEST,
            impact_basis=f"per-token slope × a typical {typical}-token answer",
            evidence=(
                Evidence("per output token", round(per_token, 2), "ms", "sweep fit"),
                Evidence("fit r²", round(fit.r2, 3), "", "sweep fit"),
            ),
        )
