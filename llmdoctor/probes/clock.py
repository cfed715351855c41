"""The probe client's clock, injected: every instant the client stamps comes from one `Clock`.

`Clock.now` is a monotonic reading in seconds like ``time.perf_counter()`` (the instants of a
`RequestTiming` are differences of it), `Clock.wall` the epoch time like ``time.time()``
(`RequestTiming.started_at`), and `Clock.sleep` waits (the one Retry-After back-off). The
run uses `SYSTEM_CLOCK`; a test passes its own clock and asserts exact durations.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "SystemClock", "SYSTEM_CLOCK"]


class Clock(Protocol):
    """What the probe client reads the time from."""

    def now(self) -> float:
        """Monotonic seconds (only differences mean something), like ``time.perf_counter()``."""
        ...

    def wall(self) -> float:
        """Seconds since the epoch, like ``time.time()``."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait `seconds`."""
        ...


class SystemClock:
    """The process's clocks: ``perf_counter``, ``time`` and ``sleep``."""

    def now(self) -> float:
        """``time.perf_counter()``."""
        return time.perf_counter()

    def wall(self) -> float:
        """``time.time()``."""
        return time.time()

    def sleep(self, seconds: float) -> None:
        """``time.sleep(seconds)``."""
        time.sleep(seconds)


#: The clock of every run (the one ``--deadline`` and the lag sampler read too).
SYSTEM_CLOCK: Clock = SystemClock()
