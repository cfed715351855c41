"""Each cause's thresholds, in one home: the numbers the checks and the differential diagnosis judge it by.

One frozen `Limits` subclass per cause, one instance of it (``SLOW_DECODE_LIMITS``, ...), attached to
the cause's `llmdoctor.causes.CauseSpec` (``Cause.SLOW_DECODE.spec.limits``). A threshold that a check
and the diagnosis share is one field. Where they judge different things (a level worth a warning
against a level that only points the likelihood one way), both are fields of the one class, and its
docstring says why they differ. This module imports nothing of llmdoctor, so every layer may read it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Limits",
    "ColdStartLimits",
    "QueueingLimits",
    "SlowDecodeLimits",
    "ServerFloorLimits",
    "PrefillLimits",
    "PrefixCacheLimits",
    "SlowNetworkLimits",
    "GatewayOverheadLimits",
    "HostPressureLimits",
    "KvCacheLimits",
    "NoKeepaliveLimits",
    "COLD_START_LIMITS",
    "QUEUEING_LIMITS",
    "SLOW_DECODE_LIMITS",
    "SERVER_FLOOR_LIMITS",
    "PREFILL_LIMITS",
    "PREFIX_CACHE_LIMITS",
    "SLOW_NETWORK_LIMITS",
    "GATEWAY_OVERHEAD_LIMITS",
    "HOST_PRESSURE_LIMITS",
    "KV_CACHE_LIMITS",
    "NO_KEEPALIVE_LIMITS",
]


@dataclass(frozen=True)
class Limits:
    """A cause's thresholds: the numbers the checks and the differential diagnosis judge it by.

    One subclass per cause, one instance (``SLOW_DECODE_LIMITS``, ...), attached to its `CauseSpec`.
    A threshold a check and the diagnosis share is one field; where they differ, both are fields,
    and the class's docstring says why.
    """


@dataclass(frozen=True)
class ColdStartLimits(Limits):
    """`Cause.COLD_START`: how much slower the first request (or one after idle) is than warm ones (ms).

    The checklist (LD301, LD302) names a penalty as soon as the warm samples cannot explain it
    (`llmdoctor.analysis.measures.cold_start_noise_ms`: ``noise_floor_ms``, the warm median, 3 × the warm
    p90 − p50); LD301 warns from ``warning_ms``. The diagnosis needs more to *confirm* a cold start
    than a check needs to mention one: its likelihood ratios are strong from ``strong_ms`` and
    ``strong_multiple`` × warm, decisive from ``decisive_ms`` and ``decisive_multiple`` × warm; a
    penalty of at most ``not_slower_ms`` (and ``not_slower_share`` × warm) argues against it, and
    after idle ``unloaded_ms`` (and once the warm median) says the model was unloaded.
    """

    noise_floor_ms: float = 100.0
    warning_ms: float = 1000.0
    not_slower_ms: float = 50.0
    not_slower_share: float = 0.5
    strong_ms: float = 200.0
    strong_multiple: float = 2.0
    decisive_ms: float = 1000.0
    decisive_multiple: float = 3.0
    unloaded_ms: float = 200.0

    def not_slower(self, penalty_ms: float, warm_ms: float) -> bool:
        """A penalty this small argues against a cold start."""
        return penalty_ms <= max(self.not_slower_ms, self.not_slower_share * warm_ms)


@dataclass(frozen=True)
class QueueingLimits(Limits):
    """`Cause.QUEUEING`: requests that wait for each other, or in the server's queue.

    ``slowdown`` is one number for LD503 and the diagnosis's concurrency step: LD503 applies it to the
    median at N over the median alone, the step to the slowest of its few parallel requests over a lone
    one (a step of two has no median worth the name). Below ``no_slowdown`` with a spread under
    ``parallel_spread`` the step says "served in parallel"; a spread of ``serial_spread`` × a lone
    request says "one after the other"; either needs ``min_wait_ms`` of difference. The server's own
    queue clock decides from ``queued_ms`` (and ``queued_share`` of the time to first token), and rules
    queueing out at ``not_queued_ms``. LD203 names a queue only when its time is ``finding_share`` of the
    time to first token: a finding must matter, a likelihood ratio only has to point.
    """

    slowdown: float = 1.5
    no_slowdown: float = 1.2
    serial_spread: float = 0.35
    parallel_spread: float = 0.15
    min_wait_ms: float = 30.0
    jitter_ratio: float = 1.5
    queued_ms: float = 20.0
    queued_share: float = 0.15
    not_queued_ms: float = 5.0
    finding_share: float = 0.2

    def queued(self, queue_ms: float, ttft_ms: float) -> bool:
        """The server's own queue time says the requests waited."""
        return queue_ms >= max(self.queued_ms, self.queued_share * ttft_ms)


@dataclass(frozen=True)
class SlowDecodeLimits(Limits):
    """`Cause.SLOW_DECODE`: milliseconds per output token.

    LD703 warns from ``warning_token_ms`` (25 tokens/s: slower than people read). The diagnosis counts
    ``slow_token_ms`` (33 tokens/s) as strong evidence for slow decode and ``fast_token_ms`` as strong
    evidence against: a hypothesis may be suspected below the level where a finding is worth a warning,
    and is only confirmed by the sweep's slope.
    """

    warning_token_ms: float = 40.0
    slow_token_ms: float = 30.0
    fast_token_ms: float = 15.0
    #: The sweep's line decides only when it fits this well (r²).
    fit_r2: float = 0.8


@dataclass(frozen=True)
class ServerFloorLimits(Limits):
    """`Cause.SERVER_FLOOR`: the warm "Say ok." time to first token (ms) the diagnosis explains.

    A floor of ``floor_ms`` or more is worth explaining; under ``no_floor_ms`` there is none. (LD701's
    own warning and critical floors judge the symptom, not this cause.)
    """

    floor_ms: float = 150.0
    no_floor_ms: float = 80.0
    #: The sweep's fixed part dominates from this share of a typical answer's predicted total.
    fixed_share: float = 0.5


@dataclass(frozen=True)
class PrefillLimits(Limits):
    """`Cause.LONG_PREFILL`: milliseconds per prompt token of the prompt-length sweep.

    Slow from ``slow_token_ms`` (a 1,000-token prompt adds 0.5 s), fast up to ``fast_token_ms``; the
    impact is quoted for a ``quoted_tokens``-token prompt. A longer prompt's extra time to first token
    counts from ``min_extra_ms``, and under ``no_extra_ms`` says prompt work is cheap.
    """

    slow_token_ms: float = 0.5
    fast_token_ms: float = 0.2
    quoted_tokens: int = 1000
    min_extra_ms: float = 100.0
    no_extra_ms: float = 50.0


@dataclass(frozen=True)
class PrefixCacheLimits(Limits):
    """`Cause.PREFIX_CACHE_MISS`: a prefix cache saving less than ``worth_ms`` on a
    `PrefillLimits.quoted_tokens`-token prompt is no cause of latency.

    A repeated prompt served from the cache saves ``saved_ms`` and ``saved_share`` of its first
    prefill; one that saves at most ``recomputed_share`` of a prefill of `PrefillLimits.min_extra_ms`
    or more was computed again.
    """

    worth_ms: float = 100.0
    saved_ms: float = 30.0
    saved_share: float = 0.3
    recomputed_share: float = 0.1


@dataclass(frozen=True)
class SlowNetworkLimits(Limits):
    """`Cause.SLOW_NETWORK`: the round trip (raw TCP) and a trivial request (GET /v1/models), in ms."""

    slow_rtt_ms: float = 50.0
    fast_rtt_ms: float = 5.0
    near_request_ms: float = 10.0
    far_request_ms: float = 100.0


@dataclass(frozen=True)
class GatewayOverheadLimits(Limits):
    """`Cause.GATEWAY_OVERHEAD` (and `Cause.SLOW_NETWORK`): the client's time to first token minus the
    server's own, for a lone request (ms).

    Time outside the server from ``outside_ms`` and ``outside_share`` of the client's time; none to
    speak of up to ``inside_ms`` and ``inside_share``. Whether it is the path or a gateway, a trivial
    request (`SlowNetworkLimits.near_request_ms`) tells.
    """

    outside_ms: float = 50.0
    outside_share: float = 0.3
    inside_ms: float = 10.0
    inside_share: float = 0.1

    def outside(self, outside_ms: float, client_ms: float) -> bool:
        """Time worth explaining is spent in front of the server."""
        return outside_ms >= max(self.outside_ms, self.outside_share * client_ms)

    def inside(self, outside_ms: float, client_ms: float) -> bool:
        """The time is spent in the server."""
        return outside_ms <= max(self.inside_ms, self.inside_share * client_ms)


@dataclass(frozen=True)
class HostPressureLimits(Limits):
    """`Cause.HOST_PRESSURE`: a host this busy (CPU %) is saturated, for LD208 and the diagnosis alike;
    the diagnosis counts a host no busier than ``calm_cpu_pct`` (with llmdoctor on time) against it."""

    busy_cpu_pct: float = 90.0
    calm_cpu_pct: float = 50.0


@dataclass(frozen=True)
class KvCacheLimits(Limits):
    """`Cause.KV_CACHE_PRESSURE`: the share of the KV cache in use.

    From ``high_usage`` LD204 warns and the diagnosis counts it as strong evidence; from ``full_usage``
    LD204's finding is critical. Up to ``roomy_usage`` the diagnosis counts it against (strongly when
    nothing was preempted).
    """

    high_usage: float = 0.90
    full_usage: float = 0.98
    roomy_usage: float = 0.5


@dataclass(frozen=True)
class NoKeepaliveLimits(Limits):
    """`Cause.NO_KEEPALIVE`: LD407 names a new connection per request only when it costs ``min_cost_ms``;
    the diagnosis reads the baseline's reuse from ``min_requests`` requests on."""

    min_cost_ms: float = 1.0
    min_requests: int = 3


COLD_START_LIMITS = ColdStartLimits()
QUEUEING_LIMITS = QueueingLimits()
SLOW_DECODE_LIMITS = SlowDecodeLimits()
SERVER_FLOOR_LIMITS = ServerFloorLimits()
PREFILL_LIMITS = PrefillLimits()
PREFIX_CACHE_LIMITS = PrefixCacheLimits()
SLOW_NETWORK_LIMITS = SlowNetworkLimits()
GATEWAY_OVERHEAD_LIMITS = GatewayOverheadLimits()
HOST_PRESSURE_LIMITS = HostPressureLimits()
KV_CACHE_LIMITS = KvCacheLimits()
NO_KEEPALIVE_LIMITS = NoKeepaliveLimits()
