"""The run's shared context: lazy, memoized probes over one probe client.

Checks read measurements through the context (``ctx.get("baseline")``); each
probe runs at most once. A probe that cannot run is remembered as unavailable
with a reason, so every check that needs it is skipped with that reason. In
replay mode the context serves recorded measurements and sends nothing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llmdoctor.probes.catalog import PROBES, ProbeSpec
from llmdoctor.serde import SerdeError, from_data, to_data
from llmdoctor.target import Options, Target

__all__ = ["Context", "ProbeSpec", "ProbeUnavailable", "ProbeStatus"]


class ProbeUnavailable(Exception):
    """A probe could not produce a result; `reason` says why in plain words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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
    value: Any = None


@dataclass
class Context:
    """Everything checks may read, measured on demand and at most once."""

    target: Target | None
    options: Options = field(default_factory=Options)
    probes: Mapping[str, ProbeSpec] = field(default_factory=lambda: PROBES)
    recorded: Mapping[str, Any] | None = None
    # When replaying: also run local probes (files, this host) that were not recorded.
    # Fixture cases want that; replaying someone's recording on another machine does not.
    replay_local: bool = False
    on_probe: Callable[[str, str], None] | None = None
    client_factory: Callable[[], Any] | None = None
    #: Called before every request the probe client sends (e.g. a fleet-wide rate limit).
    before_send: Callable[[], None] | None = None
    _slots: dict[str, _Slot] = field(default_factory=dict, init=False, repr=False)
    _client: Any = field(default=None, init=False, repr=False)
    _raw_connections: int = field(default=0, init=False, repr=False)
    # The perf_counter() instant the run must end by (--deadline, counted from here), or None.
    deadline_at: float | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.options.deadline_s is not None and self.recorded is None:
            self.deadline_at = time.perf_counter() + self.options.deadline_s

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
        return f"deadline reached (--deadline {self.options.deadline_s:g} s): not measured"

    # -- the probe client -------------------------------------------------
    @property
    def client(self) -> Any:
        """The one `ProbeClient` of the run (created on first use)."""
        if self.recorded is not None:
            raise ProbeUnavailable("replaying recorded measurements: no requests are sent")
        if self.target is None:
            raise ProbeUnavailable("no endpoint given")
        if self._client is None:
            if self.client_factory is not None:
                self._client = self.client_factory()
            else:
                from llmdoctor.probes.client import ProbeClient

                self._client = ProbeClient(
                    self.target,
                    timeout_s=self.options.timeout_s,
                    max_requests=self.options.max_requests,
                    insecure=self.options.insecure,
                    ca_bundle=self.options.ca_bundle,
                    deadline_at=self.deadline_at,
                    on_request=self._log_request if self.options.verbose else None,
                    before_send=self.before_send,
                )
        return self._client

    def _log_request(self, timing: Any) -> None:
        """--verbose: one line per request on stderr (headers masked, text redacted)."""
        from llmdoctor.probes.client import describe_request

        line = describe_request(timing, self._client.request_headers if self._client is not None else {})
        print(self._redact(f"llmdoctor: {line}"), file=sys.stderr, flush=True)

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

    def close(self) -> None:
        """Release the probe client's connections."""
        if self._client is not None:
            self._client.close()

    # -- probes -------------------------------------------------------------
    def get(self, name: str) -> Any:
        """The result of probe `name`, running it on first use.

        Raises `ProbeUnavailable` (every time, with the same reason) when the
        probe cannot produce a result.
        """
        slot = self._slots.get(name)
        if slot is None:
            slot = self._run_probe(name)
            self._slots[name] = slot
        if not slot.status.available:
            raise ProbeUnavailable(slot.status.reason)
        return slot.value

    def optional(self, name: str) -> Any | None:
        """Like `get`, but None when the probe is unavailable."""
        try:
            return self.get(name)
        except ProbeUnavailable:
            return None

    def peek(self, name: str) -> Any | None:
        """The result of a probe that already ran, without running it."""
        slot = self._slots.get(name)
        return slot.value if slot is not None and slot.status.available else None

    def statuses(self) -> list[ProbeStatus]:
        """Status of every probe that ran, in the order they ran."""
        return [slot.status for slot in self._slots.values()]

    def measurements(self) -> dict[str, Any]:
        """All probe results as plain data (for ``--save-measurements``)."""
        out: dict[str, Any] = {}
        for name, slot in self._slots.items():
            if slot.status.available:
                out[name] = to_data(slot.value)
            else:
                out[name] = {"unavailable": slot.status.reason}
        return out

    def _run_probe(self, name: str) -> _Slot:
        spec = self.probes.get(name)
        if spec is None:
            return _Slot(ProbeStatus(name, False, f"unknown probe {name!r}"))
        # A derived probe (the diagnosis) is recomputed from the recorded results it reads, if the
        # recorded run had it (or, for fixture cases, whenever local probes run too).
        recompute = spec.derived and (spec.name in self.recorded or self.replay_local) if self.recorded else False
        if self.recorded is not None and not recompute and not (
                spec.local and self.replay_local and spec.name not in self.recorded):
            return self._replay(spec)
        if self.deadline_at is not None and self.time_left() == 0:
            return _Slot(ProbeStatus(name, False, self.deadline_reason))
        if self.on_probe:
            self.on_probe(name, spec.description)
        started = time.perf_counter()
        try:
            value = spec.resolve_function()(self)
        except ProbeUnavailable as exc:
            status = ProbeStatus(name, False, exc.reason)
            value = None
        except KeyboardInterrupt:
            # Ctrl-C in the middle of a probe: remember it, then let the doctor stop the run.
            status = ProbeStatus(name, False, "interrupted (Ctrl-C) while measuring",
                                 (time.perf_counter() - started) * 1000)
            self._slots[name] = _Slot(status)
            raise
        except Exception as exc:  # noqa: BLE001 - a broken probe must not stop the run
            from llmdoctor.probes.client import BudgetExhausted, DeadlineReached

            if isinstance(exc, DeadlineReached):
                reason = self.deadline_reason
            elif isinstance(exc, BudgetExhausted):
                reason = f"request budget spent ({self.options.max_requests} requests; raise --max-requests)"
            else:
                reason = f"probe failed: {type(exc).__name__}: {exc}"
            status = ProbeStatus(name, False, self._redact(reason))
            value = None
        else:
            status = ProbeStatus(name, True)
        status.duration_ms = (time.perf_counter() - started) * 1000
        return _Slot(status, value)

    def _replay(self, spec: ProbeSpec) -> _Slot:
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

    def _redact(self, text: str) -> str:
        if self._client is not None and hasattr(self._client, "redactor"):
            return self._client.redactor.text(text)
        if self.target is not None and self.target.api_key:
            return text.replace(self.target.api_key, "***")
        return text
