"""Discovering checks: the built-in table and the ``llmdoctor.checks`` entry-point group.

The built-in checks are the lines of `llmdoctor.checklist.check_table` (the one source: pyproject.toml's
entry points and the index are generated from it); third-party checks register through the
entry-point group. Nothing registers itself at import time; a plugin that fails to load becomes a
`LoadError`, reported as a crashed check, never a stopped run. A built-in check also reached
through an installed entry point (pyproject.toml's, generated from the table) counts once.

Two ways in, with the same rules (one check per id: another class claiming a taken id is an
error, the same class through two distributions counts once; checklist order):

- `load_registry`, for a run: every entry point is loaded and its class validated.
- `available_checks`, for ``llmdoctor checks``: the entry points say which checks there are; a
  built-in one is described by the generated index (`llmdoctor.checklist.check_index`, ids, titles,
  categories, probes), so no check module is imported. A third-party plugin (an entry point
  the index does not hold) is imported and validated as a run would: its id, title and category
  are its class's own, and a broken one is listed as "failed to load" there too.
  `find_check` imports the one check ``llmdoctor explain`` prints.

The entry points are read by `llmdoctor.checklist.plugins` (the same answer as `importlib.metadata`,
without its import cost).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol, cast

from llmdoctor.checklist.check_table import BUILTIN_CHECKS, CheckState, state_of
from llmdoctor.checklist.plugins import EntryPoint, entry_points, load_object

if TYPE_CHECKING:
    from llmdoctor.check import Check

__all__ = ["ENTRY_POINT_GROUP", "CheckInfo", "Checklist", "EntryPointLike", "LoadError", "Registry",
           "available_checks", "builtin_entry_points", "check_state", "find_check", "load_registry", "select"]

ENTRY_POINT_GROUP = "llmdoctor.checks"


class EntryPointLike(Protocol):
    """An entry point: `llmdoctor.checklist.plugins.EntryPoint` or `importlib.metadata.EntryPoint` (tests)."""

    @property
    def name(self) -> str: ...

    @property
    def value(self) -> str: ...

    def load(self) -> object: ...


class LoadError(NamedTuple):
    """A plugin that could not be loaded, with the reason."""

    name: str
    reason: str


class CheckInfo(NamedTuple):
    """What the checklist shows of a check, known without running it (probes by name)."""

    id: str
    name: str
    title: str
    category: str  # a `llmdoctor.check.Category` value
    order: int
    entry_point: str  # ``module:Class``
    requires: tuple[str, ...]
    optional: tuple[str, ...]
    state: str = CheckState.STABLE.value  # a `CheckState` value, from the table (`state_of`)

    @classmethod
    def of(cls, check: type[Check], entry_point: str) -> CheckInfo:
        """The description of a loaded check class."""
        return cls(check.id, check.name, check.title, check.category.value, check.order, entry_point,
                   tuple(p.name for p in check.requires), tuple(p.name for p in check.optional),
                   state_of(entry_point).value)


class Registry:
    """The checks available to a run, in checklist order."""

    def __init__(self, checks: list[type[Check]] | None = None, errors: list[LoadError] | None = None) -> None:
        self.checks: list[type[Check]] = checks if checks is not None else []
        self.errors: list[LoadError] = errors if errors is not None else []

    def by_id(self, check_id: str) -> type[Check] | None:
        """The check with this id (case-insensitive), or None."""
        wanted = check_id.upper()
        return next((c for c in self.checks if c.id.upper() == wanted), None)


class Checklist(NamedTuple):
    """The checks there are, described (`available_checks`), and the plugins that failed to load."""

    checks: list[CheckInfo]
    errors: list[LoadError]

    def by_id(self, check_id: str) -> CheckInfo | None:
        """The check with this id (case-insensitive), or None."""
        wanted = check_id.upper()
        return next((c for c in self.checks if c.id.upper() == wanted), None)


def _validate(obj: object, name: str) -> str | None:
    from llmdoctor.check import Category, Check
    from llmdoctor.probes.contract import Probe

    if not (isinstance(obj, type) and issubclass(obj, Check)):
        return f"{name} is not a llmdoctor Check subclass"
    for attr in ("id", "name", "title", "category"):
        if not hasattr(obj, attr):
            return f"{obj.__name__} has no {attr!r} attribute"
    if not isinstance(obj.category, Category):
        return f"{obj.__name__}.category is not a llmdoctor Category"
    for attr in ("requires", "optional"):
        wrong = [p for p in getattr(obj, attr) if not isinstance(p, Probe)]
        if wrong:
            return (f"{obj.__name__}.{attr} holds {wrong[0]!r}, not a probe handle "
                    "(import it from llmdoctor.probes.catalog, e.g. BASELINE)")
    return None


def _load(ep: EntryPointLike) -> type[Check] | LoadError:
    try:
        obj = ep.load()
    except Exception as exc:  # noqa: BLE001 - a broken plugin is reported, not fatal
        return LoadError(ep.name, f"failed to load {ep.value}: {type(exc).__name__}: {exc}")
    problem = _validate(obj, ep.value)
    if problem is not None:
        return LoadError(ep.name, problem)
    return cast("type[Check]", obj)  # _validate made sure it is one


def builtin_entry_points() -> list[EntryPoint]:
    """The built-in checks of `llmdoctor.checklist.check_table`, as entry points (in the table's order)."""
    return [EntryPoint(row.id, row.entry_point, ENTRY_POINT_GROUP) for row in BUILTIN_CHECKS]


def _all_entry_points() -> list[EntryPointLike]:
    """The built-in table first (so a built-in keeps its id against a plugin), then the installed group."""
    return [*builtin_entry_points(), *sorted(entry_points(ENTRY_POINT_GROUP), key=lambda e: e.name)]


def _discover(eps: Iterable[EntryPointLike] | None, indexed: dict[str, CheckInfo],
              ) -> tuple[list[tuple[CheckInfo, type[Check] | None]], list[LoadError]]:
    """Every check of `eps` (default: the table and the installed entry points), described by
    `indexed` where it holds them, else loaded."""
    found: list[tuple[CheckInfo, type[Check] | None]] = []
    errors: list[LoadError] = []
    seen: dict[str, str] = {}
    for ep in _all_entry_points() if eps is None else sorted(eps, key=lambda e: e.name):
        info, check = indexed.get(ep.value), None
        if info is None:
            loaded = _load(ep)
            if isinstance(loaded, LoadError):
                errors.append(loaded)
                continue
            info, check = CheckInfo.of(loaded, ep.value), loaded
        if seen.get(info.id) == ep.value:
            continue  # the same class through a second distribution (an old install, a stale egg-info)
        if info.id in seen:
            errors.append(LoadError(ep.name, f"duplicate check id {info.id} (already provided by {seen[info.id]})"))
            continue
        seen[info.id] = ep.value
        found.append((info, check))
    found.sort(key=lambda pair: (pair[0].order, pair[0].id))
    return found, errors


def load_registry(eps: Iterable[EntryPointLike] | None = None) -> Registry:
    """Load every built-in check and every check of the entry-point group (or those of `eps`, for tests)."""
    found, errors = _discover(eps, {})
    return Registry([check for _, check in found if check is not None], errors)


def indexed_checks() -> dict[str, CheckInfo]:
    """The generated index of the built-in checks, by entry point.

    Imported here, not at the top, so ``python -m llmdoctor.checklist.indexgen`` (which imports this module)
    can rewrite an index that is missing or broken.
    """
    from llmdoctor.checklist.check_index import CHECKS

    return {row[5]: CheckInfo(*row, state_of(row[5]).value) for row in CHECKS}


def available_checks(eps: Iterable[EntryPointLike] | None = None) -> Checklist:
    """The built-in checks and those of the entry-point group (or of `eps`), without importing the built-in ones."""
    found, errors = _discover(eps, indexed_checks())
    return Checklist([info for info, _ in found], errors)


def find_check(check_id: str) -> type[Check] | None:
    """The class of the check with this id (case-insensitive), importing only its module; or None."""
    info = available_checks().by_id(check_id)
    if info is None:
        return None
    check = load_object(info.entry_point)
    problem = _validate(check, info.entry_point)
    if problem is not None:
        raise RuntimeError(problem)
    return cast("type[Check]", check)  # _validate made sure it is one


def _matches(check: type[Check], prefixes: Sequence[str]) -> bool:
    cid = check.id.upper()
    return any(cid.startswith(p.upper()) or check.name == p for p in prefixes)


def _named(check: type[Check], names: Sequence[str]) -> bool:
    return any(check.id.upper() == n.upper() or check.name == n for n in names)


def check_state(check: type[Check]) -> CheckState:
    """The state of a loaded check (`llmdoctor.checklist.check_table`; a third-party check is stable)."""
    return state_of(f"{check.__module__}:{check.__qualname__}")


def select(
    checks: Sequence[type[Check]], select: Sequence[str] = (), ignore: Sequence[str] = ()
) -> list[type[Check]]:
    """Filter by id prefix (``LD2`` selects LD2xx) or exact name, as ruff does.

    A preview check (`llmdoctor.checklist.check_table`) is chosen only when `select` names it exactly (its
    id or name): neither the default checklist nor a prefix brings it in. `ignore` drops any check.
    """

    def chosen(check: type[Check]) -> bool:
        if check_state(check) is CheckState.PREVIEW:
            return _named(check, select)
        return not select or _matches(check, select)

    return [c for c in checks if chosen(c) and not _matches(c, ignore)]
