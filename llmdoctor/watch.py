"""Watch mode: re-run the cheap probes every few seconds and show the breakdown live.

Each round is a fresh, small diagnosis (reachability and the "Say ok."
baseline: LD001, LD701) with its own request budget; the terminal shows the
rounds so far and the latest waterfall (rich Live), for watching a deploy
roll out. Ctrl-C stops cleanly between or inside rounds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.live import Live

from llmdoctor.report import Report
from llmdoctor.target import Options, Target

__all__ = ["WATCH_CHECKS", "watch"]

WATCH_CHECKS = ("LD001", "LD701")


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v:,.0f} ms"


def _view(rounds: list[tuple[str, Report]], interval: float) -> RenderableType:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"llmdoctor watch — every {interval:g} s (Ctrl-C to stop)")
    for col in ("time", "status", "TTFT p50", "TTFT p90", "total p50", "first token", "decode", "requests"):
        table.add_column(col, justify="left" if col in ("time", "status") else "right")
    for stamp, r in rounds[-15:]:
        b = r.breakdown
        phases = {p.name: p.ms for p in b.phases} if b is not None else {}
        ttft50, ttft90, total50 = (b.ttft_p50_ms, b.ttft_p90_ms, b.total_p50_ms) if b is not None else (None,) * 3
        table.add_row(stamp, r.status.upper(), _ms(ttft50), _ms(ttft90), _ms(total50),
                      _ms(phases.get("wait for first token")), _ms(phases.get("decode")), str(r.requests_sent))
    parts: list[RenderableType] = [table]
    last = rounds[-1][1] if rounds else None
    if last is not None and last.breakdown is not None:
        b = last.breakdown
        longest = max((p.ms for p in b.phases), default=0.0) or 1.0
        for p in b.phases:
            parts.append(Text(f"  {p.name:<22}{_ms(p.ms):>10} {'█' * int(p.ms / longest * 30)}"))
    if last is not None and last.findings:
        parts.append(Text(f"  {last.findings[0].check_id} {last.findings[0].title}", style="yellow"))
    return Group(*parts)


def watch(
    target: Target,
    options: Options,
    *,
    interval_s: float,
    count: int = 0,
    fail_on: str = "warning",
    emit_json: Callable[[Report], None] | None = None,
    live: bool = True,
) -> int:
    """Run rounds until `count` are done (0: until Ctrl-C); returns the last round's exit code."""
    from llmdoctor.doctor import diagnose

    rounds: list[tuple[str, Report]] = []
    live_view: Live | None = None
    if live and emit_json is None:
        from rich.live import Live

        live_view = Live(_view(rounds, interval_s), refresh_per_second=4, transient=False)
        live_view.start()
    try:
        n = 0
        while count <= 0 or n < count:
            started = time.monotonic()
            report, _ = diagnose(target, options, selected=WATCH_CHECKS, fail_on=fail_on)
            if report.interrupted:  # Ctrl-C inside a round: keep the last complete one
                break
            rounds.append((datetime.now().strftime("%H:%M:%S"), report))
            n += 1
            if emit_json is not None:
                emit_json(report)
            elif live_view is not None:
                live_view.update(_view(rounds, interval_s))
            if count > 0 and n >= count:
                break
            time.sleep(max(0.0, interval_s - (time.monotonic() - started)))
    except KeyboardInterrupt:
        pass
    finally:
        if live_view is not None:
            live_view.stop()
    return rounds[-1][1].exit_code if rounds else 0
