"""Regular expressions compiled the first time they are used, not when their module is imported.

The log and text scanners hold dozens of patterns, some large (verbose alternations of every
backend's log prefixes); compiling them at import made every command that imports those modules
pay for them, used or not. A `LazyPattern` is declared like ``re.compile(...)`` and used like the
compiled pattern; on its first use it compiles and binds the compiled pattern's methods on itself,
so a scanning loop afterwards calls ``re.Pattern``'s own methods and pays nothing for the laziness.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["LazyPattern"]

_METHODS = ("search", "match", "fullmatch", "sub", "subn", "finditer", "findall", "split")

Replacement = str | Callable[[re.Match[str]], str]


class LazyPattern:
    """A ``str`` regular expression, compiled on first use (then its methods are ``re.Pattern``'s)."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags

    def __repr__(self) -> str:
        return f"LazyPattern({self.pattern!r}{f', {self.flags}' if self.flags else ''})"

    def compiled(self) -> re.Pattern[str]:
        """The compiled pattern (compiled now the first time, its methods bound in place of these)."""
        compiled = re.compile(self.pattern, self.flags)
        vars(self).update({name: getattr(compiled, name) for name in _METHODS}, compiled=lambda: compiled)
        return compiled

    def search(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self.compiled().search(string, pos, endpos)

    def match(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self.compiled().match(string, pos, endpos)

    def fullmatch(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self.compiled().fullmatch(string, pos, endpos)

    def sub(self, repl: Replacement, string: str, count: int = 0) -> str:
        return self.compiled().sub(repl, string, count)

    def subn(self, repl: Replacement, string: str, count: int = 0) -> tuple[str, int]:
        return self.compiled().subn(repl, string, count)

    def finditer(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> Iterator[re.Match[str]]:
        return self.compiled().finditer(string, pos, endpos)

    def findall(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> list[Any]:
        return self.compiled().findall(string, pos, endpos)

    def split(self, string: str, maxsplit: int = 0) -> list[str | Any]:
        return self.compiled().split(string, maxsplit)
