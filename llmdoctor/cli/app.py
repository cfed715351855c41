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
    """Entry point: run the CLI, mapping every usage problem to one line and exit 3."""
    try:
        code = cli.main(args=list(argv) if argv is not None else None, prog_name="llmdoctor",
                        standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"llmdoctor: error: {exc.format_message()}", err=True)
        sys.exit(EXIT_UNKNOWN)
    except click.exceptions.Abort:
        click.echo("llmdoctor: aborted", err=True)
        sys.exit(EXIT_UNKNOWN)
    except BrokenPipeError:
        sys.exit(0)
    sys.exit(code if isinstance(code, int) else 0)
