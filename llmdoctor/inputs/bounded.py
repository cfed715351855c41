"""Reading what a user hands in (request files, recordings, endpoints files, configs), within bounds.

Every input file is opened through `open_input`, which bounds what reading it may cost:

- a regular file: at most `limit` bytes (a larger one is refused up front, naming the limit);
- ``-`` (standard input), a pipe or a FIFO (``--request <(…)``): at most `limit` bytes, and
  never a wait longer than `PIPE_IDLE_S` without data, nor past the run's deadline; opening a
  FIFO never blocks (a FIFO nobody writes to ends in the idle error, not in a hang);
- a directory, a device (``/dev/zero``), a socket: refused, with what it is.

JSON goes through `load_json`: nesting deeper than `MAX_JSON_DEPTH`, integers longer than
Python converts (4,300 digits) and Python's own recursion limit end in `InputError`, one line,
never a RecursionError. Outputs (``-o``, ``--save-measurements``) are opened with
`open_output`, which refuses a FIFO that nobody reads instead of blocking on it.

The limits are generous for real inputs and small next to the memory of the machine: what the
tool keeps of an input (sizes, counts, hashes) does not grow with it.
"""

from __future__ import annotations

import errno
import io
import json
import math
import os
import select
import stat
import sys
from typing import IO, Any

from llmdoctor.deadline import Deadline, DeadlineExceeded

__all__ = [
    "InputError",
    "MAX_JSON_DEPTH",
    "MIB",
    "PIPE_IDLE_S",
    "BoundedStream",
    "json_too_deep",
    "load_json",
    "open_input",
    "open_output",
    "read_input",
    "size_text",
]

MIB = 1 << 20
#: A pipe or FIFO that sends nothing for this long ends the read (an endless or abandoned writer).
PIPE_IDLE_S = 10.0
#: The deepest JSON nesting any input may have (request bodies nest 5–20 deep; recordings less).
MAX_JSON_DEPTH = 100
_CHUNK = 1 << 16


class InputError(ValueError):
    """An input cannot be read within its bounds (one line naming the input and the bound)."""


def size_text(n: int) -> str:
    """A byte count for people: 512 KiB, 64 MiB, 1.5 GiB."""
    for unit, size in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if n >= size:
            value = n / size
            return f"{value:.0f} {unit}" if value == int(value) or value >= 10 else f"{value:.1f} {unit}"
    return f"{n} bytes"


def _kind(mode: int) -> str | None:
    """What a non-regular file is, in words (None for a regular file, a FIFO or a pipe)."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return None


class BoundedStream(io.RawIOBase):
    """A read-only binary stream that ends at a byte limit, at the deadline, or after a silent pipe.

    `read` is the source (a file descriptor's, or a decompressor's). With ``stop="raise"``
    crossing a bound raises `InputError` (limit, idle pipe) or `DeadlineExceeded`; with
    ``stop="eof"`` the stream just ends there and `stopped` says why (a log scan keeps what it
    read). `poll_fd`: a pipe to wait on with a timeout, so that no read blocks past the bounds.
    """

    def __init__(self, read: Any, name: str, *, limit: int, deadline: Deadline | None = None,
                 poll_fd: int | None = None, idle_s: float | None = None, stop: str = "raise",
                 close: Any = None) -> None:
        super().__init__()
        self._read = read
        self.name = name
        self.limit = limit
        self._deadline = deadline or Deadline()
        self._poll_fd = poll_fd if hasattr(select, "poll") else None
        self._idle_s = PIPE_IDLE_S if idle_s is None else idle_s
        self._stop_mode = stop
        self._close = close
        self.count = 0
        #: Why the stream ended early ("" while it has not).
        self.stopped = ""

    def readable(self) -> bool:
        return True

    def _stop(self, exc: Exception) -> int:
        if self._stop_mode == "raise":
            raise exc
        self.stopped = str(exc)
        return 0

    def _wait(self) -> str:
        """Wait for the pipe to have data: "" when it has, else the bound that passed first ("deadline", "idle").

        Which bound is known from the wait itself: one cut short to the deadline's time left ended at the
        deadline, even when the clock, read again, is a hair short of it (poll counts whole milliseconds)."""
        if self._poll_fd is None:
            return ""
        poller = select.poll()
        poller.register(self._poll_fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        wait = self._deadline.cap(self._idle_s)
        if poller.poll(max(0, math.ceil(wait * 1000))):
            return ""
        return "deadline" if wait < self._idle_s else "idle"

    def readinto(self, buffer: Any) -> int:
        if self.stopped:
            return 0
        bound = "deadline" if self._deadline.expired else self._wait()
        if bound == "deadline":
            return self._stop(DeadlineExceeded(f"--deadline {self._deadline.seconds or 0:g} s reached while "
                                               f"reading {self.name}"))
        if bound == "idle":
            return self._stop(InputError(f"{self.name}: no data for {self._idle_s:g} s "
                                         "(a pipe that never ends? give a file)"))
        room = self.limit - self.count + 1  # one byte past the limit tells "larger than the limit"
        data = self._read(min(len(buffer), max(1, room)))
        n = len(data)
        buffer[:n] = data
        self.count += n
        if self.count > self.limit:
            kept = n - (self.count - self.limit)
            self.count = self.limit
            if self._stop_mode == "raise":
                raise InputError(f"{self.name} is larger than {size_text(self.limit)}, the most llmdoctor reads")
            self.stopped = f"stopped after the first {size_text(self.limit)} (the most llmdoctor reads of one log)"
            return kept
        return n

    def close(self) -> None:
        if not self.closed and self._close is not None:
            self._close()
        super().close()


def open_input(path: str, what: str, *, limit: int, deadline: Deadline | None = None,
               stop: str = "raise", idle_s: float | None = None) -> BoundedStream:
    """Open `path` (``-``: standard input) for bounded reading; `what` names it in errors (``--request``).

    Raises `InputError` (one line) for a missing file, a directory, a device, a socket, or a
    regular file larger than `limit` when ``stop="raise"``. `idle_s`: default `PIPE_IDLE_S`.
    """
    idle_s = PIPE_IDLE_S if idle_s is None else idle_s
    label = f"{what} {path}" if what else path
    if path == "-":
        if sys.stdin is None:
            raise InputError(f"{what} -: standard input is closed")
        try:
            fd = os.dup(sys.stdin.fileno())
        except (io.UnsupportedOperation, AttributeError):  # a stdin without a descriptor (embedding, tests)
            binary = getattr(sys.stdin, "buffer", None)
            read = binary.read if binary is not None else (lambda n: sys.stdin.read(n).encode("utf-8"))
            return BoundedStream(read, f"{what} - (standard input)", limit=limit, deadline=deadline, stop=stop)
        except (OSError, ValueError):
            raise InputError(f"{what} -: standard input is closed") from None
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
        return BoundedStream(lambda n: os.read(fd, n), f"{what} - (standard input)", limit=limit,
                             deadline=deadline, poll_fd=None if regular else fd, idle_s=idle_s, stop=stop,
                             close=lambda: os.close(fd))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{label}: no such file") from None
    except OSError as exc:
        raise InputError(f"{label}: cannot read: {exc.strerror or exc}") from None
    kind = _kind(st.st_mode)
    if kind is not None:
        raise InputError(f"{label}: is {kind}, not a file")
    fifo = stat.S_ISFIFO(st.st_mode)
    if not fifo and st.st_size > limit and stop == "raise":
        raise InputError(f"{label}: {size_text(st.st_size)} is larger than {size_text(limit)}, "
                         "the most llmdoctor reads")
    try:
        fd = os.open(path, os.O_RDONLY | (os.O_NONBLOCK if fifo else 0))
    except OSError as exc:
        raise InputError(f"{label}: cannot read: {exc.strerror or exc}") from None
    if fifo:
        os.set_blocking(fd, True)  # the poll bounds each wait; O_NONBLOCK only kept open() from blocking
    return BoundedStream(lambda n: os.read(fd, n), label, limit=limit, deadline=deadline,
                         poll_fd=fd if fifo else None, idle_s=idle_s, stop=stop, close=lambda: os.close(fd))


def read_input(path: str, what: str, *, limit: int, deadline: Deadline | None = None) -> bytes:
    """The whole content of `path`, within `limit` bytes (`open_input`)."""
    with open_input(path, what, limit=limit, deadline=deadline) as stream:
        chunks: list[bytes] = []
        while True:
            data = stream.read(_CHUNK)
            if not data:
                return b"".join(chunks)
            chunks.append(data)


def json_too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether `value` nests objects and arrays deeper than `limit` (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        if not children:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def load_json(text: str | bytes, where: str, *, limit: int = MAX_JSON_DEPTH) -> Any:
    """`json.loads` with bounds: `InputError` for nesting deeper than `limit` and for oversized integers.

    A syntax error stays a `json.JSONDecodeError` (the caller knows how to point at its line).
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise InputError(f"{where}: JSON nested deeper than {limit} levels") from None
    except ValueError as exc:  # "Exceeds the limit (4300 digits) for integer string conversion"
        raise InputError(f"{where}: {_number_problem(exc)}") from None
    if json_too_deep(value, limit):
        raise InputError(f"{where}: JSON nested deeper than {limit} levels")
    return value


def _number_problem(exc: ValueError) -> str:
    text = str(exc)
    if "digits" in text:
        return "a number with more digits than Python converts (4,300)"
    return text.split(";")[0]


def open_output(path: str, what: str) -> IO[str]:
    """Open `path` to write text; `InputError` (one line) when it cannot be, never a block on a FIFO.

    A FIFO is opened only when something reads it (``-o >(gzip > r.gz)``); one that nobody reads
    is refused at once.
    """
    label = f"{what} {path}"
    try:
        st: os.stat_result | None = os.stat(path)
    except OSError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise InputError(f"cannot write {label}: is a directory")
    try:
        if st is not None and stat.S_ISFIFO(st.st_mode):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno == errno.ENXIO:
                    raise InputError(f"cannot write {label}: a FIFO that nothing reads (start its reader first)") \
                        from None
                raise
            os.set_blocking(fd, True)
            return os.fdopen(fd, "w", encoding="utf-8")
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {label}: {exc.strerror or exc}") from None
