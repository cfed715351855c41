"""LD501: the open-file limit is too low for the connections the workload at hand keeps open."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Severity
from llmdoctor.probes.catalog import CLIENT_LIMITS

#: Descriptors any client needs beyond its open ones, with no workload declared: a pooled HTTP client
#: keeps a few connections, resolves names, reads certificates (a Python client under a limit of 24
#: opened ~21 sockets, then EMFILE).
MIN_ROOM = 16


def workload_streams(concurrency: int, fleet: int) -> tuple[int, str]:
    """The sockets the workload at hand keeps open at once, and how it was declared (0: none declared).

    `concurrency`: ``--concurrency N`` (0: not given); `fleet`: the endpoints this process diagnoses at
    once (a fleet run; 0 or 1: one endpoint), each with its own connections, at least one.
    """
    if fleet > 1:
        each = max(concurrency, 1)
        per = f" x --concurrency {concurrency}" if concurrency > 0 else ", one connection each"
        return fleet * each, f"a fleet of {fleet} endpoints at once{per}"
    if concurrency > 0:
        return concurrency, f"--concurrency {concurrency}"
    return 0, "one client, no --concurrency"


class FdLimit(Check):
    """Open-file limit too low for the workload: each connection is a file descriptor.

    ## What it checks
    Reads this process's `RLIMIT_NOFILE` (soft and hard) and how many descriptors it
    already holds, and compares what is left with the workload at hand: the streams
    declared with `--concurrency N` each hold one socket at once, and a fleet
    (`--endpoints FILE`) diagnoses up to 8 endpoints at once in this one process,
    each with its own connections (at least one; N with `--concurrency N`). Fires
    (warning) when they would not fit under the soft limit, or, with no workload
    declared, when fewer than 16 descriptors are left (any pooled client runs into
    that). A default limit that the workload does not reach is not a finding:
    Linux's usual soft limit of 1,024 passes a check without `--concurrency`, and
    a fleet of 8 endpoints at `--concurrency 64` (512 sockets) too.

    ## Why it adds latency
    Every socket uses a descriptor. A client that hits the limit gets `EMFILE: Too
    many open files`: new connections fail or wait in retry loops, which shows up as
    errors and latency spikes under load, long before the server is busy.

    ## Example
    Soft limit 48 (hard 524288), 11 descriptors open, `--concurrency 64`: 64 streams
    need 64 sockets and only 37 fit.

    ## Fix
    Raise the soft limit for the service: `ulimit -n 65536`, `LimitNOFILE=65536` in
    the systemd unit, `--ulimit nofile=65536` for containers; Python can raise it up
    to the hard limit with `resource.setrlimit`. Or cap the client's concurrency
    (its pool size) below what the limit leaves.

    ## Caveats
    This is the doctor's own process; run it as the application's user/unit to see
    the application's limit. The workload is what you declare: a gateway fanning out
    500 streams from a 1,024 limit is found only when `--concurrency` says so (at
    most 64 here), and each stream is counted as one socket (a gateway holds two).
    In a fleet, the descriptors open when the limits are read include the sockets
    the other endpoints' diagnoses held then: counted twice, at most a few.
    """

    id = "LD501"
    name = "fd-limit"
    title = "Low open-file limit"
    category = Category.CLIENT
    requires = (CLIENT_LIMITS,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        limits = ctx.get(CLIENT_LIMITS)
        soft, room = limits.nofile_soft, limits.fd_room
        if soft is None or room is None:
            return
        concurrency = ctx.options.network.concurrency
        fleet = ctx.options.network.fleet_size
        streams, workload = workload_streams(concurrency, fleet)
        held = limits.open_fds
        held_note = f"{held} already open, " if held is not None else ""
        if streams > 0:
            if streams <= room:
                return
            message = (f"The soft open-file limit is {soft} ({held_note}{max(room, 0)} left); the declared "
                       f"workload ({workload}) keeps {streams} streams open at once, one socket each: "
                       f"about {streams - max(room, 0)} of them would fail with EMFILE (Too many open files) "
                       "before the server is busy.")
        else:
            if room >= MIN_ROOM:
                return
            workload = "one client, no --concurrency"
            message = (f"The soft open-file limit is {soft} ({held_note}{max(room, 0)} left): fewer than "
                       f"{MIN_ROOM} descriptors for connections, so even one pooled client runs into EMFILE "
                       "(Too many open files).")
        hard = "unlimited" if limits.nofile_hard is None else limits.nofile_hard
        yield Finding(
            severity=Severity.WARNING,
            confidence=Confidence.HIGH if held is not None else Confidence.MEDIUM,
            title=f"Open-file limit {soft} is too low for {workload}",
            message=message,
            impact_ms=None,
            impact_basis="failed connections under the declared concurrency, not a fixed cost",
            evidence=(
                Evidence("RLIMIT_NOFILE soft", soft, "", "client_limits"),
                Evidence("RLIMIT_NOFILE hard", hard, "", "client_limits"),
                Evidence("descriptors open", "unknown" if held is None else held, "", "client_limits"),
                Evidence("streams at once", streams, "",
                         "--endpoints (endpoints at once) x --concurrency" if fleet > 1 else "--concurrency"),
            ),
            fix=Fix(
                "Raise the open-file limit for the client service",
                (
                    "Shell: `ulimit -n 65536`; systemd: `LimitNOFILE=65536`; Docker: `--ulimit nofile=65536`.",
                    "In Python: resource.setrlimit(RLIMIT_NOFILE, (hard, hard)) at start-up.",
                    f"Or keep the client's concurrency (its connection pool) under {max(room, 1)}.",
                ),
            ),
            cause=Cause.CLIENT_LIMITS,
        )
