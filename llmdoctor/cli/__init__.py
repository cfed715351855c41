"""Command-line interface: parse arguments, build the target, run, render, exit.

Exit codes follow the monitoring-plugin convention: 0 OK, 1 WARNING,
2 CRITICAL, 3 UNKNOWN (the tool itself could not run: bad arguments or
input). Heavy modules are imported inside the commands so ``--help`` is fast.

The package, one concern per module: `app` (the group and `main`), `check` (the check command) and
`check_args` (its option groups, each one typed spec: `specs` collects a group's options into its
dataclass), `gate` (--slo, --compare, baselines), `modes` (--dry-run, fleets and watch), `compare`,
`offline` (replay, checks, explain), `simulator` (demo, serve-sim), `output` (rendering, saving,
progress), `export` (metrics destinations) and `usage` (argument problems and the target built from
the arguments); `entry` is the installed command's entry point, which prints the commonest texts
(``--help``, ``checks``, ``explain``) prerendered in `prerendered` without importing click.

`main` and `cli` are `llmdoctor.cli.app`'s, imported on first use: importing this package (as
`llmdoctor.cli.entry` does) imports neither click nor the commands.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs the entry point's fast path a few ms
if TYPE_CHECKING:
    from llmdoctor.cli.app import cli, main
else:
    def __getattr__(name: str) -> object:
        """`main` and `cli`, from `llmdoctor.cli.app` (imported now)."""
        if name in __all__:
            from llmdoctor.cli import app

            return getattr(app, name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["main", "cli"]
