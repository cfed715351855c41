"""The entry points of a group, read without importing `importlib.metadata`.

``llmdoctor checks`` needs the entry points of one group and nothing else of the installed
distributions' metadata, but importing `importlib.metadata` alone costs more than
``python -c pass`` itself (it pulls in ``email``, ``zipfile``, ``csv``, ``tempfile``: ~60 ms
of the 3x start-up budget on our machines). `entry_points` reads the ``entry_points.txt`` files
the way `importlib.metadata`'s path finder finds them: each ``sys.path`` directory in order
(``""`` is the current directory), its ``*.dist-info`` and ``*.egg-info`` entries, the first
distribution of a (normalized) name wins. Where the distributions are not all in plain
directories — a zip or an egg on ``sys.path``, or a meta-path finder that provides
distributions of its own — it asks `importlib.metadata` instead, so the answer is the same
either way (``tests/test_plugins.py`` compares them).
"""

from __future__ import annotations

import functools
import os
import re
import sys
from importlib import import_module
from importlib.machinery import PathFinder
from typing import NamedTuple

__all__ = ["EntryPoint", "entry_points", "load_object"]

# What `importlib.metadata.EntryPoint` accepts: ``module``, ``module:attr.attr``, then extras.
_REFERENCE = re.compile(r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$")


class EntryPoint(NamedTuple):
    """One entry point: its name, its ``module:attr`` value, its group (loaded on `load`)."""

    name: str
    value: str
    group: str

    def load(self) -> object:
        """Import the module and return the object the value names."""
        return load_object(self.value)


def load_object(value: str) -> object:
    """The object an entry-point value (``package.module:Class``) names, importing its module."""
    match = _REFERENCE.match(value)
    if match is None:
        raise ValueError(f"not an entry point reference: {value!r}")
    obj: object = import_module(match.group("module"))
    return functools.reduce(getattr, filter(None, (match.group("attr") or "").split(".")), obj)


def entry_points(group: str) -> list[EntryPoint]:
    """The entry points of `group` of every installed distribution, in `importlib.metadata`'s order."""
    found: list[EntryPoint] = []
    seen: set[str] = set()  # normalized distribution names: the first on sys.path wins
    if any(finder is not PathFinder and hasattr(finder, "find_distributions") for finder in sys.meta_path):
        return _from_importlib(group)
    for entry in sys.path:
        root = os.fspath(entry) or "."
        try:
            children = os.listdir(root)
        except OSError:
            if os.path.isfile(root):  # a zip on sys.path: its metadata is read by zipfile
                return _from_importlib(group)
            continue
        if root.lower().endswith(".egg"):
            return _from_importlib(group)
        by_name: dict[str, list[str]] = {}
        for child in children:
            low = child.lower()
            if low.endswith((".dist-info", ".egg-info")):
                by_name.setdefault(_normalize(low.rpartition(".")[0].partition("-")[0]), []).append(child)
        for name, infos in by_name.items():
            for info in infos:
                if name in seen:
                    continue
                seen.add(name)
                found.extend(_read(os.path.join(root, info, "entry_points.txt"), group))
    return found


def _normalize(name: str) -> str:
    """PEP 503 normalization with underscores, as `importlib.metadata` keys distributions."""
    return re.sub(r"[-_.]+", "_", name).lower()


def _read(path: str, group: str) -> list[EntryPoint]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):  # no entry points (or no directory: an egg-info file)
        return []
    if group not in text:
        return []
    out: list[EntryPoint] = []
    section = None
    for line in map(str.strip, text.splitlines()):
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
        elif section == group:
            name, sep, value = line.partition("=")
            if sep:
                out.append(EntryPoint(name.strip(), value.strip(), group))
    return out


def _from_importlib(group: str) -> list[EntryPoint]:
    from importlib.metadata import entry_points as metadata_entry_points

    return [EntryPoint(ep.name, ep.value, group) for ep in metadata_entry_points(group=group)]
