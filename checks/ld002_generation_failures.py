"""LD002: generation requests that fail after the first one succeeded (or failed alone)."""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence

from llmdoctor.analysis.failures import (
    FailurePattern,
    client_failures,
    client_reasons,
    counts_as_trouble,
    failure_pattern,
    signs_of_503,
)
from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check, CheckSkipped
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.measurements.ledger import RequestOutcome
from llmdoctor.measurements.timing import FailedBy
from llmdoctor.probes.catalog import FIRST_REQUEST, OUTCOMES
from llmdoctor.probes.client import parse_retry_after

SOURCE = "request_outcomes"
#: The group of the failures the path to the server caused (a proxy or gateway, a dropped connection).
PATH = "path"


class GenerationFailures(Check):
    """Generation failures after the first request: refusals, server errors, cut or empty answers.

    ## What it checks
    Reads the outcome of every generation request of the run (probe
    ``request_outcomes``: status, error class, retry, empty or cut answer,
    ``Retry-After`` and ``x-ratelimit-*`` headers) and reports those after the
    first (LD001 judges the first) that failed, grouped by cause, with their
    share and pattern: every Nth request, in bursts, or after a pace (refused
    when sent too soon after the last accepted one). A 429 is rate limiting. A
    503 is decided from its evidence: an HTML error page (nginx, haproxy and
    balancers answer with one), an answer far faster than the model's, or
    refusals that follow the pacing of the requests are a gateway limiting in
    front of the model, not the model loading; a loading message is a cold
    start (LD305); other 503s, 5xx, timeouts and cut or empty answers are
    server errors. A 400/404/422 (a parameter or optional route the server
    does not have, which the probes handle) does not count.

    Each failed request carries who failed it, as the client classified it. A
    failure of the path (a proxy or gateway that closed or reset the request or
    answered with its own HTML error page, a pooled connection dropped in
    between) is reported as the path's, never as the server's. A request this
    client failed itself (``[Errno 24] Too many open files``, no free local
    port, its own deadline) is not the endpoint's at all: it is an info finding
    ("this client failed N requests: too many open files") under the client's
    limits, which LD501 names with its fix and outranks.

    ## Why it adds latency
    A refused request costs the application a wait and a retry (``Retry-After``
    seconds, or a back-off), a failed one its whole timeout; and the doctor's own
    statistics are computed on fewer samples than it asked for. A limit in front
    of the model that answers 503 makes clients believe the model is loading.

    ## Example
    ``3 of 6 generation requests after the first were refused (50%): HTTP 429,
    every 2nd request; Retry-After 1 s`` — a warning naming rate limiting.

    ## Fix
    Stay under the limit or raise it: honour ``Retry-After`` with back-off and
    jitter, queue and smooth bursts on the client, ask for a higher limit; for
    a gateway's limit (nginx ``limit_req``, haproxy stick tables), raise its rate
    or ``burst``, and have it answer 429 with ``Retry-After`` instead of 503. For
    server errors, read the server's log (``--log``) around the failures.

    ## Caveats
    The probes pause after a refusal (``Retry-After``, else 1 s) and stop after
    two in a row, so a hard limit leaves few requests to read a pattern from;
    the pattern of a few requests is a hint, not proof. A limit keyed on time
    and one keyed on a request count look alike when the doctor itself paces.
    """

    id = "LD002"
    name = "generation-failures"
    title = "Generation requests failing after the first"
    category = Category.ENDPOINT
    requires = (OUTCOMES,)
    optional = (FIRST_REQUEST,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        gens = ctx.get(OUTCOMES).generations
        if len(gens) < 2:
            raise CheckSkipped(f"{len(gens)} generation request(s) sent: nothing after the first to judge")
        later = gens[1:]
        mine = client_failures(later)
        if mine:
            yield _client_finding(mine, later)
        troubled = [r for r in later if counts_as_trouble(r)]
        if not troubled:
            return
        pattern = failure_pattern(gens)
        groups: dict[Cause | str, list[tuple[RequestOutcome, str]]] = {}
        for r in troubled:
            cause, why = _cause(r, gens, pattern)
            if cause is not None:
                groups.setdefault(cause, []).append((r, why))
        for cause, members in groups.items():
            yield _finding(cause, members, later, pattern, _described(members, gens, pattern))


def _cause(r: RequestOutcome, gens: Sequence[RequestOutcome],
           pattern: FailurePattern) -> tuple[Cause | str | None, str]:
    """The cause of one failure (`PATH`: the path's) and a key for how it showed (failures alike are described once)."""
    if r.status == 429:
        return Cause.RATE_LIMITING, "HTTP 429"
    if r.status == 503:
        who, signs = signs_of_503(r, gens, pattern)
        if who == "loading":
            return None, ""  # the model loading: LD305's cold start
        return (Cause.RATE_LIMITING if who == "gateway" else Cause.SERVER_ERRORS), "503:" + ",".join(signs)
    if r.failed_by == FailedBy.PATH:
        return PATH, r.label
    return Cause.SERVER_ERRORS, r.label


def _described(members: Sequence[tuple[RequestOutcome, str]], gens: Sequence[RequestOutcome],
               pattern: FailurePattern) -> list[str]:
    """One phrase per way the failures showed: ``HTTP 429 ×3``, ``HTTP 503 ×4 from a gateway (…)``."""
    by_key: dict[str, list[RequestOutcome]] = {}
    for r, key in members:
        by_key.setdefault(key, []).append(r)
    out = []
    for key, rs in by_key.items():
        if not key.startswith("503:"):
            out.append(f"{key} ×{len(rs)}")
            continue
        who, signs = signs_of_503(rs[0], gens, pattern)
        ttfbs = [r.ttfb_ms for r in rs if r.ttfb_ms is not None]
        if "instant" in signs and ttfbs:
            ok = signs["instant"].rsplit(" where ", 1)[-1]
            signs["instant"] = f"answered in {min(ttfbs):,.1f}–{max(ttfbs):,.1f} ms where {ok}"
        what = "from a gateway in front of the model" if who == "gateway" else "from the server"
        out.append(f"HTTP 503 ×{len(rs)} {what} ({'; '.join(signs.values())})")
    return out


def _share(n: int, of: int) -> str:
    return f"{n} of {of} generation requests after the first"


def _evidence(members: Sequence[tuple[RequestOutcome, str]], later: Sequence[RequestOutcome],
              pattern: FailurePattern) -> list[Evidence]:
    failed = [r for r, _ in members]
    out = [Evidence("failed", len(failed), "", SOURCE),
           Evidence("of generation requests after the first", len(later), "", SOURCE),
           Evidence("share", round(100 * len(failed) / len(later), 1), "%", SOURCE),
           Evidence("pattern", pattern.text, "", SOURCE)]
    statuses: dict[str, int] = {}
    for r in failed:
        statuses[r.label] = statuses.get(r.label, 0) + 1
    out.append(Evidence("outcomes", ", ".join(f"{n} × {k}" for k, n in statuses.items()), "", SOURCE))
    probes: dict[str, list[int]] = {}
    for r in later:
        counts = probes.setdefault(r.probe or "other", [0, 0])
        counts[0] += r in failed
        counts[1] += 1
    out.append(Evidence("failed by probe", ", ".join(f"{p} {f}/{n}" for p, (f, n) in probes.items() if f), "", SOURCE))
    retry_after = sorted({r.retry_after for r in failed if r.retry_after})
    out.append(Evidence("Retry-After", ", ".join(retry_after) if retry_after else "none sent", "", "response headers"))
    limits: dict[str, str] = {}
    for r in failed:
        limits.update(r.rate_limit)
    out += [Evidence(name, value, "", "response headers") for name, value in sorted(limits.items())]
    servers = sorted({r.server for r in failed if r.server})
    if servers:
        out.append(Evidence("answered by (Server header)", ", ".join(servers), "", "response headers"))
    retried = sum(1 for r in later if r.retried)
    if retried:
        out.append(Evidence("retried after a wait", retried, "", SOURCE))
    return out


def _impact(failed: Sequence[RequestOutcome], later: Sequence[RequestOutcome]) -> tuple[float | None, str]:
    waits = [w for w in (parse_retry_after(r.retry_after) for r in failed) if w is not None]
    if not waits:
        return None, "requests refused; the wait before a retry is the client's back-off (no Retry-After sent)"
    share = len(failed) / len(later)
    wait_ms = statistics.median(waits) * 1000.0
    return round(share * wait_ms, 1), (f"{share:.0%} of requests wait Retry-After ({wait_ms / 1000:g} s) "
                                       "before their retry: the expected cost per request")


def _client_finding(mine: Sequence[RequestOutcome], later: Sequence[RequestOutcome]) -> Finding:
    """Requests this client failed itself: info under the client's limits (LD501 names the limit)."""
    reasons = client_reasons(mine)
    short = reasons.split(" (")[0]
    return Finding(
        Severity.INFO, Confidence.HIGH,
        f"This client failed {len(mine)} requests: {short}",
        f"This client failed {len(mine)} of {len(later)} generation requests after the first itself, before "
        f"the server saw them: {reasons}. They are not the server's failures: its error counts and statistics "
        "leave them out.",
        Fix("Give this client what it ran out of.", (
            "Open files: raise the limit (`ulimit -n 65536`, systemd `LimitNOFILE=65536`, Docker "
            "`--ulimit nofile=65536`), or lower --concurrency; LD501 reads the limit.",
            "Ephemeral ports: reuse connections (one long-lived client), or widen net.ipv4.ip_local_port_range.",
        )),
        evidence=(Evidence("failed by this client", len(mine), "", SOURCE),
                  Evidence("of generation requests after the first", len(later), "", SOURCE),
                  Evidence("what ran out", reasons, "", SOURCE)),
        impact_basis="requests this client could not send; not a cost of the endpoint",
        cause=Cause.CLIENT_LIMITS,
    )


def _path_finding(members: Sequence[tuple[RequestOutcome, str]], later: Sequence[RequestOutcome],
                  pattern: FailurePattern, reasons: Sequence[str]) -> Finding:
    failed = [r for r, _ in members]
    share = len(failed) / len(later)
    counted = f"{_share(len(failed), len(later))} ({share:.0%})"
    return Finding(
        Severity.CRITICAL if share >= 0.5 else Severity.WARNING,
        Confidence.HIGH if len(failed) >= 2 else Confidence.MEDIUM,
        f"Failures on the path to the server: {counted} failed",
        f"{counted.capitalize()} failed between this client and the model server, not in it: "
        f"{'; '.join(reasons)}. Pattern: {pattern.text}.",
        Fix("Find what closes, resets or answers for the server on the way.", (
            "A proxy or gateway's timeouts (nginx proxy_read_timeout, haproxy timeout server/client) "
            "shorter than the longest answer cut the stream.",
            "A pooled connection dropped in between: keep the client's idle timeout below the proxy's "
            "and the server's keep-alive timeout.",
            "An HTML error page is a gateway's: check its backends' health and its error log.",
        )),
        impact_basis="failed requests cost the application a retry or an error",
        evidence=tuple(_evidence(members, later, pattern)),
    )


def _finding(cause: Cause | str, members: Sequence[tuple[RequestOutcome, str]], later: Sequence[RequestOutcome],
             pattern: FailurePattern, reasons: Sequence[str]) -> Finding:
    if not isinstance(cause, Cause):
        return _path_finding(members, later, pattern, reasons)
    failed = [r for r, _ in members]
    share = len(failed) / len(later)
    impact, basis = _impact(failed, later)
    evidence = tuple(_evidence(members, later, pattern))
    confidence = Confidence.HIGH if len(failed) >= 2 else Confidence.MEDIUM
    counted = f"{_share(len(failed), len(later))} ({share:.0%})"
    if cause is Cause.RATE_LIMITING:
        gateway = any("gateway" in why for why in reasons)
        who = "a gateway in front of the model limits the request rate" if gateway else "the endpoint rate-limits"
        return Finding(
            Severity.WARNING, confidence,
            f"Rate limiting: {counted} were refused",
            f"{counted.capitalize()} were refused: {'; '.join(reasons)}. Pattern: {pattern.text}. {who.capitalize()}"
            + (" — not the model loading" if gateway else "")
            + "; statistics from the remaining requests rest on fewer samples than asked.",
            Fix("Stay under the limit, or raise it.", (
                "Honour Retry-After with exponential back-off and jitter; queue and smooth bursts on the client.",
                "Ask the provider for a higher limit, or spread the load over keys, regions or replicas.",
                "A gateway's limit (nginx limit_req, haproxy stick tables): raise its rate or burst (nginx "
                "'burst=N nodelay'), and make it answer 429 with Retry-After rather than 503 "
                "(nginx limit_req_status 429).",
            )),
            impact_ms=impact, impact_basis=basis, evidence=evidence, cause=cause,
            # the share that was refused is already in the impact: the expected cost per request
            frequency=Frequency.EVERY_REQUEST,
        )
    severity = Severity.CRITICAL if share >= 0.5 else Severity.WARNING
    return Finding(
        severity, confidence,
        f"Generation failures: {counted} failed",
        f"{counted.capitalize()} failed: {'; '.join(reasons)}. Pattern: {pattern.text}.",
        Fix("Find out why the server fails some requests.", (
            "Read the server's log around the failures (pass it with --log: LD206 reads OOMs, CUDA errors, crashes).",
            "Check restarts and memory (OOM kills), and proxy timeouts that cut long streams "
            "(nginx proxy_read_timeout).",
            "A 503 without a loading message is an overloaded or restarting server: add capacity or shed load earlier.",
        )),
        impact_basis="failed requests cost the application a retry or an error", evidence=evidence, cause=cause,
    )
