"""The concurrency step's reading: requests sent together against alone, and what a queue costs.

Separate from the other follow-up readings (`llmdoctor.diagnosis.evidence`) because telling a queue
from a fixed cost without the server's metrics takes its own reasoning: the noise between requests sent
at one instant, a pair served in turn, and the wait a request of ours pays (`read_concurrency`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmdoctor.analysis.noise import LAG_FACTOR
from llmdoctor.causes import EXPLAINS_SHARE, Cause
from llmdoctor.diagnosis.confounders import BUSY_CPU, NOISE_MULTIPLE, Confounders, noise_ms
from llmdoctor.diagnosis.facts import Facts, Impacts, Seen
from llmdoctor.diagnosis.scoring import DECISIVE, STRONG, WEAK
from llmdoctor.limits import QUEUEING_LIMITS, SERVER_FLOOR_LIMITS

if TYPE_CHECKING:
    from llmdoctor.measurements.stats import Split
    from llmdoctor.probes.client_limits import ConcurrencyResult

__all__ = ["read_concurrency"]

QUEUE = QUEUEING_LIMITS
FLOOR = SERVER_FLOOR_LIMITS


def read_concurrency(r: ConcurrencyResult, f: Facts) -> tuple[list[Seen], Impacts]:
    """Parallel against alone, interleaved and from the first byte after connect; the server's queue decides.

    A connection opened by a parallel request is not queueing (its set-up is left out); a difference
    the run's noise explains (jitter of identical requests, the spread of the alone repeats, the
    client's lag, doubled on a busy client) is not either; and where the backend reports its own queue
    time of the parallel requests, that decides over the client's inference.
    """
    single = r.single_p50_ms
    parallels = r.parallels
    if not single or not parallels:
        return [], {}
    c = f.confounders
    if c.split is not None and not _one_after_the_other_though_split(r, f, c.split):
        return [], {}  # two populations: parallel requests on different replicas say nothing of a queue
    if r.server_queue_ms is not None:
        q = r.server_queue_ms
        seen = (f"the server's own queue time of the {r.n} parallel requests: {q:,.1f} ms "
                f"(its histogram, {r.server_queue_requests or 0:.0f} requests)")
        if QUEUE.queued(q, single):
            return ([(Cause.QUEUEING, DECISIVE, seen), (Cause.SERVER_FLOOR, 1 / WEAK, f"{seen}: waiting, not work")],
                    {Cause.QUEUEING: (q, "server's mean queue time of requests sent together")})
        if q <= QUEUE.not_queued_ms:
            out: list[Seen] = [(Cause.QUEUEING, 1 / DECISIVE, f"{seen}: not queued, whatever the client saw")]
            if single >= FLOOR.floor_ms:
                out.append((Cause.SERVER_FLOOR, WEAK, f"{seen}: the floor does not depend on load"))
            return out, {}
        return [], {}
    worst = max(parallels)
    # Started together: one after the other, they finish a service time apart; in parallel, together.
    spread = worst - min(parallels) if len(parallels) >= 2 else 0.0
    excess = max(worst - single, spread)
    repeats = max(r.singles) - min(r.singles) if len(r.singles) >= 2 else 0.0
    noise = noise_ms(c, [r.lag_ms], repeats)
    paired = _paired_noise_ms(r, c)
    in_turn = _in_turn(r, f)
    seen = (f"alone {single:,.0f} ms; {r.n} at once, the slowest {worst:,.0f} ms ({worst / single:.2f}×), "
            f"{spread:,.0f} ms between first and last (connection set-up excluded; noise ±{noise:,.0f} ms, "
            f"±{paired:,.0f} ms between requests sent together)")
    slower = worst >= QUEUE.slowdown * single and worst - single >= QUEUE.min_wait_ms
    if slower or (spread >= QUEUE.serial_spread * single and spread >= QUEUE.min_wait_ms):
        if excess >= NOISE_MULTIPLE * noise or in_turn:
            return ([(Cause.QUEUEING, DECISIVE, f"{seen}: served one after the other"),
                     (Cause.SERVER_FLOOR, 1 / WEAK, f"{seen}: latency depends on load, not a fixed cost")],
                    {Cause.QUEUEING: _queue_impact(r, f, excess)})
        if excess >= 1.5 * noise:
            return [(Cause.QUEUEING, WEAK, f"{seen}: slower together, but within a few times the noise")], {}
        return [], {}
    if spread >= max(QUEUE.min_wait_ms, NOISE_MULTIPLE * paired) and not (c.noisy_client or c.server_local and (
            c.host_cpu or 0.0) >= BUSY_CPU):
        # Not together, though no slower than alone: when every request waits (a queue in front of the server
        # behind other clients' streams), alone and together wait alike and the pair finishes one short service
        # apart, a small share of a long wait (found behind a real haproxy with maxconn 1 and three streaming
        # clients: alone 917 ms, the pair 62 ms apart). A fixed cost served in parallel finishes together. On a
        # busy host a busy server's work sets a pair apart too: the old reading stays there.
        return [], {}
    if worst <= QUEUE.no_slowdown * single and spread <= QUEUE.parallel_spread * single:
        out = [(Cause.QUEUEING, 1 / STRONG, f"{seen}: served in parallel")]
        if single >= FLOOR.floor_ms:
            out.append((Cause.SERVER_FLOOR, WEAK, f"{seen}: the floor does not depend on load"))
        return out, {}
    return [], {}


def _paired_noise_ms(r: ConcurrencyResult, c: Confounders) -> float:
    """How far apart the run's noise can set two requests sent at the same instant.

    What varies over time (other clients' load, a queue's waits behind them, the server's state) reaches
    both alike, so neither the baseline's jitter nor the spread of the step's alone requests (sent before
    and after the pair) is noise here: a queue behind other clients makes both by itself, and counting
    them would hide the queue they measure. Two replicas set simultaneous requests apart too, but they
    show as two populations among the warm requests, which silence the step before it is read. What is
    left is the client's own lag while they ran: `LAG_FACTOR` × its worst bounds what it explains
    (`llmdoctor.analysis.noise.explained_by_lag`).
    """
    lag = max((v for v in (r.lag_ms, c.lag_ms) if v is not None), default=0.0)
    return LAG_FACTOR * lag


def _in_turn(r: ConcurrencyResult, f: Facts) -> bool:
    """Whether the last of the requests sent together finished a whole service after the first.

    Served one after the other, the last waits the service of the others: at least about the fastest
    identical request (noise and waits only add latency), and more than the client's lag explains.
    """
    parallels = r.parallels
    if len(parallels) < 2:
        return False
    fastest = _fastest_ms(r, f)
    return max(parallels) - min(parallels) >= max(_paired_noise_ms(r, f.confounders), EXPLAINS_SHARE * fastest)


def _fastest_ms(r: ConcurrencyResult, f: Facts) -> float:
    """The fastest identical "Say ok." request of the run (baseline, alone and together): the service without
    a wait, since waits and noise only add latency (the median warm request when there is none)."""
    return min([*f.floor_samples_ms, *r.singles, *r.parallels], default=f.warm_total_ms)


def _one_after_the_other_though_split(r: ConcurrencyResult, f: Facts, split: Split) -> bool:
    """Two populations among the warm requests, yet the pair was served in turn: a queue made the slow ones.

    Over two replicas, requests sent together run side by side, each at its replica's speed: the first
    to finish is a fast one, or both are slow and finish together. When even the first of the pair is of
    the slow population and the last finished a whole service after it, they waited for each other: the
    slow warm requests are requests that waited their turn (found on the simulator's one-slot queueing
    profile behind another client on a busy host: warm requests of 186, 188 and 339-380 ms, the pair 365
    then 549 ms).
    """
    return _in_turn(r, f) and min(r.parallels) >= min(split.slow)


def _queue_impact(r: ConcurrencyResult, f: Facts, excess: float) -> tuple[float, str]:
    """What a request of ours waits in the queue: the largest wait the run measured on its own requests.

    Behind other clients' requests every request of ours waits, alone too, which the step's difference
    between alone and together (`excess`) leaves out. Waits and noise only add latency, so the fastest
    identical request is the service without a wait, and what a request pays above it is its wait:
    the typical wait is the median warm "Say ok." request over the fastest identical one; the sweep's
    wait is its fixed part (what each of its requests paid before its tokens) over the fastest first
    token less one token's decode, the fixed cost without a wait. The sweep's requests are a sample of
    their own: under a queue behind others their fixed part is mostly waiting (found on the simulator's
    one-slot queueing profile behind another client on a busy host: a 150 ms floor, a fixed part of
    330-376 ms, the typical wait 169-185 ms, the first token at best 156-169 ms), and the queue that
    made it is what it costs.
    """
    fastest = _fastest_ms(r, f)
    candidates = [(excess, "extra wait of a request queued behind one other"),
                  (f.warm_total_ms - fastest,
                   f'median warm "Say ok." request ({f.warm_total_ms:,.0f} ms) over the fastest identical one '
                   f"({fastest:,.0f} ms): its wait in the queue")]
    if f.sweep_fixed_ms is not None and f.first_token_floor_ms is not None:
        # The line's fixed part is the total of a 0-token answer: the fastest first token less one token.
        unwaited = f.first_token_floor_ms - (f.decode_ms or 0.0)
        candidates.append((f.sweep_fixed_ms - unwaited,
                           f"the sweep's fixed part ({f.sweep_fixed_ms:,.0f} ms, paid by every request of it) over "
                           f"the fastest first token of an identical request less one token ({unwaited:,.0f} ms): "
                           "the wait in the queue of every request of the sweep"))
    return max(candidates, key=lambda c: c[0])
