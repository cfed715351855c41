"""Incremental, bounded Server-Sent-Events parser.

Follows the WHATWG HTML "event stream interpretation" rules
(https://html.spec.whatwg.org/multipage/server-sent-events.html):

- lines end with CRLF, LF or CR; a chunk may end anywhere, also between CR and LF
  or inside a multi-byte UTF-8 character;
- a leading byte-order mark is skipped; invalid UTF-8 decodes to U+FFFD, never raises;
- ``:`` starts a comment; ``event``, ``data``, ``id`` and ``retry`` are the known fields;
  a line without a colon is a field with an empty value; one space after the colon is
  dropped; several ``data`` lines join with ``\\n``; a blank line dispatches the event;
- an ``id`` containing NUL is ignored; the last event id persists across events.

Lines are split on bytes (CR and LF never occur inside a UTF-8 sequence), so memory is
bounded: a line longer than `max_line_bytes` or an event whose data exceeds
`max_event_bytes` raises `SSEError` instead of buffering a hostile stream forever.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SSEEvent", "SSEParser", "SSEError", "DEFAULT_MAX_LINE_BYTES", "DEFAULT_MAX_EVENT_BYTES"]

DEFAULT_MAX_LINE_BYTES = 1 << 20
DEFAULT_MAX_EVENT_BYTES = 16 << 20

_EOL = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


class SSEError(ValueError):
    """The stream breaks a limit of the parser (a line or an event too long)."""


@dataclass(frozen=True)
class SSEEvent:
    """One dispatched event: its type (``message`` by default), data and last event id."""

    event: str
    data: str
    id: str | None = None


class SSEParser:
    """Feed bytes as they arrive; get back the events completed by them.

    >>> p = SSEParser()
    >>> p.feed(b"data: he") + p.feed(b"llo\\n\\n")
    [SSEEvent(event='message', data='hello', id=None)]

    `retry` holds the last valid ``retry:`` value (ms). With `dispatch_incomplete`, `close()`
    also dispatches an event cut before its blank line (the spec discards it).
    """

    def __init__(
        self,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        dispatch_incomplete: bool = False,
    ) -> None:
        self.max_line_bytes = max_line_bytes
        self.max_event_bytes = max_event_bytes
        self.dispatch_incomplete = dispatch_incomplete
        self.retry: int | None = None
        self.last_event_id: str | None = None
        self._buf = bytearray()
        self._skip_lf = False  # the previous chunk ended with CR: a leading LF belongs to it
        self._bom_checked = False
        self._event_type = ""
        self._data: list[str] = []
        self._data_size = 0
        self._closed = False

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Parse a chunk; return the events it completes (possibly none)."""
        if self._closed:
            raise SSEError("feed() after close()")
        if not data:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if data[:1] == b"\n":
                data = data[1:]
        buf = self._buf
        scan_from = len(buf)  # the kept buffer holds no line ending: search only the new bytes
        buf += data
        if not self._bom_checked:
            if len(buf) < len(_BOM) and _BOM.startswith(bytes(buf)):
                return []
            self._bom_checked = True
            if buf.startswith(_BOM):
                del buf[: len(_BOM)]
                scan_from = 0
        events: list[SSEEvent] = []
        start = 0
        pos = scan_from
        while (m := _EOL.search(buf, pos)) is not None:
            eol_start, pos = m.span()
            del m  # a live match would pin the bytearray (no resizing while it exists)
            if eol_start - start > self.max_line_bytes:
                self._fail_line()
            if pos == len(buf) and pos - eol_start == 1 and buf[eol_start] == 0x0D:  # lone CR at the end
                self._skip_lf = True
            self._line(bytes(buf[start:eol_start]), events)
            start = pos
        if start:
            del buf[:start]
        if len(buf) > self.max_line_bytes:
            self._fail_line()
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: a last unterminated line is taken as a line; see `dispatch_incomplete`."""
        if self._closed:
            return []
        self._closed = True
        events: list[SSEEvent] = []
        if self._buf:
            self._line(bytes(self._buf), events)
            self._buf.clear()
        if self.dispatch_incomplete:
            self._line(b"", events)
        self._event_type = ""
        self._data = []
        self._data_size = 0
        return events

    @property
    def pending(self) -> bool:
        """True while an event or a line is partially received."""
        return bool(self._buf or self._data or self._event_type)

    def _fail_line(self) -> None:
        self._buf.clear()
        raise SSEError(f"SSE line longer than {self.max_line_bytes} bytes")

    def _line(self, raw: bytes, events: list[SSEEvent]) -> None:
        if not raw:
            self._dispatch(events)
            return
        if raw[:1] == b":":
            return
        line = raw.decode("utf-8", errors="replace")
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data_size += len(value) + 1
            if self._data_size > self.max_event_bytes:
                self._data = []
                self._data_size = 0
                raise SSEError(f"SSE event data longer than {self.max_event_bytes} bytes")
            self._data.append(value)
        elif name == "event":
            self._event_type = value
        elif name == "id":
            if "\0" not in value:
                self.last_event_id = value
        elif name == "retry":
            if value and value.isascii() and value.isdigit():
                self.retry = int(value)
        # any other field name is ignored, as the spec says

    def _dispatch(self, events: list[SSEEvent]) -> None:
        if not self._data:
            self._event_type = ""
            return
        data = "\n".join(self._data)
        events.append(SSEEvent(self._event_type or "message", data, self.last_event_id))
        self._event_type = ""
        self._data = []
        self._data_size = 0
