"""The probe contract: one declaration per probe, and what derives from it.

A `Probe` handle names everything about a measurement once: its function and result
type (``module:attr`` strings, imported on first use so ``llmdoctor --help`` stays
cheap), the probes it reads (`needs` it cannot do without, `optional` ones it reads when
they are there, `optional_if` ones it reads only under some options, `orders` it may run
on demand), the HTTP requests it may send (its
`plan`, an upper bound), what switches it off under the options (`off`), whether it
reads only this machine (`local`), whether it is computed from other results
(`derived`) and whether it sums up the run itself (`closing`: its requests, its host's
load). ``Probe[T]`` carries the result type for mypy: ``ctx.get(SWEEP)`` is a ``SweepResult``.

From these declarations come the run's schedule (`schedule`: the probes a set of
readers needs, in one canonical order), the ``--dry-run`` plan and the follow-up
costs of the diagnosis; nothing is mirrored by hand. The table itself is
`llmdoctor.probes.catalog`.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar, cast
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from llmdoctor.options import Options
    from llmdoctor.target import Target

__all__ = ["AnyProbe", "Endpoint", "Gate", "PlannedRequest", "Probe", "Reads", "import_ref", "request", "schedule",
           "static_off"]

T_co = TypeVar("T_co", covariant=True)


@dataclass(frozen=True)
class PlannedRequest:
    """Up to `count` requests of one shape, sent by probe `probe`."""

    probe: str
    method: str
    url: str
    body: str
    count: int
    note: str = ""


def request(method: str, url: str, body: str, count: int, note: str = "") -> PlannedRequest:
    """One line of a probe's plan (the probe's name is stamped by `Probe.requests`)."""
    return PlannedRequest("", method, url, body, count, note)


@dataclass(frozen=True)
class Endpoint:
    """The URLs a request plan names: the OpenAI base, the server root, the origin."""

    base: str
    root: str
    origin: str

    @property
    def chat(self) -> str:
        """The chat completions URL."""
        return f"{self.base}/chat/completions"

    @property
    def base_is_v1(self) -> bool:
        """Whether the base URL's path is exactly ``/v1`` (no discovery fallback then)."""
        return urlsplit(self.base).path == "/v1"

    @classmethod
    def of(cls, target: Target | None) -> Endpoint:
        """The target's URLs; a placeholder without a target (replay: only the counts matter)."""
        if target is None:
            return cls("http://endpoint/v1", "http://endpoint", "http://endpoint")
        base = target.base_url.rstrip("/")
        parts = urlsplit(base)
        return cls(base, target.root_url.rstrip("/"), f"{parts.scheme}://{parts.netloc}")


#: A probe's request plan: the requests it sends at most, for these URLs and options.
Plan = Callable[[Endpoint, "Options"], Sequence[PlannedRequest]]
#: Why a probe does not measure under the options (None: it does).
Off = Callable[["Options"], "str | None"]
#: Whether the options make a probe read a conditional optional probe (see `Probe.optional_if`).
When = Callable[["Options"], bool]


@dataclass(frozen=True, eq=False)
class Probe(Generic[T_co]):
    """One probe, declared once. Handles compare by identity: each probe has exactly one."""

    name: str
    function: str
    result_type: str
    description: str
    needs: tuple[AnyProbe, ...] = ()
    optional: tuple[AnyProbe, ...] = ()
    #: Optional reads that only some options make, each with its condition (the transport probe
    #: reads dns only under ``--dns-server``): scheduled with it, and allowed, only when it holds.
    optional_if: tuple[tuple[AnyProbe, When], ...] = ()
    #: Probes it may run on demand, beyond its plan (the diagnosis orders follow-ups within its budget).
    orders: tuple[AnyProbe, ...] = ()
    #: The HTTP requests it sends at most; None: it sends none.
    plan: Plan | None = None
    off: Off | None = None
    #: Reads only this machine (files, the OS, NVML): replaying another machine's recording skips it.
    local: bool = False
    #: Computed from other probes' results only: replay recomputes it; it runs after the others.
    derived: bool = False
    #: A summary of the run itself (every request's outcome, the client host's load), measured after
    #: every other probe, derived ones included, in every run that sends requests; replay reads it.
    closing: bool = False
    #: What it measures in the user's words, to follow "Measuring …" (progress) and "Measures:"
    #: (``llmdoctor explain``): ``the first request``, ``the output-length sweep (…)``.
    title: str = ""

    @property
    def label(self) -> str:
        """Its `title`, or for a probe declared without one (a plugin's) its description."""
        return self.title or self.description

    def __repr__(self) -> str:
        return f"Probe({self.name!r})"

    @property
    def reads(self) -> tuple[AnyProbe, ...]:
        """Every probe this one may read under some options: needs, optional ones and those it orders."""
        return (*self.needs, *self.optional, *(p for p, _ in self.optional_if), *self.orders)

    def optional_under(self, options: Options | None) -> tuple[AnyProbe, ...]:
        """The optional probes it reads under `options`: `optional`, and each of `optional_if` that applies.

        Without options (None), the unconditional ones only.
        """
        conditional = () if options is None else tuple(p for p, when in self.optional_if if when(options))
        return (*self.optional, *conditional)

    @property
    def sends(self) -> bool:
        """Whether it may send HTTP requests to the endpoint."""
        return self.plan is not None

    def resolve_type(self) -> type[T_co]:
        """Import and return the result dataclass."""
        return cast("type[T_co]", import_ref(self.result_type))

    def off_reason(self, options: Options) -> str | None:
        """Why it measures nothing under `options` (its switch or a need's), or None (`static_off`)."""
        return static_off(self, options)

    def requests(self, endpoint: Endpoint, options: Options) -> list[PlannedRequest]:
        """Its plan for these URLs and options, each line stamped with the probe's name."""
        if self.plan is None:
            return []
        return [dataclasses.replace(r, probe=self.name) for r in self.plan(endpoint, options) if r.count > 0]

    def max_requests(self, options: Options, endpoint: Endpoint | None = None) -> int:
        """The most HTTP requests it sends under these options (retries within the budget aside)."""
        return sum(r.count for r in self.requests(endpoint or Endpoint.of(None), options))


#: A handle of any result type (handles are covariant in their result type).
AnyProbe = Probe[object]


def import_ref(ref: str) -> object:
    """The object a ``module:attr`` reference names (a probe's function or result type), imported."""
    module, _, attr = ref.partition(":")
    return cast(object, getattr(importlib.import_module(module), attr))


@dataclass(frozen=True)
class Reads:
    """What a reader (a check) reads: probes it cannot do without, and probes it reads when present."""

    requires: tuple[AnyProbe, ...] = ()
    optional: tuple[AnyProbe, ...] = ()

    @property
    def all(self) -> tuple[AnyProbe, ...]:
        """Every probe it may read."""
        return (*self.requires, *self.optional)


#: Why a probe will not measure in this run (None: it will); see `static_off`.
Gate = Callable[[AnyProbe], "str | None"]


def static_off(probe: AnyProbe, options: Options) -> str | None:
    """Why `probe` measures nothing under `options`: its own switch, else the first of its needs'."""
    reason = probe.off(options) if probe.off is not None else None
    if reason:
        return reason
    for need in probe.needs:
        reason = static_off(need, options)
        if reason:
            return reason
    return None


def schedule(readers: Iterable[Reads], gate: Gate, order: Sequence[AnyProbe],
             options: Options | None = None) -> list[AnyProbe]:
    """The probes these readers need, with what those need, in the canonical `order`.

    A reader's optional probes are scheduled only when none of its required ones is off
    (it would be skipped); a probe that is off schedules none of what it reads, since it
    will not run. A probe's conditional reads (`Probe.optional_if`) are scheduled when
    `options` make them. Derived probes come last, so they see every other result of the
    run; a probe missing from `order` (a plugin's own) comes after the others, as first wanted.
    When any scheduled probe sends requests, the closing probes of `order` come last of all.
    """
    wanted: dict[AnyProbe, None] = {}

    def add(probe: AnyProbe) -> None:
        if probe in wanted:
            return
        wanted[probe] = None
        if gate(probe) is None:
            for dep in (*probe.needs, *probe.optional_under(options)):
                add(dep)

    for reads in readers:
        for probe in reads.requires:
            add(probe)
        if not any(gate(p) is not None for p in reads.requires):
            for probe in reads.optional:
                add(probe)
    if any(p.sends and gate(p) is None for p in wanted):
        for probe in order:
            if probe.closing:
                add(probe)
    rank = {p: i for i, p in enumerate(order)}
    return sorted(wanted, key=lambda p: (p.closing, p.derived, rank.get(p, len(rank))))
