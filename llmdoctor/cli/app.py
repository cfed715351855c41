"""The `llmdoctor` command group and `main`, the entry point that maps usage problems to exit 3."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

import click

from llmdoctor import __version__

__all__ = ["COMMANDS", "LazyGroup", "cli", "main"]

#: Exit code of a run that could not run (bad arguments or input): `llmdoctor.cli.usage.EXIT_UNKNOWN`, restated
#: so that ``--help`` need not import that module (`tests/test_cli_start.py` holds them equal).
EXIT_UNKNOWN = 3

#: Every command: its name, the module and attribute that define it, and the first paragraph of its help
#: (what ``llmdoctor --help`` lists, so listing them imports none of them; a test holds each equal to the
#: command's own).
COMMANDS: dict[str, tuple[str, str, str]] = {
    "check": ("llmdoctor.cli.check", "check",
              "Run the checklist against an endpoint and print a ranked diagnosis."),
    "checks": ("llmdoctor.cli.offline", "list_checks",
               "List the checklist: ids, names, categories and titles, in the order they run."),
    "compare": ("llmdoctor.cli.compare", "compare",
                "Compare two endpoints phase by phase, requests interleaved A, B, A, B … so drift hits both alike."),
    "demo": ("llmdoctor.cli.simulator", "demo",
             "Start the built-in simulator and diagnose it: a full run with no LLM server around."),
    "explain": ("llmdoctor.cli.offline", "explain",
                "Print a check's documentation: what it checks, why it matters, how to fix it."),
    "replay": ("llmdoctor.cli.offline", "replay",
               "Re-run the checks offline on measurements saved with --save-measurements."),
    "serve-sim": ("llmdoctor.cli.simulator", "serve_sim",
                  "Serve the OpenAI-compatible simulator (real SSE streaming, injectable latency and faults)."),
}


class LazyGroup(click.Group):
    """The command group: a command's module is imported when that command runs or shows its help.

    ``llmdoctor --help`` lists the commands from `COMMANDS` and imports none of them, and ``llmdoctor
    checks`` does not import what ``check`` needs (its many options, the gate, the simulator).
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in COMMANDS:
            return self.commands.get(cmd_name)
        module, attribute, _ = COMMANDS[cmd_name]
        command: click.Command = getattr(importlib.import_module(module), attribute)
        self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            if name in COMMANDS:
                rows.append((name, click.Command(name, help=COMMANDS[name][2]).get_short_help_str(limit)))
            else:  # pragma: no cover - a command added by hand
                rows.append((name, self.commands[name].get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="llmdoctor")
def cli() -> None:
    """Diagnose where the latency of an LLM inference endpoint goes, and what to change.

    \b
    Start here:
      llmdoctor demo                                   # diagnose the built-in simulator
      llmdoctor check --endpoint http://localhost:8000 # vLLM, TGI, llama.cpp, Ollama, SGLang
      llmdoctor checks                                 # the checklist
      llmdoctor explain LD702                          # what a check means and how to fix it

    \b
    Exit codes: 0 OK · 1 WARNING · 2 CRITICAL · 3 UNKNOWN (bad arguments or input,
    or Ctrl-C before anything critical was found: the partial report is printed;
    `llmdoctor` with no command prints this help and exits 3: nothing was checked)
    """



def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point: run the CLI; every usage problem is one line and exit 3, and nothing ends in a traceback.

    Standard output and error are guarded (`llmdoctor.cli.streams`): a closed or full stream, or
    a reader that left (``| head -1``), never changes the exit code the run decided. SIGTERM is
    handled like Ctrl-C, a second one exits 130 at once (`llmdoctor.cli.signals`). An unexpected
    error is one line (``internal error``) and exit 3; ``LLMDOCTOR_DEBUG=1`` shows its traceback.
    """
    from llmdoctor.cli.signals import interrupt_handlers
    from llmdoctor.cli.streams import guarded_stdio
    from llmdoctor.redact import register_environment_secrets

    register_environment_secrets()
    with guarded_stdio() as stdio, interrupt_handlers():
        code = _run(argv)
        stdio.finish()
    sys.exit(code)


def _error(message: str) -> int:
    """Print ``llmdoctor: error: MESSAGE`` (one line, redacted) on stderr; the exit code 3."""
    from llmdoctor.redact import redact_output

    line = " ".join(str(message).split())
    try:
        click.echo(redact_output(f"llmdoctor: error: {line}"), err=True)
    except Exception:  # noqa: BLE001 - stderr itself is broken: nothing more to say
        pass
    return EXIT_UNKNOWN


def _usage() -> int:
    """Bare ``llmdoctor``: the help on standard output, as ``--help`` prints it; exit 3.

    Not 0: a monitoring runner configured with no command must not read "OK" from a run that checked
    nothing (3 is UNKNOWN, "the tool could not run"). Not the one flattened error line that a usage
    problem gets either: the reader asked what the command does.
    """
    with click.Context(cli, info_name="llmdoctor", **cli.context_settings) as ctx:
        click.echo(cli.get_help(ctx))
    return EXIT_UNKNOWN


def _run(argv: Sequence[str] | None) -> int:
    """Run the command line; its exit code."""
    import os

    args = list(argv) if argv is not None else sys.argv[1:]
    if not args:
        return _usage()
    try:
        code = cli.main(args=args, prog_name="llmdoctor",
                        standalone_mode=False)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        return _error(str(exc.code))
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        return _error(exc.format_message())
    except (click.exceptions.Abort, KeyboardInterrupt):
        try:
            click.echo("llmdoctor: aborted", err=True)
        except Exception:  # noqa: BLE001
            pass
        return EXIT_UNKNOWN
    except (Exception, RecursionError, MemoryError) as exc:  # noqa: BLE001 - never a traceback
        if os.environ.get("LLMDOCTOR_DEBUG"):
            raise
        return _error(f"internal error: {type(exc).__name__}: {exc} (a bug: please report it; "
                      "LLMDOCTOR_DEBUG=1 shows the traceback)")
    return code if isinstance(code, int) else 0
