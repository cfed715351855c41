"""LD501: the open-file limit is too low for the connections the declared workload keeps open."""

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


class FdLimit(Check):
    """Open-file limit too low for the workload: each connection is a file descriptor.

    ## What it checks
    Reads this process's `RLIMIT_NOFILE` (soft and hard) and how many descriptors it
    already holds, and compares what is left with the workload at hand: the streams
    declared with `--concurrency N` each hold one socket at once. Fires (warning)
    when they would not fit under the soft limit, or, with no workload declared,
    when fewer than 16 descriptors are left (any pooled client runs into that).
    A default limit that the workload does not reach is not a finding: Linux's
    usual soft limit of 1,024 passes a check without `--concurrency`.

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
        streams = ctx.options.network.concurrency
        held = limits.open_fds
        held_note = f"{held} already open, " if held is not None else ""
        if streams > 0:
            if streams <= room:
                return
            workload = f"--concurrency {streams}"
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
                Evidence("streams at once", streams, "", "--concurrency"),
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
