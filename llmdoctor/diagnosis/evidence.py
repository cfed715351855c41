"""What each measurement says about each hypothesis: the rules, with their thresholds.

`first_pass` reads the cheap measurements every run has (`llmdoctor.diagnosis.facts`); `FOLLOWUPS`
lists the follow-up tests with their cost, the hypotheses they separate and how their outcome is read
(the concurrency step's reading lives in `llmdoctor.diagnosis.queue_evidence`). Each rule yields
``(hypothesis, likelihood ratio, text)``; ratios come from `llmdoctor.diagnosis.scoring`.
A test's request cost is its probe's declared plan (`Probe.max_requests`), so the budget
the planner keeps is an upper bound of what the follow-ups send.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from llmdoctor.analysis.measures import cold_start_penalty_ms
from llmdoctor.analysis.noise import explained_by_lag
from llmdoctor.causes import Cause
from llmdoctor.diagnosis.confounders import (
    BUSY_CPU,
    NOISE_MULTIPLE,
    Confounders,
    first_pass_confounders,
    noise_ms,
)
from llmdoctor.diagnosis.facts import Facts, Impacts, Seen, facts_from, symptom
from llmdoctor.diagnosis.queue_evidence import read_concurrency
from llmdoctor.diagnosis.scoring import DECISIVE, STRONG, WEAK
from llmdoctor.limits import (
    COLD_START_LIMITS,
    GATEWAY_OVERHEAD_LIMITS,
    NO_KEEPALIVE_LIMITS,
    PREFILL_LIMITS,
    PREFIX_CACHE_LIMITS,
    QUEUEING_LIMITS,
    SERVER_FLOOR_LIMITS,
    SLOW_DECODE_LIMITS,
    SLOW_NETWORK_LIMITS,
)
from llmdoctor.probes.catalog import (
    CONCURRENCY,
    FOLLOWUP_CONCURRENCY,
    FOLLOWUP_IDLE,
    IDLE,
    LONE_REQUEST,
    PREFILL,
    REPEAT_PROMPT,
    SERVER_METRICS,
    SWEEP,
    TRANSPORT,
)
from llmdoctor.probes.contract import AnyProbe, Probe
from llmdoctor.probes.sizes import DEFAULT_IDLE_S

if TYPE_CHECKING:
    from llmdoctor.context import Context
    from llmdoctor.measurements.latency_samples import SweepResult
    from llmdoctor.options import Options
    from llmdoctor.probes.followup import LoneRequestResult, RepeatPromptResult
    from llmdoctor.probes.idle import IdleResult
    from llmdoctor.probes.prefill import PrefillResult
    from llmdoctor.probes.transport import TransportResult

__all__ = ["Facts", "Seen", "FollowUp", "FollowUpTest", "FOLLOWUPS", "first_pass", "facts_from", "symptom"]

T = TypeVar("T")

# Each cause's thresholds live with the cause (`llmdoctor.causes`), shared with the checks of that cause.
COLD = COLD_START_LIMITS
QUEUE = QUEUEING_LIMITS
FLOOR = SERVER_FLOOR_LIMITS
DECODE = SLOW_DECODE_LIMITS
PREFILL_AT = PREFILL_LIMITS
CACHE = PREFIX_CACHE_LIMITS
NET = SLOW_NETWORK_LIMITS
KEEPALIVE = NO_KEEPALIVE_LIMITS
GATEWAY = GATEWAY_OVERHEAD_LIMITS



def _busy_host(c: Confounders) -> bool:
    """Identical requests vary for a reason of their own: llmdoctor lagged, or the server's host was busy."""
    return c.noisy_client or (c.server_local and c.host_cpu is not None and c.host_cpu >= BUSY_CPU)


def _spread_beyond_lag(f: Facts) -> float | None:
    """How much identical warm requests vary (time to first token, p90 − p50), when the client's own lag does
    not explain it, they are one population (two make a spread of their own) and the host is not busy;
    None otherwise."""
    spread = f.ttft_p90_ms - f.warm_ttft_ms
    if f.confounders.split is not None or f.warm_ttft_ms <= 0 or spread < QUEUE.min_wait_ms:
        return None
    if f.ttft_p90_ms < QUEUE.jitter_ratio * f.warm_ttft_ms or explained_by_lag(spread, f.confounders.lag_ms):
        return None
    # On a busy host the spread is also the host's (a run at load 22 on 2 cores: p90 6.8x the median), and
    # judging a cold start against it is issue 27's noise work: the rule keeps to quiet hosts for now.
    return None if _busy_host(f.confounders) else spread


def first_pass(f: Facts) -> tuple[list[Seen], Impacts]:
    """Evidence from the cheap first pass."""
    out: list[Seen] = []
    impacts: Impacts = {}
    warm = f.warm_ttft_ms
    c = f.confounders
    if f.first_ttft_ms is not None:
        penalty = cold_start_penalty_ms(f.first_ttft_ms, f.first_setup_ms, warm)
        seen = f"first request {f.first_ttft_ms:,.0f} ms vs warm {warm:,.0f} ms"
        if COLD.not_slower(penalty, warm):
            # Before the lag: a stall of llmdoctor's own only makes the first request look slower.
            out.append((Cause.COLD_START, 1 / WEAK, f"{seen}: not slower"))
        elif explained_by_lag(penalty, f.first_lag_ms):
            pass  # llmdoctor's own stall during the first request explains the difference
        elif f.first_queue is not None:
            out.append((Cause.COLD_START, 1 / WEAK, f"{seen}: {f.first_queue}"))
            out.append((Cause.QUEUEING, WEAK, f"{seen}: {f.first_queue}"))
        elif (varies := _spread_beyond_lag(f)) is not None and penalty < NOISE_MULTIPLE * varies and (
                f.others_before is None or f.others_before >= 1):  # the server's first request ever met no queue
            # Identical warm requests vary that much (waits behind other clients, a busy server): the first
            # request may have waited as they do (found behind a real haproxy with maxconn 1 and three streaming
            # clients: the first 3,736 ms, warm p50 924 ms, p90 2,712 ms, confirmed as a cold start before).
            out.append((Cause.COLD_START, WEAK, f"{seen}: slower, but within {NOISE_MULTIPLE:g}x how much identical "
                                                f"warm requests vary (p90 − p50 {varies:,.0f} ms)"))
        elif penalty >= max(COLD.decisive_ms, COLD.decisive_multiple * warm) and f.first_setup_ms < penalty:
            out.append((Cause.COLD_START, DECISIVE, f"{seen}: a one-time {penalty:,.0f} ms, not connection set-up"))
        elif penalty >= max(COLD.strong_ms, COLD.strong_multiple * warm):
            out.append((Cause.COLD_START, STRONG, f"{seen}: {penalty:,.0f} ms more"))
        if penalty > 0:
            impacts[Cause.COLD_START] = (penalty, "first request minus warm median, time to first token")
    if c.split is not None:
        pass  # mixed samples: their median is no request's floor, their spread no queue
    elif warm >= FLOOR.floor_ms:
        out.append((Cause.SERVER_FLOOR, WEAK, f"warm time to first token {warm:,.0f} ms for a 3-word prompt"))
        out.append((Cause.QUEUEING, WEAK, f"warm time to first token {warm:,.0f} ms: waiting is one explanation"))
    elif warm < FLOOR.no_floor_ms:
        out.append((Cause.SERVER_FLOOR, 1 / DECISIVE, f"warm time to first token only {warm:,.0f} ms: no floor"))
    impacts[Cause.SERVER_FLOOR] = (warm, 'warm "Say ok." time to first token')
    spread = f.ttft_p90_ms - warm
    if c.split is None and not _busy_host(c) and warm > 0 and (
            f.ttft_p90_ms >= QUEUE.jitter_ratio * warm and spread >= QUEUE.min_wait_ms):
        out.append((Cause.QUEUEING, WEAK,
                    f"time to first token varies: p90 {f.ttft_p90_ms:,.0f} vs p50 {warm:,.0f} ms"))
    preempted = c.preemptions is not None and c.preemptions > 0
    if f.waiting is not None and f.waiting >= 1 and not preempted:  # with preemptions: waiting for KV blocks
        out.append((Cause.QUEUEING, STRONG, f"{f.waiting:.0f} requests waiting in the server's queue at the scrape"))
    seen_c, impacts_c = first_pass_confounders(c, f.waiting)
    out += seen_c
    impacts.update(impacts_c)
    if f.decode_ms is not None:
        seen = f"{f.decode_ms:.1f} ms per output token in the baseline's stream"
        if f.decode_ms >= DECODE.slow_token_ms:
            out.append((Cause.SLOW_DECODE, STRONG, seen))
        elif f.decode_ms <= DECODE.fast_token_ms:
            out.append((Cause.SLOW_DECODE, 1 / STRONG, seen))
        impacts[Cause.SLOW_DECODE] = (f.decode_ms * f.typical_output_tokens,
                                      f"baseline ms per token × a typical {f.typical_output_tokens}-token answer")
    if f.fresh + f.reused >= KEEPALIVE.min_requests:
        if f.reused == 0:
            out.append((Cause.NO_KEEPALIVE, STRONG, f"none of {f.fresh} baseline requests reused a connection"))
        elif f.reused >= f.fresh:
            out.append((Cause.NO_KEEPALIVE, 1 / DECISIVE, f"{f.reused} of {f.fresh + f.reused} baseline requests "
                                                          "reused their connection"))
    if f.setup_ms:
        impacts[Cause.NO_KEEPALIVE] = (statistics.median(f.setup_ms), "connect + TLS paid by every request")
    if f.models_ms is not None:
        seen = f"GET /v1/models took {f.models_ms:,.1f} ms"
        if f.models_ms <= NET.near_request_ms:
            out.append((Cause.SLOW_NETWORK, 1 / STRONG, f"{seen}: the server is close"))
        elif f.models_ms >= NET.far_request_ms:
            # unless the client's own noise (its lag while the request ran) can make a trivial request this slow
            if f.models_ms > noise_ms(f.confounders, [f.models_lag_ms]):
                out.append((Cause.SLOW_NETWORK, STRONG, seen))
        impacts[Cause.SLOW_NETWORK] = (f.models_ms, "one trivial request (GET /v1/models)")
    return out, impacts


# -- the follow-up tests ----------------------------------------------------------------------------

def _sweep(r: SweepResult, f: Facts) -> tuple[list[Seen], Impacts]:
    fit = r.separable_fit
    if fit is None:
        return [], {}
    mixed = r.mixed()
    if mixed is not None:  # no line through two populations: the replicas differ, not decode or floor
        n = len(mixed.fast) + len(mixed.slow)
        return [(Cause.REPLICA_IMBALANCE, STRONG, f"{len(mixed.slow)} of {n} sweep requests ~{mixed.slower_by:,.0f} ms "
                                                  "above the line through the others: two populations")], {}
    slope, fixed = fit.per_token_ms, fit.fixed_ms
    seen = f"total ≈ {fixed:,.0f} ms + {slope:.1f} ms × tokens (r² {fit.r2:.2f})"
    out: list[Seen] = []
    if slope >= DECODE.slow_token_ms and fit.r2 >= DECODE.fit_r2 and fit.per_token_determined:
        out.append((Cause.SLOW_DECODE, DECISIVE, f"{seen}: each token is slow"))
    elif slope <= DECODE.fast_token_ms:
        out.append((Cause.SLOW_DECODE, 1 / DECISIVE, f"{seen}: tokens are cheap"))
    dominates = fixed >= FLOOR.fixed_share * fit.predict(f.typical_output_tokens)
    if fixed >= FLOOR.floor_ms and dominates and fit.fixed_determined:
        out.append((Cause.SERVER_FLOOR, WEAK, f"{seen}: the fixed part dominates"))
    elif fixed < FLOOR.no_floor_ms and (fit.fixed_interval is None or fit.fixed_interval[1] < FLOOR.no_floor_ms
                                        or not fit.robust):
        out.append((Cause.SERVER_FLOOR, 1 / STRONG, f"{seen}: small fixed part"))
    impacts = {Cause.SLOW_DECODE: (slope * f.typical_output_tokens,
                                   f"sweep slope × a typical {f.typical_output_tokens}-token answer")}
    return out, impacts


def _prefill(r: PrefillResult, f: Facts) -> tuple[list[Seen], Impacts]:
    diff = r.long_ttft_ms - r.short_ttft_ms
    seen = (f"{r.short_tokens} → {r.long_tokens} prompt tokens: first token {r.short_ttft_ms:,.0f} → "
            f"{r.long_ttft_ms:,.0f} ms ({r.per_token_ms:.2f} ms per prompt token)")
    out: list[Seen] = []
    if diff > 0 and explained_by_lag(diff, r.lag_ms):
        return [], {}  # llmdoctor's own stall during the two requests explains the difference
    # Two single requests: identical ones vary by the run's noise (a queue's waits among it: measured on
    # vLLM 0.32 under a queue, 3,908 -> 5,364 ms while identical "Say ok." varied 2.6-7.1 s).
    noise = noise_ms(f.confounders, [r.lag_ms])
    if r.per_token_ms >= PREFILL_AT.slow_token_ms and diff >= PREFILL_AT.min_extra_ms and diff < NOISE_MULTIPLE * noise:
        out.append((Cause.LONG_PREFILL, WEAK, f"{seen}, within {NOISE_MULTIPLE:g}x the run's noise (±{noise:,.0f} ms)"))
    elif r.per_token_ms >= PREFILL_AT.slow_token_ms and diff >= PREFILL_AT.min_extra_ms:
        out.append((Cause.LONG_PREFILL, DECISIVE, seen))
    elif r.per_token_ms <= PREFILL_AT.fast_token_ms or diff < PREFILL_AT.no_extra_ms:
        out.append((Cause.LONG_PREFILL, 1 / DECISIVE, seen))
        saving = r.per_token_ms * PREFILL_AT.quoted_tokens
        if saving < CACHE.worth_ms:
            # What a prefix cache saves is prompt work: this cheap, a miss costs no latency worth a test.
            out.append((Cause.PREFIX_CACHE_MISS, 1 / STRONG,
                        f"{seen}: a prefix cache would save under {CACHE.worth_ms:,.0f} ms on a "
                        f"{PREFILL_AT.quoted_tokens:,}-token prompt"))
        if r.short_ttft_ms >= FLOOR.floor_ms:
            out.append((Cause.SERVER_FLOOR, WEAK, f"{seen}: the floor is not prompt work"))
    else:
        out.append((Cause.LONG_PREFILL, WEAK, seen))
    if f.prompt_tokens is not None:  # the user's own prompt, not the probe's long one
        return out, {Cause.LONG_PREFILL: (r.per_token_ms * f.prompt_tokens, f"measured ms per prompt token (inferred "
                                          f"from the client's time to first token) × your requests' "
                                          f"{f.prompt_tokens:,}-token prompt (median, --request)")}
    return out, {Cause.LONG_PREFILL: (r.per_token_ms * PREFILL_AT.quoted_tokens,
                                      f"measured ms per prompt token × a {PREFILL_AT.quoted_tokens:,}-token prompt")}



def _idle(r: IdleResult, f: Facts) -> tuple[list[Seen], Impacts]:
    penalty = r.penalty_ms
    if penalty is None:
        return [], {}
    seen = f"after {r.idle_s:g} s idle: {penalty:+,.0f} ms against the warm median"
    if penalty > 0 and explained_by_lag(penalty, r.after_idle.client_lag_ms):
        return [], {}
    if penalty > 0 and (f.first_queue is not None or f.confounders.queue_wait_ms is not None):
        return [], {}  # requests wait in the server's queue: an after-idle request may have waited as well
    if penalty >= max(COLD.unloaded_ms, f.warm_ttft_ms):
        return ([(Cause.COLD_START, DECISIVE, f"{seen}: the model was unloaded while idle")],
                {Cause.COLD_START: (penalty, f"after-idle penalty ({r.idle_s:g} s idle)")})
    if COLD.not_slower(penalty, f.warm_ttft_ms):
        return [(Cause.COLD_START, 1 / WEAK, f"{seen}: no unload after a short idle")], {}
    return [], {}


def _lone(r: LoneRequestResult, f: Facts) -> tuple[list[Seen], Impacts]:
    out: list[Seen] = []
    impacts: Impacts = {}
    client = r.client_ttft_ms
    queue = r.server_queue_ms
    if queue is not None:
        seen = f"server queue time {queue:,.1f} ms per request (its metrics, {r.requests_seen or 0:.0f} requests)"
        if QUEUE.queued(queue, client or 0.0):
            out += [(Cause.QUEUEING, DECISIVE, seen), (Cause.SERVER_FLOOR, 1 / WEAK, f"{seen}: waiting, not work")]
            impacts[Cause.QUEUEING] = (queue, "server's mean queue time of requests sent alone")
        elif queue <= QUEUE.not_queued_ms:
            out.append((Cause.QUEUEING, 1 / STRONG, seen))
    if r.waiting_before is not None and r.waiting_before >= 1:
        out.append((Cause.QUEUEING, STRONG, f"{r.waiting_before:.0f} requests waiting before ours"))
    outside = r.outside_server_ms
    if outside is not None and client:
        seen = f"client time to first token {client:,.0f} ms, server's {r.server_ttft_ms:,.0f} ms"
        near = f.models_ms is not None and f.models_ms <= NET.near_request_ms
        far_out = GATEWAY.outside(outside, client)
        if far_out and near:
            # GET /v1/models answers at once: the path is short, the time is spent in front of the model
            out += [(Cause.GATEWAY_OVERHEAD, STRONG, f"{seen}: {outside:,.0f} ms outside the model server, though "
                                                     f"GET /v1/models took {f.models_ms:,.1f} ms"),
                    (Cause.SLOW_NETWORK, 1 / WEAK, f"{seen}: a trivial request is fast, the path is short")]
            impacts[Cause.GATEWAY_OVERHEAD] = (outside, "client minus server time to first token of a lone request")
        elif far_out:
            # unless the client's own lag explains the time outside the server: then no evidence of a path
            if outside > noise_ms(f.confounders, [r.request.client_lag_ms]):
                out.append((Cause.SLOW_NETWORK, STRONG, f"{seen}: {outside:,.0f} ms outside the server"))
                out.append((Cause.GATEWAY_OVERHEAD, WEAK, f"{seen}: {outside:,.0f} ms outside the server"))
        elif GATEWAY.inside(outside, client):
            out.append((Cause.SLOW_NETWORK, 1 / STRONG, f"{seen}: the time is spent in the server"))
            out.append((Cause.GATEWAY_OVERHEAD, 1 / STRONG, f"{seen}: nothing in front of the model costs time"))
            if (r.server_ttft_ms or 0) >= FLOOR.floor_ms and (queue is None or queue <= QUEUE.not_queued_ms):
                out.append((Cause.SERVER_FLOOR, WEAK, f"{seen}, not queued: work done per request"))
    return out, impacts


def _repeat(r: RepeatPromptResult, f: Facts) -> tuple[list[Seen], Impacts]:
    first = r.first.ttft_ms or 0.0
    extra = first - f.warm_ttft_ms
    per = extra / r.prompt_tokens if r.prompt_tokens else 0.0
    saved = r.saved_ms or 0.0
    seen = (f"{r.prompt_tokens} prompt tokens twice: first token {first:,.0f} ms, then "
            f"{r.second.ttft_ms or 0:,.0f} ms")
    out: list[Seen] = []
    lag = max((t.client_lag_ms or 0.0) for t in (r.first, r.second))
    if explained_by_lag(max(extra, saved), lag):
        return [], {Cause.PREFIX_CACHE_MISS: (max(0.0, extra), f"prefill of a repeated {r.prompt_tokens}-token prompt")}
    if per >= PREFILL_AT.slow_token_ms and extra >= PREFILL_AT.min_extra_ms:
        out.append((Cause.LONG_PREFILL, STRONG, f"{seen}: {per:.2f} ms per prompt token"))
    elif per <= PREFILL_AT.fast_token_ms:
        out.append((Cause.LONG_PREFILL, 1 / STRONG, f"{seen}: {per:.2f} ms per prompt token"))
    if saved >= max(CACHE.saved_ms, CACHE.saved_share * extra):
        out.append((Cause.PREFIX_CACHE_MISS, 1 / DECISIVE, f"{seen}: the repeat was served from the prefix cache"))
    elif extra >= PREFILL_AT.min_extra_ms and saved <= CACHE.recomputed_share * extra:
        out.append((Cause.PREFIX_CACHE_MISS, STRONG, f"{seen}: the repeat was computed again"))
    return out, {Cause.PREFIX_CACHE_MISS: (max(0.0, extra), f"prefill of a repeated {r.prompt_tokens}-token prompt")}


def _transport(r: TransportResult, f: Facts) -> tuple[list[Seen], Impacts]:
    out: list[Seen] = []
    impacts: Impacts = {}
    rtt = r.rtt_ms
    if rtt is not None:
        seen = f"round trip {rtt:,.1f} ms (raw TCP, {len(r.connect_ms)} connections)"
        if rtt >= NET.slow_rtt_ms:
            out.append((Cause.SLOW_NETWORK, DECISIVE, seen))
        elif rtt <= NET.fast_rtt_ms:
            out.append((Cause.SLOW_NETWORK, 1 / DECISIVE, seen))
        impacts[Cause.SLOW_NETWORK] = (rtt, "one round trip per request")
    ka = r.keepalive
    works = ka.reuse_works
    if works is False:
        close = " (the server answers Connection: close)" if ka.server_close_header else ""
        out.append((Cause.NO_KEEPALIVE, DECISIVE,
                    f"{ka.fresh} of {ka.requests} requests opened a new connection{close}"))
        if ka.handshake_p50_ms is not None:
            impacts[Cause.NO_KEEPALIVE] = (ka.handshake_p50_ms, "connect + TLS paid by every request")
    elif works is True:
        out.append((Cause.NO_KEEPALIVE, 1 / DECISIVE, f"{ka.reused} of {ka.requests} requests reused a connection"))
    return out, impacts


#: A test's reading of its probe's result: what it says about the hypotheses, and their impacts.
Reading = tuple[list[Seen], Impacts]


def _no_needs(ctx: Context) -> str | None:
    return None


def _sends(ctx: Context) -> bool:
    return False


class FollowUpTest(Protocol):
    """What the planner knows of a follow-up test, whatever its probe's result type."""

    @property
    def probe(self) -> AnyProbe: ...
    @property
    def title(self) -> str: ...
    @property
    def separates(self) -> Mapping[Cause, tuple[float, float]]: ...

    def sources(self) -> tuple[AnyProbe, ...]:
        """Its probe, then the checklist probes whose result serves as well."""

    def cost(self, facts: Facts, options: Options) -> tuple[int, float]:
        """(requests at most, seconds estimated) of running it."""

    def unmet(self, ctx: Context) -> str | None:
        """Why it cannot run here (None: it can)."""

    def answered_by_checklist(self, ctx: Context) -> bool:
        """Whether its probe would read the checklist's measurements and send nothing."""

    def outcome(self, ctx: Context, facts: Facts, source: AnyProbe | None = None) -> Reading:
        """Measure (or read, from `source`) its probe and read the result; `ProbeUnavailable` when none."""


@dataclass(frozen=True)
class FollowUp(Generic[T]):
    """A test the planner can order: its probe, the hypotheses it separates, its cost and its reading.

    `separates` maps a hypothesis to (sensitivity, false-positive rate) of a positive outcome.
    Its cost is the probe's declared request plan and `seconds` from the first pass. `also`
    names checklist probes whose result serves as well (measured by an opt-in such as
    ``--concurrency``).
    """

    probe: Probe[T]
    title: str
    separates: dict[Cause, tuple[float, float]]
    seconds: Callable[[Facts, Options], float]
    read: Callable[[T, Facts], Reading]
    also: tuple[Probe[T], ...] = ()
    needs: Callable[[Context], str | None] = _no_needs
    #: Whether the probe would answer from the checklist's measurements (then the test costs nothing).
    reuses: Callable[[Context], bool] = _sends

    def sources(self) -> tuple[AnyProbe, ...]:
        return (self.probe, *self.also)

    def cost(self, facts: Facts, options: Options) -> tuple[int, float]:
        return self.probe.max_requests(options), self.seconds(facts, options)

    def unmet(self, ctx: Context) -> str | None:
        return self.needs(ctx)

    def answered_by_checklist(self, ctx: Context) -> bool:
        return self.reuses(ctx)

    def outcome(self, ctx: Context, facts: Facts, source: AnyProbe | None = None) -> Reading:
        probe = next((p for p in (self.probe, *self.also) if p is source), self.probe)
        return self.read(ctx.get(probe), facts)


def _sweep_seconds(f: Facts, options: Options) -> float:
    per = f.decode_ms or 0.0
    policy = options.request
    return policy.sweep_repeats * sum(f.warm_ttft_ms + n * per for n in policy.sweep_max_tokens) / 1000


def _needs_metrics(ctx: Context) -> str | None:
    m = ctx.optional(SERVER_METRICS)
    if m is None:
        return "no backend metrics"
    if m.before.ttft is None and m.before.queue_time is None:
        return f"{m.backend} exports no TTFT or queue-time histogram"
    return None


def _baseline_bracket_serves(ctx: Context) -> bool:
    from llmdoctor.probes.followup import baseline_bracket

    return _needs_metrics(ctx) is None and baseline_bracket(ctx) is not None


# Built without a type context, so each test keeps its probe's result type.
_TESTS = (
    FollowUp(SWEEP, "output-length sweep (decode vs floor)",
             {Cause.SLOW_DECODE: (0.95, 0.05), Cause.SERVER_FLOOR: (0.7, 0.3), Cause.REPLICA_IMBALANCE: (0.8, 0.05)},
             _sweep_seconds, _sweep),
    FollowUp(TRANSPORT, "fresh vs reused connections, round trip (raw TCP)",
             {Cause.SLOW_NETWORK: (0.95, 0.05), Cause.NO_KEEPALIVE: (0.95, 0.05)}, lambda f, o: 1.0, _transport),
    FollowUp(PREFILL, "prompt-length sweep (prefill vs fixed cost)",
             {Cause.LONG_PREFILL: (0.95, 0.05), Cause.SERVER_FLOOR: (0.7, 0.3)},
             lambda f, o: 2 * f.warm_ttft_ms / 1000 + 0.5, _prefill),
    FollowUp(LONE_REQUEST, "metrics deltas around a lone request (server queue vs work)",
             {Cause.QUEUEING: (0.9, 0.1), Cause.SLOW_NETWORK: (0.8, 0.2), Cause.SERVER_FLOOR: (0.7, 0.3),
              Cause.GATEWAY_OVERHEAD: (0.8, 0.2)},
             lambda f, o: f.warm_total_ms / 1000 + 0.1, _lone, needs=_needs_metrics,
             reuses=_baseline_bracket_serves),
    FollowUp(FOLLOWUP_CONCURRENCY, "concurrency step: 1 vs 2 at once (queueing vs compute)",
             {Cause.QUEUEING: (0.95, 0.05), Cause.SERVER_FLOOR: (0.7, 0.3)},
             lambda f, o: 4 * f.warm_total_ms / 1000, read_concurrency, also=(CONCURRENCY,)),
    FollowUp(REPEAT_PROMPT, "repeated identical long prompt (prefix-cache effect)",
             {Cause.PREFIX_CACHE_MISS: (0.8, 0.2), Cause.LONG_PREFILL: (0.7, 0.3)},
             lambda f, o: 2 * f.warm_ttft_ms / 1000 + 0.5, _repeat),
    FollowUp(FOLLOWUP_IDLE, "idle test (scale-to-zero / keep-alive unload)",
             {Cause.COLD_START: (0.8, 0.2)},
             lambda f, o: (o.request.idle_test_s or DEFAULT_IDLE_S) + f.warm_total_ms / 1000, _idle, also=(IDLE,)),
)
FOLLOWUPS: tuple[FollowUpTest, ...] = _TESTS
