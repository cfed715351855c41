"""LD501: the open-file limit is low for a client that keeps many connections."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Severity
from llmdoctor.probes.catalog import CLIENT_LIMITS

LOW_SOFT = 4096


class FdLimit(Check):
    """Low open-file limit: each connection is a file descriptor.

    ## What it checks
    Reads this process's `RLIMIT_NOFILE` (soft and hard) and fires when the soft
    limit is under 4096.

    ## Why it adds latency
    Every socket uses a descriptor. A high-concurrency client (or a gateway in front
    of the model) that hits the limit gets `EMFILE: Too many open files`: new
    connections fail or wait in retry loops, which shows up as latency spikes.

    ## Example
    Soft limit 1024 (hard 524288) on a gateway that fans out 500 streams.

    ## Fix
    Raise the soft limit for the service: `ulimit -n 65536`, `LimitNOFILE=65536` in
    the systemd unit, `--ulimit nofile=65536` for containers; Python can raise it up
    to the hard limit with `resource.setrlimit`.

    ## Caveats
    This is the doctor's own process; run it as the application's user/unit to see
    the application's limit. Not a problem for a client with few connections.
    """

    id = "LD501"
    name = "fd-limit"
    title = "Low open-file limit"
    category = Category.CLIENT
    requires = (CLIENT_LIMITS,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        limits = ctx.get(CLIENT_LIMITS)
        soft = limits.nofile_soft
        if soft is None or soft >= LOW_SOFT:
            return
        hard = "unlimited" if limits.nofile_hard is None else limits.nofile_hard
        yield Finding(
            severity=Severity.WARNING if soft <= 1024 else Severity.INFO,
            confidence=Confidence.MEDIUM,
            title=f"Open-file limit is {soft}",
            message=(
                f"The soft open-file limit is {soft} (hard {hard}); every connection uses one, so a "
                "client with many concurrent streams fails with EMFILE long before the server is busy."
            ),
            impact_ms=None,
            impact_basis="failures and retries under concurrency, not a fixed cost",
            evidence=(
                Evidence("RLIMIT_NOFILE soft", soft, "", "client_limits"),
                Evidence("RLIMIT_NOFILE hard", hard, "", "client_limits"),
            ),
            fix=Fix(
                "Raise the open-file limit for the client service",
                (
                    "Shell: `ulimit -n 65536`; systemd: `LimitNOFILE=65536`; Docker: `--ulimit nofile=65536`.",
                    "In Python: resource.setrlimit(RLIMIT_NOFILE, (hard, hard)) at start-up.",
                ),
            ),
            cause=Cause.CLIENT_LIMITS,
        )
