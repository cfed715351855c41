"""The `llmdoctor` command group and `main`, the entry point that maps usage problems to exit 3."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn

import click

from llmdoctor import __version__
from llmdoctor.cli.check import check
from llmdoctor.cli.compare import compare
from llmdoctor.cli.offline import explain, list_checks, replay
from llmdoctor.cli.simulator import demo, serve_sim
from llmdoctor.cli.usage import EXIT_UNKNOWN

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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
    or Ctrl-C before anything critical was found: the partial report is printed)
    """


for _command in (check, list_checks, explain, replay, demo, serve_sim, compare):
    cli.add_command(_command)



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


def _run(argv: Sequence[str] | None) -> int:
    """Run the command line; its exit code."""
    import os

    try:
        code = cli.main(args=list(argv) if argv is not None else None, prog_name="llmdoctor",
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
