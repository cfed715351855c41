"""Standard output and error that never crash the tool, and never carry a secret.

`guarded_stdio` replaces ``sys.stdout`` and ``sys.stderr`` (when they are the process's own)
with streams that

- pass every string through the process-wide redaction (`llmdoctor.redact`: the exact secrets
  on stdout, which carries whole reports; messages on stderr);
- never raise on write or flush: a closed descriptor (``>&-``), a full device
  (``>/dev/full``), a pipe whose reader left (``| head -1``) is remembered, later writes go
  nowhere, and the run goes on to its own exit code (Python's advice for SIGPIPE: send the
  rest to ``/dev/null`` so nothing fails at interpreter shutdown);
- keep their file descriptors taken: a closed 0, 1 or 2 is opened on ``/dev/null``, so that no
  socket or file opened later gets that number and receives the report by mistake.

`finish` then says, in one line on stderr (if that still works), that the report could not be
written, unless stdout's reader simply stopped reading (a closed pipe is how ``head`` works).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

from llmdoctor.redact import redact_document, redact_output

__all__ = ["GuardedStdio", "guarded_stdio"]


class _GuardedRaw(io.RawIOBase):
    """A raw writer on a descriptor that records its first failure and then drops everything."""

    def __init__(self, fd: int, failure: OSError | None = None) -> None:
        super().__init__()
        self._fd = fd
        self.failure = failure

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        try:
            return self.failure is None and os.isatty(self._fd)
        except OSError:
            return False

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(data).cast("B")
        if self.failure is not None:
            return len(view)
        done = 0
        while done < len(view):
            try:
                done += os.write(self._fd, view[done:])
            except BlockingIOError:  # a non-blocking pipe from the parent: wait until it drains
                import select

                select.select([], [self._fd], [], 1.0)
            except OSError as exc:
                self.failure = exc
                _point_at_devnull(self._fd)
                break
        return len(view)


class _RedactingText(io.TextIOWrapper):
    """A text stream whose every write is redacted: `redact_document` (stdout: whole reports, HTML
    included) or `redact_output` (stderr: messages)."""

    messages = False

    def write(self, s: str) -> int:
        super().write(redact_output(s) if self.messages else redact_document(s))
        return len(s)


def _point_at_devnull(fd: int) -> None:
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)


def _take(fd: int) -> bool:
    """Make sure `fd` is open (on /dev/null if it was closed); True when it was closed."""
    try:
        os.fstat(fd)
        return False
    except OSError:
        pass
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
    return True


@dataclass
class GuardedStdio:
    """The guarded streams of one command (see the module docstring)."""

    raws: dict[str, _GuardedRaw] = field(default_factory=dict)
    saved: dict[str, object] = field(default_factory=dict)

    def failure(self, name: str) -> OSError | None:
        """The first error writing ``stdout`` or ``stderr`` hit (None: none, or not guarded)."""
        raw = self.raws.get(name)
        return raw.failure if raw is not None else None

    def flush(self) -> None:
        """Flush both streams (failures are recorded, never raised)."""
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            with contextlib.suppress(Exception):
                if stream is not None:
                    stream.flush()

    def finish(self) -> None:
        """Flush, then say on stderr (one line) why the report could not be written, if it could not."""
        self.flush()
        failure = self.failure("stdout")
        if failure is None or failure.errno == errno.EPIPE:
            return  # a reader that stopped reading (| head) is not an error
        why = "it is closed" if failure.errno == errno.EBADF else (failure.strerror or str(failure))
        with contextlib.suppress(Exception):
            if sys.stderr is not None:
                sys.stderr.write(f"llmdoctor: error: could not write to standard output: {why}\n")
                sys.stderr.flush()


@contextlib.contextmanager
def guarded_stdio() -> Iterator[GuardedStdio]:
    """Install the guarded streams for the duration of a command; restore the old ones after.

    Streams already replaced by someone else (pytest's capture) are left alone: only the
    process's own stdout and stderr are guarded.
    """
    guard = GuardedStdio()
    _take(0)
    for name, fd in (("stdout", 1), ("stderr", 2)):
        current = getattr(sys, name)
        if current is not None and current is not getattr(sys, f"__{name}__"):
            continue
        closed = _take(fd) or current is None
        failure = OSError(errno.EBADF, "closed") if closed else None
        raw = _GuardedRaw(fd, failure)
        encoding = getattr(current, "encoding", None) or "utf-8"
        line_buffering = bool(getattr(current, "line_buffering", True)) or name == "stderr"
        stream = _RedactingText(io.BufferedWriter(raw),  # type: ignore[type-var]
                                encoding=encoding, errors="backslashreplace",
                                line_buffering=line_buffering)
        stream.messages = name == "stderr"
        if current is not None:
            with contextlib.suppress(Exception):
                current.flush()
        guard.raws[name] = raw
        guard.saved[name] = current
        setattr(sys, name, stream)
    try:
        yield guard
    finally:
        guard.flush()
        for name, old in guard.saved.items():
            setattr(sys, name, old)
