"""Fleets: diagnose several endpoints at once, with one bounded total request rate.

The endpoints file is either one URL per line (``#`` comments allowed) or a
TOML file with one table per endpoint::

    [endpoints.prod]
    url = "https://llm.example.com"
    model = "meta-llama/Llama-3.1-8B-Instruct"
    api_key_env = "PROD_LLM_KEY"

Each endpoint is diagnosed in its own thread with its own context and probe
client; a shared `RateLimiter` spaces the requests of all threads so that the
fleet as a whole never sends more than ``--rate`` requests per second.

Ctrl-C (or SIGTERM) stops the fleet without losing what it found: no request starts after it,
the endpoints being diagnosed end with their partial reports (within `INTERRUPT_GRACE_S`),
and the completed reports are kept; an endpoint cut off in a request, or not started, is an
``interrupted`` row (UNKNOWN). The worker threads are daemons, so the process never waits
for a request still in flight. The fleet's output (a table, NDJSON) is `llmdoctor.render.fleet`'s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llmdoctor.options import Options
from llmdoctor.reporting.report import ExitCode, Report
from llmdoctor.target import Target, TargetError, TargetSpec, display_url, normalize_base_url

__all__ = ["FleetEntry", "FleetError", "INTERRUPT_GRACE_S", "MAX_ENDPOINTS_FILE_BYTES", "RateLimiter", "entry_spec",
           "load_endpoints", "run_fleet", "worst_exit_code"]

#: After Ctrl-C, how long the endpoints being diagnosed get to finish with their partial report.
INTERRUPT_GRACE_S = 2.0
#: The largest endpoints file read (one URL a line: a million endpoints fit).
MAX_ENDPOINTS_FILE_BYTES = 16 << 20

# Icinga's aggregation order: OK < WARNING < UNKNOWN < CRITICAL.
_SEVERITY_ORDER = {ExitCode.OK: 0, ExitCode.WARNING: 1, ExitCode.UNKNOWN: 2, ExitCode.CRITICAL: 3}


class FleetError(ValueError):
    """The endpoints file cannot be used (one-line message)."""


@dataclass(frozen=True)
class FleetEntry:
    """One endpoint of the fleet."""

    name: str
    url: str
    model: str | None = None
    api_key_env: str | None = None


class RateLimiter:
    """Spaces calls to at most `rate` per second across threads (no burst)."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if rate <= 0:
            raise ValueError("rate must be > 0")
        self.interval = 1.0 / rate
        self._next = 0.0
        self._lock = threading.Lock()
        self._clock, self._sleep = clock, sleep

    def acquire(self) -> None:
        """Block until this caller's slot comes."""
        with self._lock:
            now = self._clock()
            slot = max(now, self._next)
            self._next = slot + self.interval
        wait = slot - now
        if wait > 0:
            self._sleep(wait)


def _toml_entries(text: str, path: str) -> list[FleetEntry]:
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise FleetError(f"--endpoints {path} is not valid TOML: {exc}") from None
    except RecursionError:
        raise FleetError(f"--endpoints {path}: nested too deeply to be an endpoints file") from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise FleetError(f"--endpoints {path} is not valid TOML: {str(exc).split(':')[0]}") from None
    table = data.get("endpoints")
    if not isinstance(table, dict) or not table:
        raise FleetError(f"--endpoints {path}: expected [endpoints.NAME] tables with a url")
    entries = []
    for name, spec in table.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("url"), str):
            raise FleetError(f"--endpoints {path}: endpoint {name!r} has no url")
        key_env = spec.get("api_key_env", spec.get("api-key-env"))
        model = spec.get("model")
        entries.append(FleetEntry(name, spec["url"], model if isinstance(model, str) else None,
                                  key_env if isinstance(key_env, str) else None))
    return entries


def load_endpoints(path: str) -> list[FleetEntry]:
    """Read an endpoints file (one URL per line, or TOML ``[endpoints.NAME]`` tables)."""
    from llmdoctor.inputs.bounded import InputError, read_input

    try:
        text = read_input(path, "--endpoints", limit=MAX_ENDPOINTS_FILE_BYTES).decode("utf-8").removeprefix("\ufeff")
    except InputError as exc:
        raise FleetError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise FleetError(f"--endpoints {path}: not UTF-8 text (byte {exc.start})") from None
    stripped = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if path.endswith(".toml") or any(ln.startswith("[") for ln in stripped):
        entries = _toml_entries(text, path)
    else:
        entries = [FleetEntry(display_url(ln.split()[0]), ln.split()[0]) for ln in stripped]
    if not entries:
        raise FleetError(f"--endpoints {path} lists no endpoint")
    names = [e.name for e in entries]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:  # the name labels the endpoint in the NDJSON and the metrics: it must be unique
        raise FleetError(f"--endpoints {path} lists {twice} twice")
    for e in entries:
        try:
            normalize_base_url(e.url)
        except TargetError as exc:
            raise FleetError(f"--endpoints {path}: {e.name}: {exc}") from None
    return entries


def entry_spec(entry: FleetEntry, defaults: TargetSpec) -> TargetSpec:
    """The target spec of a fleet entry: its URL, and its model and key variable where it names them,
    else the command line's (`defaults`, whose headers every entry shares)."""
    return defaults.at(entry.url, model=entry.model, api_key_env=entry.api_key_env)


def worst_exit_code(codes: Sequence[int]) -> int:
    """The worst of several exit codes (OK < WARNING < UNKNOWN < CRITICAL)."""
    return max(codes, key=lambda c: _SEVERITY_ORDER.get(c, 2), default=ExitCode.OK)


def run_fleet(
    fleet: Sequence[tuple[FleetEntry, Target]],
    options: Options,
    *,
    rate: float = 5.0,
    workers: int = 8,
    selected: Sequence[str] = (),
    ignored: Sequence[str] = (),
    fail_on: str = "warning",
    on_done: Callable[[FleetEntry, Report | None, str], None] | None = None,
    deadline_at: float | None = None,
) -> list[tuple[FleetEntry, Report | None, str]]:
    """Diagnose every entry concurrently; returns (entry, report or None, error) in file order.

    `fleet`: each entry with its target, built once (`entry_spec`, then the `Target` factory) by
    the caller's preflight, which checked them all before anything is sent.

    Ctrl-C while it runs returns what there is (see the module docstring) instead of raising.
    """
    from llmdoctor.doctor import diagnose

    stop = threading.Event()
    limiter = RateLimiter(rate, sleep=lambda seconds: None if stop.wait(seconds) else None)
    entries = [entry for entry, _ in fleet]
    results: list[tuple[FleetEntry, Report | None, str] | None] = [None] * len(entries)
    started: set[int] = set()
    lock = threading.Lock()
    pending = iter(range(len(entries)))

    def before_send() -> None:
        if not stop.is_set():
            limiter.acquire()
        if stop.is_set():  # Ctrl-C: this endpoint's diagnosis ends with its partial report
            raise KeyboardInterrupt

    def one(entry: FleetEntry, target: Target) -> tuple[FleetEntry, Report | None, str]:
        try:
            # every endpoint's LD501 judges the open-file limit against the sockets of all those at once
            at_once = options.with_fields(fleet_size=min(workers, len(entries)))
            report, _ = diagnose(target, at_once, selected=selected, ignored=ignored, fail_on=fail_on,
                                 before_send=before_send, deadline_at=deadline_at)
            result: tuple[FleetEntry, Report | None, str] = (entry, report, "")
        except Exception as exc:  # noqa: BLE001 - one endpoint must not stop the fleet
            result = (entry, None, f"{type(exc).__name__}: {exc}")
        if on_done is not None:
            on_done(*result)
        return result

    def work() -> None:
        while not stop.is_set():
            with lock:
                i = next(pending, None)
                if i is None:
                    return
                started.add(i)
            results[i] = one(*fleet[i])

    threads = [threading.Thread(target=work, name=f"llmdoctor-fleet-{n}", daemon=True)
               for n in range(max(1, min(workers, len(entries))))]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)  # short waits: Ctrl-C reaches the main thread between them
    except KeyboardInterrupt:
        stop.set()
        until = time.monotonic() + INTERRUPT_GRACE_S
        for thread in threads:
            thread.join(max(0.0, until - time.monotonic()))
    with lock:
        return [r if r is not None else
                (entry, None, "interrupted (Ctrl-C) before it finished" if i in started
                 else "not started: interrupted (Ctrl-C)")
                for i, (entry, r) in enumerate(zip(entries, results))]
