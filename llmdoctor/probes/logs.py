"""Probe ``logs``: scan the server's logs (files, stdin, a systemd journal) with `LogScanner`.

Reads ``Options.logs`` (paths; ``-`` is stdin; ``.gz`` files are read compressed),
``Options.journal_unit`` (``journalctl -u UNIT --no-pager -o cat``) and ``Options.since``.
A local probe: it reads this machine only, so it also runs when replaying measurements.
"""

from __future__ import annotations

import gzip
import re
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from llmdoctor.context import ProbeUnavailable
from llmdoctor.logscan import LogScan, LogScanner
from llmdoctor.probes.catalog import LOGS

if TYPE_CHECKING:
    from collections.abc import Callable

    from llmdoctor.context import Context

__all__ = ["scan_logs", "parse_since"]

_RELATIVE = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?|d|days?)(?:\s+ago)?\s*$", re.I
)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(since: str, now: datetime | None = None) -> datetime:
    """Parse ``--since``: ISO date/time (``2024-05-01``, ``2024-05-01 10:00``) or ``30m``, ``2h``, ``1 day ago``.

    Returns an aware UTC datetime; raises ValueError for anything else.
    """
    now = now or datetime.now(timezone.utc)
    m = _RELATIVE.match(since)
    if m:
        unit = m.group(2)[0].lower()
        return now - timedelta(seconds=float(m.group(1)) * _UNITS[unit])
    text = since.strip().replace("Z", "+00:00")
    value = datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def _since_filter(since: datetime) -> Callable[[str], bool]:
    """Keep events whose ISO timestamp is at or after `since`; keep those we cannot date."""

    def keep(stamp: str) -> bool:
        if len(stamp) < 19 or stamp[4] != "-":
            return True  # no year in it (vLLM, syslog): cannot compare honestly
        try:
            value = datetime.fromisoformat(stamp.replace("Z", "+00:00").replace(",", ".")[:26].rstrip())
        except ValueError:
            return True
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value >= since

    return keep


def scan_logs(ctx: Context) -> LogScan:
    """Scan every log source given in the options into one `LogScan`."""
    options = ctx.options
    off = LOGS.off_reason(options)
    if off:
        raise ProbeUnavailable(off)
    since_filter = None
    if options.evidence.since:
        try:
            since_filter = _since_filter(parse_since(options.evidence.since))
        except ValueError:
            raise ProbeUnavailable(
                f"cannot understand --since {options.evidence.since!r} (use e.g. 2h, 30m or 2024-05-01T10:00)"
            ) from None
    scanner = LogScanner(since=options.evidence.since, since_filter=since_filter)
    for path in options.evidence.logs:
        _scan_path(scanner, path)
    if options.evidence.journal_unit:
        _scan_journal(scanner, options.evidence.journal_unit, options.evidence.since)
    result = scanner.result()
    if result.files_read == 0:
        reasons = "; ".join(f"{f.name}: {f.error}" for f in result.files if f.error)
        raise ProbeUnavailable(f"no server log could be read ({reasons})")
    return result


def _scan_path(scanner: LogScanner, path: str) -> None:
    if path == "-":
        scanner.scan_stream(sys.stdin.buffer, "<stdin>")
        return
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as stream:
            scanner.scan_stream(stream, path)  # type: ignore[arg-type]
    except (OSError, EOFError) as exc:
        scanner.add_error(path, exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc))


def _scan_journal(scanner: LogScanner, unit: str, since: str | None) -> None:
    name = f"journal:{unit}"
    exe = shutil.which("journalctl")
    if exe is None:
        scanner.add_error(name, "journalctl not found on this machine")
        return
    cmd = [exe, "-u", unit, "--no-pager", "-o", "cat"]
    if since:
        cmd += ["--since", _journal_since(since)]
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        scanner.add_error(name, f"cannot run journalctl: {exc.strerror or exc}")
        return
    assert proc.stdout is not None and proc.stderr is not None
    info = scanner.scan_stream(proc.stdout, name)
    err = proc.stderr.read().decode("utf-8", "replace").strip()
    code = proc.wait()
    if code != 0 and info.lines == 0:
        scanner.replace_with_error(info, f"journalctl exited with {code}: {err[:200]}")


def _journal_since(since: str) -> str:
    """Translate ``2h`` style values into journalctl's ``-2h``; pass others through."""
    m = _RELATIVE.match(since)
    if m:
        seconds = int(float(m.group(1)) * _UNITS[m.group(2)[0].lower()])
        return f"-{seconds}s"
    return since
