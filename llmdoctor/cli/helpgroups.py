"""`--help` with the options in named groups (target, request budget, evidence, …) instead of one flat list.

A `click.Command` subclass: its `option_groups` name each group's parameters, in order; whatever no
group names is listed last under "Other options". Plain click, no extra dependency: cloup and
rich-click do this too, but cloup imports ``importlib.metadata`` (~40 ms, a third of ``llmdoctor
--help``) and rich-click imports rich, which this keeps out of the start-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

__all__ = ["GroupedCommand"]


class GroupedCommand(click.Command):
    """A command whose help lists its options by group."""

    def __init__(self, *args: Any, option_groups: Sequence[tuple[str, Sequence[str]]] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.option_groups = tuple((title, tuple(names)) for title, names in option_groups)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        records = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and param.name is not None:
                records[param.name] = record
        placed: set[str] = set()
        for title, names in self.option_groups:
            rows = [records[name] for name in names if name in records]
            placed.update(names)
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
        rest = [record for name, record in records.items() if name not in placed]
        if rest:
            with formatter.section("Other options"):
                formatter.write_dl(rest)
