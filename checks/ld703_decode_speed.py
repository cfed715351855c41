"""LD703: slow decode — each output token costs a lot."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.analysis.decode import server_decode, stream_decode
from llmdoctor.analysis.noise import noise_confidence
from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check, CheckSkipped
from llmdoctor.context import Context, ProbeUnavailable
from llmdoctor.findings import Confidence, Evidence, Finding, Frequency, Severity
from llmdoctor.limits import SLOW_DECODE_LIMITS
from llmdoctor.measurements.stats import LinearFit
from llmdoctor.probes.catalog import BASELINE, CLIENT_HOST, SERVER_METRICS, SWEEP


class _BelowThreshold(Exception):
    """The sweep's slope is not determined, but even its interval's top is under the threshold."""


class DecodeSpeed(Check):
    """Decode speed: milliseconds per output token, from the clock that saw the tokens.

    ## What it checks
    The per-token slope of the output-length sweep (LD702's measurements,
    not a new probe) and fires when one output token costs more than 40 ms
    (under 25 tokens/s, slower than people read). Without a usable slope (a
    single output length, or a slope that noise made zero, negative or
    undetermined) it reads the baseline's stream (first to last token); when
    that stream is merged — the tokens came in a few reads, so its gaps are
    zero — it reads the server's inter-token histogram (vLLM
    ``vllm:inter_token_latency_seconds``) over the baseline's window instead.

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
    are expected to be slow here. The slope comes from a robust (Theil–Sen)
    line with an interval: a slope whose interval is wider than itself is not
    determined (nothing fires when even its top is under the threshold);
    mixed samples (two populations, LD211) give no client-side per-token cost
    (only the server's histogram is read then); when the noise the run
    measured (twice llmdoctor's own median worst scheduling lag while the
    requests ran) is more than a quarter of the decode time across the
    sweep's lengths, or with fewer requests than asked, the confidence is
    lowered. The server's
    histogram times the engine's steps, not the delivery; it is ours (high
    confidence) only when it gained exactly the gaps of our baseline
    requests, else it is the server's mean over everything it decoded in the
    window (medium confidence, said so). A merged stream is itself a finding
    of its own (a buffering proxy, LD410; a starved API server, LD208), not a
    decode cost.
    """

    id = "LD703"
    name = "decode-speed"
    title = "Decode speed per output token"
    category = Category.BASELINE
    optional = (SWEEP, BASELINE, SERVER_METRICS, CLIENT_HOST)

    def run(self, ctx: Context) -> Iterator[Finding]:
        try:
            fit, sweep_why, mixed = _usable_fit(ctx)
        except _BelowThreshold:
            return  # whatever it is, it is below the threshold
        host = ctx.optional(CLIENT_HOST)
        base = ctx.optional(BASELINE)
        stream = stream_decode(base.samples) if base is not None and not mixed else None
        ours = (*base.warmup, *base.samples) if base is not None else ()
        server = server_decode(ctx.optional(SERVER_METRICS), ours)
        evidence: list[Evidence] = []
        if fit is not None:
            sweep = ctx.get(SWEEP)
            per_token = fit.per_token_ms
            points = [p.timing for p in sweep.ok_points]
            tokens = [t.output_tokens for t in points]
            # The effect the lag competes with: the decode time across the sweep's span of lengths.
            span = max(tokens, default=1) - min(tokens, default=0)
            confidence = noise_confidence(fit.confidence(), per_token * span, host=host, timings=points,
                                          short=sweep.short)
            basis, where = "per-token slope", "sweep fit"
            interval = fit.per_token_interval
            evidence += [Evidence("per output token", round(per_token, 2), "ms", "sweep fit"),
                         Evidence("interval", f"{interval[0]:.2f}–{interval[1]:.2f}" if interval else "none", "ms",
                                  "sweep fit"),
                         Evidence("fit r²", round(fit.r2, 3), "", "sweep fit")]
        elif stream is not None and stream.per_token_ms is not None and not stream.merged and base is not None:
            per_token = stream.per_token_ms
            confidence = noise_confidence(Confidence.MEDIUM, per_token * max(1, stream.gaps), host=host,
                                          timings=base.samples)
            basis, where = "baseline stream's ms per token", "the baseline's stream"
            evidence.append(Evidence("per output token", round(per_token, 2), "ms", "baseline stream"))
        elif server is not None:
            per_token = server.per_token_ms
            confidence = Confidence.HIGH if server.ours else Confidence.MEDIUM
            whose = "our requests" if server.ours else "all requests in the window"
            basis, where = f"server inter-token histogram ({whose})", f"the server's inter-token histogram ({whose})"
            evidence.append(Evidence(f"per output token (server, {whose})", round(per_token, 2), "ms", server.source))
        else:
            merged = " (its stream merged the tokens)" if stream is not None and stream.merged else ""
            baseline = ("the baseline is mixed too" if mixed else
                        f"no baseline stream with 2 tokens or more{merged}")
            raise CheckSkipped(f"no decode measurement: {sweep_why}; {baseline}, and no inter-token histogram "
                               "from the server")
        if stream is not None and stream.gaps:
            evidence.append(Evidence("baseline stream: token gaps seen / generated",
                                     f"{stream.gaps_seen} / {stream.gaps}", "", "baseline stream"))
        if server is not None and fit is not None:
            evidence.append(Evidence("per output token (server inter-token histogram)",
                                     round(server.per_token_ms, 2), "ms", server.source))
        if per_token < SLOW_DECODE_LIMITS.warning_token_ms:
            return
        typical = ctx.options.workload.typical_output_tokens
        yield Finding(
            Severity.WARNING,
            confidence,
            f"Slow decode: {per_token:.0f} ms per output token ({1000 / per_token:.0f} tokens/s)",
            f"Each output token costs {per_token:.1f} ms by {where}: a {typical}-token answer spends "
            f"{per_token * typical:,.0f} ms decoding.",
            Cause.SLOW_DECODE.fix,
            cause=Cause.SLOW_DECODE,
            impact_ms=per_token * typical,
            frequency=Frequency.EVERY_REQUEST,
            impact_basis=f"{basis} × a typical {typical}-token answer",
            evidence=tuple(evidence),
        )


def _usable_fit(ctx: Context) -> tuple[LinearFit | None, str, bool]:
    """The sweep's fit when it settles a positive per-token cost, else None and why not; and whether the
    sweep holds two populations (then no client-side measurement is used at all).

    Raises `_BelowThreshold` when the slope is not determined but even its interval's top is under
    the threshold."""
    try:
        sweep = ctx.get(SWEEP)
    except ProbeUnavailable as exc:
        return None, f"no sweep ({exc.reason})", False
    fit = sweep.separable_fit
    if fit is None:
        return None, sweep.not_separable_reason(), False
    if sweep.mixed() is not None:
        return None, ("the sweep holds two populations (one backend slower than another? see LD211): no "
                      "per-token cost is drawn from mixed samples"), True
    if not fit.per_token_determined:
        interval = fit.per_token_interval
        if interval is not None and interval[1] < SLOW_DECODE_LIMITS.warning_token_ms:
            raise _BelowThreshold
        return None, f"the flat-latency fit does not settle it: {fit.note()}", False
    if fit.per_token_ms <= 0:
        return None, f"the sweep's per-token slope is {fit.per_token_ms:.2f} ms (noise)", False
    return fit, "", False
