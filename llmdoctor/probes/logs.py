"""Probe ``logs``: scan the server's logs (files, stdin, a systemd journal) with `LogScanner`.

Reads ``Options.logs`` (paths; ``-`` is stdin; ``.gz`` files are read compressed),
``Options.journal_unit`` (``journalctl -u UNIT --no-pager -o cat``) and ``Options.since``.
A local probe: it reads this machine only, so it also runs when replaying measurements.

Reading is bounded, whatever the source: at most `MAX_LOG_BYTES` of each (decompressed:
a gzip bomb stops there too), never past the run's ``--deadline``, and a pipe
(``--log -``, journalctl) that sends nothing for `LOG_IDLE_S` seconds ends (``tail -f`` or
``/dev/zero`` on stdin end). What was read is scanned; the rest is listed as a source
"not read", with why. journalctl runs as a child that dies with llmdoctor (it is stopped
when its reading ends, and on Linux gets SIGTERM if llmdoctor is killed).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from llmdoctor.context import ProbeUnavailable
from llmdoctor.inputs.bounded import MIB, BoundedStream, InputError, open_input
from llmdoctor.logs.scan import LogScan, LogScanner
from llmdoctor.probes.catalog import LOGS

if TYPE_CHECKING:
    from collections.abc import Callable

    from llmdoctor.context import Context
    from llmdoctor.deadline import Deadline

__all__ = ["LOG_IDLE_S", "MAX_LOG_BYTES", "scan_logs", "parse_since"]

#: The most read of one log source, decompressed (~7 s of scanning).
MAX_LOG_BYTES = 512 * MIB
#: A log pipe (stdin, journalctl) that sends nothing for this long is at its end for the scan.
LOG_IDLE_S = 10.0

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
    deadline = ctx.deadline
    for path in options.evidence.logs:
        _scan_path(scanner, path, deadline)
    if options.evidence.journal_unit:
        _scan_journal(scanner, options.evidence.journal_unit, options.evidence.since, deadline)
    result = scanner.result()
    if result.files_read == 0:
        reasons = "; ".join(f"{f.name}: {f.error}" for f in result.files if f.error)
        raise ProbeUnavailable(f"no server log could be read ({reasons})")
    return result


def _scan_bounded(scanner: LogScanner, stream: BoundedStream, name: str, compressed: bool,
                  deadline: Deadline) -> None:
    """Scan `stream` (decompressing it when `compressed`); note the part not read, if any."""
    source: Any = stream
    inner: BoundedStream | None = None
    try:
        if compressed:
            unzipped = gzip.GzipFile(fileobj=io.BufferedReader(stream, 1 << 16))
            inner = BoundedStream(unzipped.read, name, limit=MAX_LOG_BYTES, deadline=deadline, stop="eof")
            source = inner
        scanner.scan_stream(source, name)  # a binary stream with readinto, as scan_stream reads it
    except (OSError, EOFError) as exc:
        scanner.add_error(name, exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc))
        return
    stopped = (inner.stopped if inner is not None else "") or stream.stopped
    if stopped:
        scanner.add_error(f"{name} (the rest)", f"not read: {stopped}")


def _scan_path(scanner: LogScanner, path: str, deadline: Deadline) -> None:
    name = "<stdin>" if path == "-" else path
    if path != "-" and not os.path.lexists(path):
        scanner.add_error(name, "No such file or directory")
        return
    try:
        stream = open_input(path, "--log", limit=MAX_LOG_BYTES, deadline=deadline, stop="eof", idle_s=LOG_IDLE_S)
    except InputError as exc:
        scanner.add_error(name, str(exc).removeprefix(f"--log {path}: "))
        return
    with stream:
        _scan_bounded(scanner, stream, name, path.endswith(".gz"), deadline)


def _die_with_parent() -> Callable[[], None] | None:
    """A pre-exec hook making the child get SIGTERM when llmdoctor dies (Linux prctl PDEATHSIG)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def hook() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM))

    return hook


def _stop(proc: subprocess.Popen[bytes]) -> int | None:
    """End the child (it may still be writing): terminate, then kill; its exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(1.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(1.0)
    return proc.returncode


def _scan_journal(scanner: LogScanner, unit: str, since: str | None, deadline: Deadline) -> None:
    name = f"journal:{unit}"
    exe = shutil.which("journalctl")
    if exe is None:
        scanner.add_error(name, "journalctl not found on this machine")
        return
    cmd = [exe, "-u", unit, "--no-pager", "-o", "cat"]
    if since:
        cmd += ["--since", _journal_since(since)]
    with tempfile.TemporaryFile() as errors:
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors,
                                    preexec_fn=_die_with_parent())  # noqa: PLW1509 - only a prctl call
        except OSError as exc:
            scanner.add_error(name, f"cannot run journalctl: {exc.strerror or exc}")
            return
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        stream = BoundedStream(lambda n: os.read(fd, n), name, limit=MAX_LOG_BYTES, deadline=deadline,
                               poll_fd=fd, idle_s=LOG_IDLE_S, stop="eof")
        try:
            info = scanner.scan_stream(stream, name)  # type: ignore[arg-type]
            if stream.stopped:
                scanner.add_error(f"{name} (the rest)", f"not read: {stream.stopped}")
                _stop(proc)
                return
            try:
                code: int | None = proc.wait(deadline.cap(2.0))
            except subprocess.TimeoutExpired:
                code = _stop(proc)
        finally:
            _stop(proc)
            proc.stdout.close()
        errors.seek(0)
        err = errors.read(400).decode("utf-8", "replace").strip()
    if code != 0 and info.lines == 0:
        scanner.replace_with_error(info, f"journalctl exited with {code}: {err[:200]}")


def _journal_since(since: str) -> str:
    """Translate ``2h`` style values into journalctl's ``-2h``; pass others through."""
    m = _RELATIVE.match(since)
    if m:
        seconds = int(float(m.group(1)) * _UNITS[m.group(2)[0].lower()])
        return f"-{seconds}s"
    return since
