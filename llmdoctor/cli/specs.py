"""Option groups: click options collected into one frozen dataclass each, so a command takes typed specs.

`option_group` makes the decorator of one group: it adds the group's click options to the command and,
when the command runs, takes their values out of the keyword arguments click passes and hands the
command one dataclass in their place (``check(target: EndpointArgs, run: RunArgs, ...)`` rather
than 36 keywords). The dataclass's field names are the options' parameter names.

A group may hold other groups (its fields named after theirs, e.g. ``RunArgs.budget``): put its
decorator *below* its parts, since the decorator written last is the innermost wrapper and runs
last, when its parts are already built. The help text does not change: click sees the same options.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

__all__ = ["option_group", "stack"]

F = TypeVar("F", bound=Callable[..., Any])
Decorator = Callable[[F], F]


def option_group(name: str, spec: type[Any], *options: Callable[[Any], Any]) -> Callable[[F], F]:
    """A decorator adding `options` to a command and passing their values as one `spec` named `name`.

    Every field of `spec` is a parameter the command receives by then (one of `options`, or a group
    decorated above this one), or keeps its default: one the program sets, never the command line.
    """
    names = tuple(f.name for f in dataclasses.fields(spec))

    def decorate(f: F) -> F:
        @functools.wraps(f)
        def collect(*args: Any, **kwargs: Any) -> Any:
            # a field that no option sets (NetworkOptions.fleet_size: the fleet sets it) keeps its default
            kwargs[name] = spec(**{n: kwargs.pop(n) for n in names if n in kwargs})
            return f(*args, **kwargs)

        wrapped: Any = collect
        for option in reversed(options):  # the first option is listed first, as stacked decorators are
            wrapped = option(wrapped)
        return cast(F, wrapped)

    return decorate


def stack(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    """The decorators applied as if written one above the other, the first on top."""

    def decorate(f: F) -> F:
        for decorator in reversed(decorators):
            f = decorator(f)
        return f

    return decorate
