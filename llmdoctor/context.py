"""The run's shared context: memoized probes over one probe client, read through typed handles.

Checks read measurements through the context (``ctx.get(BASELINE)`` is a
``BaselineResult``); each probe runs at most once. A probe that cannot run is
remembered as unavailable with a reason, so every check that needs it is skipped
with that reason. In replay mode the context serves recorded measurements and
sends nothing.

A run first measures its schedule (`measure`: the probes the selected checks
declare, in the catalog's canonical order), then runs the checks on the results,
so no finding depends on the order the checks run in. In strict mode
(``LLMDOCTOR_STRICT_PROBES=1``, set by the test suite) a check or probe that reads
a probe it did not declare raises `UndeclaredRead`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar, cast

from llmdoctor.deadline import Deadline, DeadlineExceeded
from llmdoctor.options import Options
from llmdoctor.probes.contract import AnyProbe, Endpoint, Probe, import_ref
from llmdoctor.serde import SerdeError, from_data, to_data
from llmdoctor.target import ClientSetupError, Target

if TYPE_CHECKING:
    from llmdoctor.measurements.client_host import LagSampler
    from llmdoctor.measurements.timing import RequestTiming
    from llmdoctor.probes.client import ProbeClient

__all__ = ["Context", "ProbeStatus", "ProbeUnavailable", "Results", "STRICT_ENV", "UndeclaredRead", "probe_function"]

T = TypeVar("T")

#: Environment variable that turns strict probe reads on (the test suite sets it).
STRICT_ENV = "LLMDOCTOR_STRICT_PROBES"


def probe_function(probe: Probe[T]) -> Callable[[Context], T]:
    """Import and return the function that measures `probe` (its declaration names it as ``module:attr``).

    It lives here, with the context it is called with, so that the probe contract needs no import of
    the context: the contract is the layer below it.
    """
    return cast("Callable[[Context], T]", import_ref(probe.function))


class ProbeUnavailable(Exception):
    """A probe could not produce a result; `reason` says why in plain words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UndeclaredRead(RuntimeError):
    """Strict mode: a check or probe read a probe it does not declare (a bug in that check or probe)."""


@dataclass
class ProbeStatus:
    """Outcome of one probe: available, or not with a reason; and its duration."""

    name: str
    available: bool
    reason: str = ""
    duration_ms: float = 0.0


@dataclass
class _Slot:
    status: ProbeStatus
    value: object = None


@dataclass(frozen=True)
class _Reader:
    """Who is reading probes right now: a check or a probe, and what it declared."""

    name: str
    allowed: frozenset[AnyProbe]
    orders: frozenset[AnyProbe]
    is_check: bool
    #: The probe itself, for a probe reader (its declared plan bounds the requests it sends).
    probe: AnyProbe | None = None


@dataclass(frozen=True)
class Results:
    """The results of the probes that ran, for report assembly after the checks (never runs a probe)."""

    _values: Mapping[str, object]

    def get(self, probe: Probe[T]) -> T | None:
        """The result of `probe` if it ran and produced one, else None."""
        return cast("T | None", self._values.get(probe.name))


def _strict_from_env() -> bool:
    return os.environ.get(STRICT_ENV, "") not in ("", "0")


@dataclass
class Context:
    """Everything checks may read, measured once per run."""

    target: Target | None
    options: Options = field(default_factory=Options)
    recorded: Mapping[str, object] | None = None
    # When replaying: also run local probes (files, this host) that were not recorded.
    # Fixture cases want that; replaying someone's recording on another machine does not.
    replay_local: bool = False
    on_probe: Callable[[str, str], None] | None = None
    client_factory: Callable[[], ProbeClient] | None = None
    #: Called before every request the probe client sends (e.g. a fleet-wide rate limit).
    before_send: Callable[[], None] | None = None
    #: Fail undeclared reads (`UndeclaredRead`); on by default when ``LLMDOCTOR_STRICT_PROBES=1``.
    strict: bool = field(default_factory=_strict_from_env)
    _slots: dict[str, _Slot] = field(default_factory=dict, init=False, repr=False)
    _client: ProbeClient | None = field(default=None, init=False, repr=False)
    _lag: LagSampler | None = field(default=None, init=False, repr=False)
    _raw_connections: int = field(default=0, init=False, repr=False)
    _readers: list[_Reader] = field(default_factory=list, init=False, repr=False)
    _scheduled: frozenset[AnyProbe] | None = field(default=None, init=False, repr=False)
    _interrupted: set[str] = field(default_factory=set, init=False, repr=False)
    #: The perf_counter() instant the run must end by (--deadline), or None. The CLI passes the
    #: instant its command started plus --deadline (file reading counts too); without it the
    #: deadline is counted from here.
    deadline_at: float | None = field(default=None, repr=False)
    #: The other endpoint's context, for the probe that measures two endpoints side by side
    #: (`llmdoctor compare`: ``SIDE_BY_SIDE`` runs here and measures there); None in a check run.
    beside: Context | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.recorded is not None:
            self.deadline_at = None
        elif self.deadline_at is None and self.options.request.deadline_s is not None:
            self.deadline_at = time.perf_counter() + self.options.request.deadline_s

    @property
    def deadline(self) -> Deadline:
        """The run's deadline as a `Deadline` (for readers of files and pipes)."""
        return Deadline.until(self.deadline_at, self.options.request.deadline_s)

    # -- the run's deadline -------------------------------------------------
    def time_left(self) -> float | None:
        """Seconds left before the run's deadline (None without ``--deadline``; never negative)."""
        if self.deadline_at is None:
            return None
        return max(0.0, self.deadline_at - time.perf_counter())

    def cap_timeout(self, timeout_s: float) -> float:
        """`timeout_s` capped at the time left to the run; `ProbeUnavailable` when none is left.

        For probes doing their own I/O (raw sockets, DNS queries) outside the probe client.
        """
        left = self.time_left()
        if left is None:
            return timeout_s
        if left <= 0.05:
            raise ProbeUnavailable(self.deadline_reason)
        return min(timeout_s, left)

    @property
    def deadline_reason(self) -> str:
        """Why a probe did not run once the deadline passed."""
        return f"deadline reached (--deadline {self.options.request.deadline_s:g} s): not measured"

    # -- the probe client -------------------------------------------------
    @property
    def client(self) -> ProbeClient:
        """The one `ProbeClient` of the run (created on first use)."""
        if self.recorded is not None:
            raise ProbeUnavailable("replaying recorded measurements: no requests are sent")
        if self.target is None:
            raise ProbeUnavailable("no endpoint given")
        if self._client is None:
            from llmdoctor.measurements.client_host import LagSampler

            # Sampled from the first request to the end of the run (`close`): the client's own stalls.
            self._lag = LagSampler().start()
            if self.client_factory is not None:
                self._client = self.client_factory()
                if self._client.on_request is None:
                    self._client.on_request = self._on_request
                if self._client.lag is None:
                    self._client.lag = self._lag
            else:
                from llmdoctor.probes.client import ProbeClient

                self._client = ProbeClient.for_run(
                    self.target, self.options, deadline_at=self.deadline_at, on_request=self._on_request,
                    before_send=self.before_send, lag=self._lag, plan=self._sending_plan, strict=self.strict)
        return self._client

    @property
    def lag_sampler(self) -> LagSampler | None:
        """The run's lag sampler (started with the probe client; None before the first request)."""
        return self._lag

    @property
    def request_history(self) -> list[RequestTiming]:
        """Every request the probe client sent this run, in order (empty when replaying)."""
        return list(self._client.history) if self._client is not None else []

    def _sending_plan(self) -> tuple[str, int] | None:
        """The probe sending now and the requests its plan declares (None outside a probe)."""
        reader = next((r for r in reversed(self._readers) if not r.is_check), None)
        if reader is None or reader.probe is None:
            return None
        return reader.name, reader.probe.max_requests(self.options, Endpoint.of(self.target))

    def _on_request(self, timing: RequestTiming) -> None:
        """Stamp the probe that sent `timing`; with --verbose, log it."""
        probe = next((r.name for r in reversed(self._readers) if not r.is_check), "")
        if probe and not timing.probe:
            timing.probe = probe
        if self.options.request.verbose:
            self._log_request(timing)

    def _log_request(self, timing: RequestTiming) -> None:
        """--verbose: one line per request on stderr (headers masked, text redacted).

        A log that cannot be written (stderr closed or full) is dropped: it never fails the request.
        """
        from llmdoctor.measurements.timing import describe_request
        from llmdoctor.redact import redact_output

        line = describe_request(timing, self._client.request_headers if self._client is not None else {})
        if sys.stderr is None:
            return
        try:
            print(redact_output(self.redact(f"llmdoctor: {line}")), file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass

    def note_raw_connections(self, count: int) -> None:
        """Record TCP connections a probe opened outside the HTTP client (reported with the requests)."""
        self._raw_connections += count

    @property
    def raw_connections(self) -> int:
        """TCP connections opened outside the probe client (transport samples), this run."""
        return self._raw_connections

    @property
    def requests_sent(self) -> int:
        """Requests sent to the endpoint so far (0 when replaying)."""
        return 0 if self._client is None else int(self._client.requests_sent)

    @property
    def requests_by_probe(self) -> dict[str, int]:
        """Requests each probe sent so far (retries aside; empty when replaying)."""
        return {} if self._client is None else self._client.requests_by_probe

    def close(self) -> None:
        """Release the probe client's connections and stop the lag sampler."""
        if self._client is not None:
            self._client.close()
        if self._lag is not None:
            self._lag.stop()

    # -- the schedule -------------------------------------------------------
    def off_reason(self, probe: AnyProbe) -> str | None:
        """Why `probe` will not measure in this run (None: it will).

        Live, from the options (`static_off`); replaying, from the recording: a recorded
        result stands, a recorded or missing one is unavailable.
        """
        if self._replays(probe):
            assert self.recorded is not None
            data = self.recorded.get(probe.name)
            if data is None:
                return "not in the recorded measurements"
            if isinstance(data, dict) and set(data) == {"unavailable"}:
                return str(data["unavailable"])
            return None
        reason = probe.off(self.options) if probe.off is not None else None
        if reason:
            return reason
        for need in probe.needs:
            reason = self.off_reason(need)
            if reason:
                return reason
        return None

    def measure(self, schedule: Sequence[AnyProbe]) -> None:
        """Run the run's schedule in its order (each probe's own reads run when it asks for them).

        After this, `scheduled` tells which probes belong to the run. Ctrl-C stops the
        measuring: the probes not measured yet are marked interrupted, and it is re-raised.
        """
        self._scheduled = frozenset(schedule)
        for probe in schedule:
            # Import every probe's code before the first request: a probe imported lazily mid-run needs a
            # file descriptor, and a run that meets this client's open-file limit (EMFILE) must still
            # load the probes that account for it. A probe that fails to import fails again, recorded,
            # when its turn comes.
            try:
                probe_function(probe)
            except Exception:  # noqa: BLE001, S112 - recorded by `_run_probe` in its turn
                continue
        try:
            for probe in schedule:
                self._ensure(probe)
        except KeyboardInterrupt:
            for probe in schedule:
                if probe.name not in self._slots:
                    status = ProbeStatus(probe.name, False, "not measured: interrupted (Ctrl-C)")
                    self._slots[probe.name] = _Slot(status)
                    self._interrupted.add(probe.name)
            raise

    def scheduled(self, probe: AnyProbe) -> bool:
        """Whether `probe` belongs to this run's schedule (measured by the checklist, whatever the diagnosis does)."""
        return self._scheduled is not None and probe in self._scheduled

    def complete(self, probes: Sequence[AnyProbe]) -> bool:
        """Whether each of `probes` that the run scheduled was measured to the end (not cut short by Ctrl-C)."""
        return all(p.name in self._slots and p.name not in self._interrupted
                   for p in probes if self.scheduled(p))

    # -- reading probes -------------------------------------------------------
    @contextmanager
    def reading_as(self, name: str, allowed: Sequence[AnyProbe]) -> Iterator[None]:
        """Attribute the reads inside to check `name`, which declared `allowed` (strict mode checks them)."""
        self._readers.append(_Reader(name, frozenset(allowed), frozenset(), True))
        try:
            yield
        finally:
            self._readers.pop()

    @contextmanager
    def measuring_as(self, probe: AnyProbe) -> Iterator[None]:
        """Measure here on behalf of `probe`, which runs in another context (`beside`).

        Inside, this context's reads are held to `probe`'s declaration, and the requests its client
        sends are stamped with `probe`'s name, counted per probe and held to `probe`'s plan for this
        context's endpoint (strict mode), as if `probe` ran here.
        """
        allowed = frozenset((*probe.needs, *probe.optional_under(self.options)))
        self._readers.append(_Reader(probe.name, allowed, frozenset(probe.orders), False, probe))
        try:
            yield
        finally:
            self._readers.pop()

    def get(self, probe: Probe[T]) -> T:
        """The result of `probe`, measuring it on first use.

        Raises `ProbeUnavailable` (every time, with the same reason) when the
        probe cannot produce a result.
        """
        slot = self._ensure(probe)
        if not slot.status.available:
            raise ProbeUnavailable(slot.status.reason)
        return cast(T, slot.value)

    def optional(self, probe: Probe[T]) -> T | None:
        """Like `get`, but None when the probe is unavailable."""
        try:
            return self.get(probe)
        except ProbeUnavailable:
            return None

    def results(self) -> Results:
        """The results of the probes that ran, for assembling the report once the checks are done."""
        if self.strict and self._readers:
            raise UndeclaredRead(f"{self._readers[-1].name} reads results() (report assembly only): "
                                 "read probes through declared handles")
        return Results({name: slot.value for name, slot in self._slots.items() if slot.status.available})

    def statuses(self) -> list[ProbeStatus]:
        """Status of every probe that ran, in the order they finished."""
        return [slot.status for slot in self._slots.values()]

    def measurements(self) -> dict[str, object]:
        """All probe results as plain data (for ``--save-measurements``)."""
        out: dict[str, object] = {}
        for name, slot in self._slots.items():
            if slot.status.available:
                out[name] = to_data(slot.value)
            else:
                out[name] = {"unavailable": slot.status.reason}
        return out

    def _ensure(self, probe: AnyProbe) -> _Slot:
        if not isinstance(probe, Probe):
            raise TypeError(f"probes are read through their handles (llmdoctor.probes.catalog), not {probe!r}")
        slot = self._slots.get(probe.name)
        if self._readers:
            self._check_read(self._readers[-1], probe, ran=slot is not None)
        if slot is None:
            slot = self._run_probe(probe)
            self._slots[probe.name] = slot
        return slot

    def _check_read(self, reader: _Reader, probe: AnyProbe, *, ran: bool) -> None:
        if not self.strict:
            return
        if probe not in reader.allowed and probe not in reader.orders:
            kind = "check" if reader.is_check else "probe"
            declare = "requires/optional" if reader.is_check else "needs/optional/orders"
            raise UndeclaredRead(f"{kind} {reader.name} reads probe {probe.name!r} without declaring it "
                                 f"(add it to its {declare})")
        if reader.is_check and not ran and self._scheduled is not None and probe not in self._scheduled:
            raise UndeclaredRead(f"check {reader.name} reads probe {probe.name!r}, which the run did not schedule")

    def _replays(self, probe: AnyProbe) -> bool:
        """Whether `probe` comes from the recording rather than being measured (or recomputed) here."""
        if self.recorded is None:
            return False
        if probe.derived and (probe.name in self.recorded or self.replay_local):
            return False  # recomputed from the recorded results it reads
        return not (probe.local and self.replay_local and probe.name not in self.recorded)

    def _run_probe(self, spec: AnyProbe) -> _Slot:
        name = spec.name
        if self._replays(spec):
            return self._replay(spec)
        off = self.off_reason(spec)
        if off:
            return _Slot(ProbeStatus(name, False, off))
        if self.deadline_at is not None and self.time_left() == 0:
            return _Slot(ProbeStatus(name, False, self.deadline_reason))
        if self.on_probe:
            self.on_probe(name, spec.label)
        started = time.perf_counter()
        allowed = frozenset((*spec.needs, *spec.optional_under(self.options)))
        self._readers.append(_Reader(name, allowed, frozenset(spec.orders), False, spec))
        try:
            value = probe_function(spec)(self)
        except ProbeUnavailable as exc:
            status = ProbeStatus(name, False, exc.reason)
            value = None
        except (UndeclaredRead, ClientSetupError):
            raise  # a bug in a check, or inputs the CLI should have refused: not a probe's failure
        except DeadlineExceeded:
            status, value = ProbeStatus(name, False, self.deadline_reason), None
        except KeyboardInterrupt:
            # Ctrl-C in the middle of a probe: remember it, then let the doctor stop the run.
            status = ProbeStatus(name, False, "interrupted (Ctrl-C) while measuring",
                                 (time.perf_counter() - started) * 1000)
            self._slots[name] = _Slot(status)
            self._interrupted.add(name)
            raise
        except Exception as exc:  # noqa: BLE001 - a broken probe must not stop the run
            from llmdoctor.probes.client import BudgetExhausted, DeadlineReached, PlanExceeded

            if isinstance(exc, PlanExceeded):
                raise  # strict mode: a probe sending beyond its declared plan is a bug, never the endpoint's
            if isinstance(exc, DeadlineReached):
                reason = self.deadline_reason
            elif isinstance(exc, BudgetExhausted):
                reason = f"request budget spent ({self.options.request.max_requests} requests; raise --max-requests)"
            else:
                reason = f"probe failed: {type(exc).__name__}: {exc}"
            status = ProbeStatus(name, False, self.redact(reason))
            value = None
        else:
            status = ProbeStatus(name, True)
        finally:
            self._readers.pop()
        status.duration_ms = (time.perf_counter() - started) * 1000
        return _Slot(status, value)

    def _replay(self, spec: AnyProbe) -> _Slot:
        assert self.recorded is not None
        data = self.recorded.get(spec.name)
        if data is None:
            return _Slot(ProbeStatus(spec.name, False, "not in the recorded measurements"))
        if isinstance(data, dict) and set(data) == {"unavailable"}:
            return _Slot(ProbeStatus(spec.name, False, str(data["unavailable"])))
        try:
            value = from_data(spec.resolve_type(), data)
        except SerdeError as exc:
            return _Slot(ProbeStatus(spec.name, False, f"recorded {spec.name} is malformed: {exc}"))
        return _Slot(ProbeStatus(spec.name, True), value)

    def redact(self, text: str) -> str:
        """`text` with the run's secrets masked (the API key, secret headers)."""
        if self._client is not None:
            return self._client.redactor.text(text)
        if self.target is not None and self.target.api_key:
            return text.replace(self.target.api_key, "***")
        return text
