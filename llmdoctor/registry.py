"""Discovering checks through the ``llmdoctor.checks`` entry-point group.

Built-in and third-party checks register the same way. Nothing registers
itself at import time; a plugin that fails to load becomes a `LoadError`,
reported as a crashed check, never a stopped run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points

from llmdoctor.check import Category, Check
from llmdoctor.probes.contract import Probe

__all__ = ["ENTRY_POINT_GROUP", "LoadError", "Registry", "load_registry", "select"]

ENTRY_POINT_GROUP = "llmdoctor.checks"


@dataclass(frozen=True)
class LoadError:
    """A plugin that could not be loaded, with the reason."""

    name: str
    reason: str


@dataclass
class Registry:
    """The checks available to a run, in checklist order."""

    checks: list[type[Check]] = field(default_factory=list)
    errors: list[LoadError] = field(default_factory=list)

    def by_id(self, check_id: str) -> type[Check] | None:
        """The check with this id (case-insensitive), or None."""
        wanted = check_id.upper()
        return next((c for c in self.checks if c.id.upper() == wanted), None)


def _validate(obj: object, name: str) -> str | None:
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


def load_registry(eps: Iterable[EntryPoint] | None = None) -> Registry:
    """Load every check of the entry-point group (or of `eps`, for tests)."""
    if eps is None:
        eps = entry_points(group=ENTRY_POINT_GROUP)
    registry = Registry()
    seen: dict[str, str] = {}
    for ep in sorted(eps, key=lambda e: e.name):
        try:
            obj = ep.load()
        except Exception as exc:  # noqa: BLE001 - a broken plugin is reported, not fatal
            registry.errors.append(LoadError(ep.name, f"failed to load {ep.value}: {type(exc).__name__}: {exc}"))
            continue
        problem = _validate(obj, ep.value)
        if problem is None and seen.get(obj.id) == ep.value:
            continue  # the same class through a second distribution (an old install, a stale egg-info)
        if problem is None and obj.id in seen:
            problem = f"duplicate check id {obj.id} (already provided by {seen[obj.id]})"
        if problem is not None:
            registry.errors.append(LoadError(ep.name, problem))
            continue
        seen[obj.id] = ep.value
        registry.checks.append(obj)
    registry.checks.sort(key=lambda c: (c.order, c.id))
    return registry


def _matches(check: type[Check], prefixes: Sequence[str]) -> bool:
    cid = check.id.upper()
    return any(cid.startswith(p.upper()) or check.name == p for p in prefixes)


def select(
    checks: Sequence[type[Check]], select: Sequence[str] = (), ignore: Sequence[str] = ()
) -> list[type[Check]]:
    """Filter by id prefix (``LD2`` selects LD2xx) or exact name, as ruff does."""
    chosen = [c for c in checks if not select or _matches(c, select)]
    return [c for c in chosen if not _matches(c, ignore)]
