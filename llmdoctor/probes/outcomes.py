"""The run's closing probes: every request's outcome (``request_outcomes``) and the client host (``client_host``).

Probes keep what they measure, and some keep only summaries (the concurrency step keeps its
latencies): a request that failed in the middle of a probe would vanish from the report. This
probe, measured after every other one, keeps one `RequestOutcome` per request the probe client
sent — which probe sent it, its status or error class, whether it was a retry, an empty or a cut
answer, its time, and the headers that explain a refusal (``Retry-After``, ``x-ratelimit-*``,
``Server``, the content type of an error page) — so the report counts the success of each probe
and of the run, and LD002 reads the pattern of the failures. ``client_host`` sums up the lag
sampler's readings (`llmdoctor.measurements.client_host`). Both send nothing; replay reads them from the recording.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmdoctor.measurements.client_host import ClientHostResult
from llmdoctor.measurements.ledger import RequestLedger, RequestOutcome

if TYPE_CHECKING:
    from llmdoctor.context import Context

__all__ = ["client_host", "request_outcomes"]


def request_outcomes(ctx: Context) -> RequestLedger:
    """The ``request_outcomes`` probe: the probe client's history as outcome records (sends nothing)."""
    from llmdoctor.context import ProbeUnavailable

    if ctx.recorded is not None:
        raise ProbeUnavailable("not in the recorded measurements")
    return RequestLedger([RequestOutcome.of(t) for t in ctx.request_history])


def client_host(ctx: Context) -> ClientHostResult:
    """The ``client_host`` probe: the lag sampler's summary of this run (no request is sent)."""
    from llmdoctor.context import ProbeUnavailable

    sampler = ctx.lag_sampler
    if sampler is None or sampler.started is None:
        raise ProbeUnavailable("no request was sent: the client's lag was not sampled")
    return ClientHostResult.of(sampler)
