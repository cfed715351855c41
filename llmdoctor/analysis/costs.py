"""Measured per-token costs for the input and parameter checks' latency estimates.

Checks multiply tokens by these: prefill (prompt) tokens by the ``prefill``
probe's ms per prompt token, output tokens by the sweep fit's ms per output
token. When a cost was not measured it is None and `basis` says so, so a
finding states what its estimate rests on instead of inventing a number.

The prefill cost names its clock (`TokenCosts.prefill_clock`): the server's
own prompt clock when it timed both of the probe's prompts (llama.cpp
``timings.prompt_ms``: ``server_body``), else ``inferred`` from the client's
times to first token, which include whatever grows with the prompt in front
of the server (a gateway scanning the body, the upload).

A check calling `token_costs` declares `TOKEN_COSTS` among its optional probes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmdoctor.analysis.waterfall import Clock
from llmdoctor.context import Context
from llmdoctor.measurements.stats import percentile
from llmdoctor.probes.catalog import PREFILL, SWEEP
from llmdoctor.probes.contract import AnyProbe

__all__ = ["TOKEN_COSTS", "TokenCosts", "token_costs", "distribution"]

#: The probes `token_costs` reads (a check using it declares them optional).
TOKEN_COSTS: tuple[AnyProbe, ...] = (PREFILL, SWEEP)


@dataclass(frozen=True)
class TokenCosts:
    """Milliseconds per prompt token and per output token, with where each came from."""

    prefill_ms: float | None
    prefill_basis: str
    decode_ms: float | None
    decode_basis: str
    #: The clock behind `prefill_ms`: a server clock's origin (``server_body``...) or ``inferred``.
    prefill_clock: str = Clock.INFERRED

    def prefill(self, tokens: float) -> float | None:
        """Estimated prefill time of `tokens` prompt tokens (None when not measured)."""
        return None if self.prefill_ms is None else tokens * self.prefill_ms

    def decode(self, tokens: float) -> float | None:
        """Estimated decode time of `tokens` output tokens (None when not measured)."""
        return None if self.decode_ms is None else tokens * self.decode_ms


def token_costs(ctx: Context) -> TokenCosts:
    """The run's measured per-token costs (never sends requests itself: probes do)."""
    prefill = ctx.optional(PREFILL)
    p_clock = Clock.INFERRED
    if prefill is not None and prefill.server_per_token_ms is not None and prefill.server_per_token_ms > 0:
        p_ms: float | None = prefill.server_per_token_ms
        p_clock = prefill.server_clock or Clock.INFERRED
        p_basis = (f"server-measured prefill {prefill.server_per_token_ms:.3f} ms/prompt token "
                   f"({prefill.server_source} of a short vs a long prompt)")
    elif prefill is not None and prefill.reliable:
        p_ms = prefill.per_token_ms
        why = prefill.server_note or "no server clock timed the prompt"
        p_basis = (f"prefill {prefill.per_token_ms:.3f} ms/prompt token inferred from the client's time to "
                   f"first token of a short vs a long prompt ({why})")
    else:
        p_ms, p_basis = None, "prefill cost per prompt token not measured (no endpoint, or the probe failed)"
    sweep = ctx.optional(SWEEP)
    fit = sweep.fit if sweep is not None else None
    if fit is not None and fit.per_token_ms > 0:
        d_ms: float | None = fit.per_token_ms
        d_basis = f"measured decode {fit.per_token_ms:.1f} ms/output token (output-length sweep fit)"
    else:
        d_ms, d_basis = None, "decode cost per output token not measured (no endpoint, or the sweep failed)"
    return TokenCosts(p_ms, p_basis, d_ms, d_basis, p_clock)


def distribution(values: Sequence[float], unit: str = "") -> str:
    """"p50 X, p90 Y, max Z unit" for many values (`llmdoctor.measurements.stats.percentile`); the value itself for
    one."""
    suffix = f" {unit}" if unit else ""
    if len(values) == 1:
        return f"{values[0]:,.0f}{suffix}"
    p50, p90 = percentile(values, 50), percentile(values, 90)
    if p50 is None or p90 is None:
        return "no values"
    return f"p50 {p50:,.0f}, p90 {p90:,.0f}, max {max(values):,.0f}{suffix} over {len(values)} requests"
