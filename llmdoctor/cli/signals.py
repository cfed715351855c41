"""Ctrl-C and SIGTERM: the first stops the run with its partial report, the second leaves at once.

- The first SIGINT (Ctrl-C) or SIGTERM (``kill``, ``timeout``, Kubernetes stopping a pod) is
  raised as `KeyboardInterrupt`: every mode stops measuring and prints what it has (the
  partial report, the fleet's completed reports, the watch's last round), with its documented
  exit code (3, or 2 when something critical was already found).
- A second one, while that report is being made, exits at once with 130 (128 + SIGINT, as
  shells report an interrupted command), after flushing what was already written, with one
  line on stderr. It never waits for anything.

Installed by `llmdoctor.cli.app.main` in the main thread only (Python runs signal handlers
there), and restored afterwards.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["EXIT_INTERRUPTED_TWICE", "interrupt_handlers"]

#: The exit code of a second Ctrl-C/SIGTERM: 128 + SIGINT.
EXIT_INTERRUPTED_TWICE = 130


class _Handler:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count == 1:
            raise KeyboardInterrupt
        with contextlib.suppress(Exception):
            if sys.stdout is not None:
                sys.stdout.flush()
        with contextlib.suppress(OSError):
            os.write(2, b"llmdoctor: interrupted again: exiting now, without the rest of the report (exit 130)\n")
        os._exit(EXIT_INTERRUPTED_TWICE)


@contextlib.contextmanager
def interrupt_handlers() -> Iterator[None]:
    """Handle SIGINT and SIGTERM as described above, for the duration of a command."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = _Handler()
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is signal.SIG_IGN:
            continue  # ignored by whoever started us (a background job): keep it so, as Python does
        try:
            previous[sig] = signal.signal(sig, handler)
        except (ValueError, OSError):  # pragma: no cover - not the main thread of the main interpreter
            continue
    try:
        yield
    finally:
        for sig, old in previous.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(sig, old)
