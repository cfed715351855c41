"""Command-line interface: parse arguments, build the target, run, render, exit.

Exit codes follow the monitoring-plugin convention: 0 OK, 1 WARNING,
2 CRITICAL, 3 UNKNOWN (the tool itself could not run: bad arguments or
input). Heavy modules are imported inside the commands so ``--help`` is fast.

The package, one concern per module: `app` (the group and `main`), `check` (the check command) and
`check_args` (its option groups, each one typed spec: `specs` collects a group's options into its
dataclass), `gate` (--slo, --compare, baselines), `modes` (--dry-run, fleets and watch), `compare`,
`offline` (replay, checks, explain), `simulator` (demo, serve-sim), `output` (rendering, saving,
progress), `export` (metrics destinations) and `usage` (argument problems and the target built from
the arguments).
"""

from __future__ import annotations

from llmdoctor.cli.app import cli, main

__all__ = ["main", "cli"]
