"""The run's wall-clock bound (``--deadline``): started once, when the command starts.

Everything a run does counts against it: reading the request files, the log scan, the idle
wait, journalctl, every request, every ``--watch`` round. The instant is a
``time.perf_counter()`` value, the clock the probe client and the context already use.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Deadline", "DeadlineExceeded"]


class DeadlineExceeded(Exception):
    """The run's deadline passed while doing something that cannot be cut into a partial result."""


@dataclass(frozen=True)
class Deadline:
    """A wall-clock bound: `seconds` from the moment it was made (None: unbounded)."""

    seconds: float | None = None
    clock: Callable[[], float] = field(default=time.perf_counter, repr=False, compare=False)
    at: float | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.seconds is not None and self.at is None:
            object.__setattr__(self, "at", self.clock() + self.seconds)

    @classmethod
    def until(cls, at: float | None, seconds: float | None = None) -> Deadline:
        """The deadline ending at the `time.perf_counter()` instant `at` (None: unbounded)."""
        if at is None:
            return cls()
        return cls(seconds=seconds if seconds is not None else max(0.0, at - time.perf_counter()), at=at)

    def left(self) -> float | None:
        """Seconds left (never negative); None when unbounded."""
        if self.at is None:
            return None
        return max(0.0, self.at - self.clock())

    @property
    def expired(self) -> bool:
        """Whether the bound has passed."""
        return self.at is not None and self.clock() >= self.at

    def cap(self, seconds: float) -> float:
        """`seconds`, or the time left when that is shorter."""
        left = self.left()
        return seconds if left is None else min(seconds, left)

    def check(self, doing: str) -> None:
        """Raise `DeadlineExceeded` ("--deadline 5 s reached while `doing`") once the bound has passed."""
        if self.expired:
            raise DeadlineExceeded(f"--deadline {self.seconds or 0:g} s reached while {doing}")
