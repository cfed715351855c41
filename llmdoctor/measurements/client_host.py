"""How busy the client's own host was while it probed: scheduling lag and CPU pressure.

A load generator that does not measure itself reports its own stalls as the server's latency.
llmdoctor therefore runs, for the whole of a live run, a sampler thread that sleeps a short
interval and records how late it wakes (jHiccup's and wrk2's idea): a thread of this process that
wakes 8 ms late means any timestamp this process took in that moment may be up to 8 ms late too.
Each request is stamped with the worst lag seen while it ran (`RequestTiming.client_lag_ms`), so
the checks and the diagnosis can set a measured difference against what the client's own
stalls explain. Beside it the host's CPU pressure over the run: the share of the cores busy
(psutil's system CPU times) and, where the kernel has it (Linux 4.20+), ``/proc/pressure/cpu``'s
``some`` total: the share of the time at least one runnable task waited for a CPU.

The probe ``client_host`` (`llmdoctor.probes.outcomes.client_host`: measured at the end of a live
run, replayed from a recording) sums it up in a `ClientHostResult`; `saturated` is the verdict the
report shows near its top.
"""

from __future__ import annotations

import bisect
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmdoctor.measurements.timing import RequestTiming

__all__ = [
    "ClientHostResult",
    "HostLoad",
    "LagSampler",
    "SATURATED_CPU_BUSY",
    "SATURATED_LAG_P99_MS",
    "SATURATED_PRESSURE",
    "worst_lag_ms",
]

#: The sampler's sleep (seconds): 200 wake-ups a second, a few tenths of a percent of one core.
INTERVAL_S = 0.005
#: At most this many samples are kept (about 50 minutes at the interval); later ones are dropped.
MAX_SAMPLES = 600_000
#: A wake-up this late (ms) counts as a stall.
LATE_MS = 2.0
#: The host counts as saturated when its cores were this busy over the run (0-1) ...
SATURATED_CPU_BUSY = 0.9
#: ... or a runnable task waited for a CPU this share of the time (PSI ``some``) ...
SATURATED_PRESSURE = 0.3
#: ... or the sampler woke this late (ms) at its 99th percentile.
SATURATED_LAG_P99_MS = 10.0

PSI_CPU = "/proc/pressure/cpu"


def _psi_some_us(path: str = PSI_CPU) -> int | None:
    """The ``some total=`` microseconds of a PSI file, or None where the kernel has none."""
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                if line.startswith("some"):
                    for part in line.split():
                        if part.startswith("total="):
                            return int(part[len("total="):])
    except (OSError, ValueError):
        return None
    return None


@dataclass(frozen=True)
class HostLoad:
    """A reading of the host's CPU counters (busy and total CPU seconds, PSI microseconds)."""

    at: float
    busy_s: float | None
    total_s: float | None
    psi_some_us: int | None

    @classmethod
    def read(cls, clock: Callable[[], float] = time.monotonic) -> HostLoad:
        """Read the counters now (psutil's system-wide CPU times, the PSI file)."""
        busy = total = None
        try:
            import psutil

            times = psutil.cpu_times()
            total = float(sum(times))
            idle = float(getattr(times, "idle", 0.0)) + float(getattr(times, "iowait", 0.0))
            busy = total - idle
        except Exception:  # noqa: BLE001 - no psutil reading: the share stays unknown
            pass
        return cls(clock(), busy, total, _psi_some_us())

    def busy_share(self, later: HostLoad) -> float | None:
        """Share (0-1) of all cores' time that was busy between this reading and `later`."""
        if None in (self.busy_s, self.total_s, later.busy_s, later.total_s):
            return None
        assert self.busy_s is not None and self.total_s is not None
        assert later.busy_s is not None and later.total_s is not None
        total = later.total_s - self.total_s
        return max(0.0, min(1.0, (later.busy_s - self.busy_s) / total)) if total > 0 else None

    def pressure_share(self, later: HostLoad) -> float | None:
        """Share (0-1) of the wall time some runnable task waited for a CPU, between the readings."""
        if self.psi_some_us is None or later.psi_some_us is None:
            return None
        wall = later.at - self.at
        return max(0.0, min(1.0, (later.psi_some_us - self.psi_some_us) / 1e6 / wall)) if wall > 0 else None


class LagSampler:
    """A daemon thread that sleeps `interval_s` and records how late each wake-up came.

    Samples are ``(woke_at, lag_ms)`` on `clock` (``time.perf_counter``, the probe client's clock),
    appended in time order, so the worst lag during a request is a bisection away.
    """

    def __init__(self, interval_s: float = INTERVAL_S, clock: Callable[[], float] = time.perf_counter,
                 max_samples: int = MAX_SAMPLES) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self.max_samples = max_samples
        self.woke: list[float] = []
        self.lags: list[float] = []
        self.started: HostLoad | None = None
        self.stopped: HostLoad | None = None
        self._due: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> LagSampler:
        """Start sampling (idempotent)."""
        if self._thread is None:
            self.started = HostLoad.read()
            self._thread = threading.Thread(target=self._run, name="llmdoctor-lag-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling and take the closing reading of the host's counters (idempotent)."""
        if self._thread is not None and self.stopped is None:
            self._stop.set()
            self._thread.join(timeout=1.0)
            self.stopped = HostLoad.read()

    @property
    def running(self) -> bool:
        """Whether the thread samples now."""
        return self._thread is not None and self.stopped is None

    def _run(self) -> None:
        while not self._stop.is_set():
            before = self.clock()
            self._due = before + self.interval_s
            time.sleep(self.interval_s)
            now = self.clock()
            if len(self.woke) < self.max_samples:
                self.lags.append(max(0.0, (now - self._due) * 1000.0))
                self.woke.append(now)

    def worst_between(self, t0: float, t1: float) -> float:
        """The worst lag (ms) of a wake-up that was due inside [`t0`, `t1`] or overdue at its end."""
        worst = 0.0
        i = bisect.bisect_left(self.woke, t0)
        n = min(len(self.woke), len(self.lags))
        while i < n:
            woke, lag = self.woke[i], self.lags[i]
            if woke - lag / 1000.0 > t1:  # it was due after the window
                break
            worst = max(worst, lag)
            i += 1
        due = self._due
        if due is not None and self.running and due <= t1:  # a wake-up still overdue right now
            worst = max(worst, (self.clock() - due) * 1000.0)
        return worst


def worst_lag_ms(timings: Sequence[RequestTiming]) -> float | None:
    """The worst client lag stamped on any of `timings` (None when none was measured)."""
    lags = [t.client_lag_ms for t in timings if t.client_lag_ms is not None]
    return max(lags) if lags else None


def _pct(sorted_values: Sequence[float], q: float) -> float | None:
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q / 100 * len(sorted_values)) - 1))]


@dataclass
class ClientHostResult:
    """The client host over the run: llmdoctor's own scheduling lag and the CPU pressure."""

    cpu_count: int
    seconds: float
    lag_samples: int
    lag_p50_ms: float | None = None
    lag_p90_ms: float | None = None
    lag_p99_ms: float | None = None
    lag_max_ms: float | None = None
    #: Share (0-1) of the sampler's wake-ups that came more than `LATE_MS` late.
    late_share: float = 0.0
    #: Share (0-1) of all cores busy over the run (None without psutil).
    cpu_busy: float | None = None
    #: Share (0-1) of the time some runnable task waited for a CPU (PSI; None where absent).
    cpu_pressure: float | None = None

    @property
    def saturated(self) -> bool:
        """The client host was saturated: timings and conclusions drawn from them are less sure."""
        return ((self.cpu_busy is not None and self.cpu_busy >= SATURATED_CPU_BUSY)
                or (self.cpu_pressure is not None and self.cpu_pressure >= SATURATED_PRESSURE)
                or (self.lag_p99_ms is not None and self.lag_p99_ms >= SATURATED_LAG_P99_MS))

    def line(self) -> str:
        """One line for the report: the verdict and its numbers."""
        numbers = self.readings()
        if self.saturated:
            return f"Client host saturated — {numbers}: timing conclusions carry less confidence"
        return f"Client host not saturated — {numbers}"

    def readings(self) -> str:
        """The numbers behind the verdict, in words (``CPU 99% busy (2 cores); …``)."""
        parts = []
        if self.cpu_busy is not None:
            parts.append(f"CPU {self.cpu_busy:.0%} busy ({self.cpu_count} cores)")
        if self.cpu_pressure is not None:
            parts.append(f"a task waited for a CPU {self.cpu_pressure:.0%} of the time")
        if self.lag_p99_ms is not None:
            parts.append(f"llmdoctor's own scheduling lag p99 {self.lag_p99_ms:.1f} ms, "
                         f"max {self.lag_max_ms or 0:.1f} ms")
        return "; ".join(parts) or "no readings"

    @classmethod
    def of(cls, sampler: LagSampler) -> ClientHostResult:
        """The summary of what `sampler` measured so far."""
        n = min(len(sampler.woke), len(sampler.lags))
        lags = sorted(sampler.lags[:n])
        start = sampler.started
        end = sampler.stopped or HostLoad.read()
        seconds = (end.at - start.at) if start is not None else 0.0
        return cls(
            cpu_count=os.cpu_count() or 1,
            seconds=round(seconds, 3),
            lag_samples=n,
            lag_p50_ms=_round(_pct(lags, 50)),
            lag_p90_ms=_round(_pct(lags, 90)),
            lag_p99_ms=_round(_pct(lags, 99)),
            lag_max_ms=_round(lags[-1] if lags else None),
            late_share=round(sum(1 for v in lags if v > LATE_MS) / n, 4) if n else 0.0,
            cpu_busy=_round(start.busy_share(end), 4) if start is not None else None,
            cpu_pressure=_round(start.pressure_share(end), 4) if start is not None else None,
        )


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)

