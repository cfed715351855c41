"""Watch mode: re-run the cheap probes every few seconds and show the breakdown live.

Each round is a fresh, small diagnosis (reachability and the "Say ok."
baseline: LD001, LD701) with its own request budget; the terminal shows the
last rounds and the latest waterfall (rich Live), for watching a deploy
roll out. Ctrl-C (or SIGTERM) stops cleanly between or inside rounds.

Bounds: memory holds the last `KEEP_ROUNDS` rounds only (a day of rounds costs what
fifteen do). ``--deadline`` bounds the whole watch: no round starts after it, each gets
at most the time left, and a round it cuts short is neither shown nor counted. The exit
code is the last complete round's; 3 (UNKNOWN) when none completed. What the terminal shows (or
the NDJSON line of a round) is `llmdoctor.render.watch`'s.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.live import Live

from llmdoctor.deadline import Deadline
from llmdoctor.options import Options
from llmdoctor.render.watch import watch_view
from llmdoctor.reporting.report import ExitCode, Report
from llmdoctor.target import Target

__all__ = ["KEEP_ROUNDS", "WATCH_CHECKS", "watch"]

WATCH_CHECKS = ("LD001", "LD701")
#: Rounds kept for the live table (and in memory).
KEEP_ROUNDS = 15


def _cut_short(report: Report) -> bool:
    """Whether the deadline stopped some of this round's measurements."""
    return any(not p.available and p.reason.startswith("deadline reached") for p in report.probes)


def watch(
    target: Target,
    options: Options,
    *,
    interval_s: float,
    count: int = 0,
    fail_on: str = "warning",
    emit_json: Callable[[Report], None] | None = None,
    live: bool = True,
    deadline_at: float | None = None,
    on_round: Callable[[int], None] | None = None,
) -> int:
    """Run rounds until `count` are done (0: until Ctrl-C or the deadline); the last complete round's exit code.

    `deadline_at`: the ``perf_counter()`` instant ``--deadline`` ends (default: counted from now).
    `on_round` is called with the number of rounds done after each one (benchmarks).
    """
    from llmdoctor.doctor import diagnose

    if deadline_at is None and options.request.deadline_s is not None:
        deadline_at = time.perf_counter() + options.request.deadline_s
    deadline = Deadline.until(deadline_at, options.request.deadline_s)
    rounds: deque[tuple[str, Report]] = deque(maxlen=KEEP_ROUNDS)
    last_code: int | None = None
    live_view: Live | None = None
    if live and emit_json is None:
        from rich.live import Live

        live_view = Live(watch_view(rounds, interval_s, keep=KEEP_ROUNDS), refresh_per_second=4, transient=False)
        live_view.start()
    try:
        n = 0
        while (count <= 0 or n < count) and not deadline.expired:
            started = time.monotonic()
            report, _ = diagnose(target, options, selected=WATCH_CHECKS, fail_on=fail_on, deadline_at=deadline_at)
            if report.interrupted:  # Ctrl-C inside a round: keep the last complete one
                break
            if deadline.expired and _cut_short(report):
                break  # the deadline cut this round: it is not a measurement of the endpoint
            rounds.append((datetime.now().strftime("%H:%M:%S"), report))
            last_code = report.exit_code
            n += 1
            if emit_json is not None:
                emit_json(report)
            elif live_view is not None:
                live_view.update(watch_view(rounds, interval_s, keep=KEEP_ROUNDS))
            if on_round is not None:
                on_round(n)
            if count > 0 and n >= count:
                break
            time.sleep(max(0.0, deadline.cap(interval_s - (time.monotonic() - started))))
    except KeyboardInterrupt:
        pass
    finally:
        if live_view is not None:
            live_view.stop()
    return last_code if last_code is not None else ExitCode.UNKNOWN
