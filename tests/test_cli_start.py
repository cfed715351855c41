"""What a newcomer meets first: bare `llmdoctor`, `--help`, and the commands' lazy loading."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from llmdoctor.cli.app import COMMANDS, EXIT_UNKNOWN, cli
from llmdoctor.cli.usage import EXIT_UNKNOWN as USAGE_EXIT_UNKNOWN
from tests.cliutil import run_cli

ROOT = Path(__file__).resolve().parent.parent


def test_bare_llmdoctor_prints_the_help_readably_and_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    """It used to print the whole help flattened onto one `llmdoctor: error:` line."""
    bare = run_cli(capsys)
    helped = run_cli(capsys, "--help")
    assert bare.code == 3 and helped.code == 0
    assert bare.out == helped.out and bare.err == ""
    lines = bare.out.splitlines()
    assert lines[0] == "Usage: llmdoctor [OPTIONS] COMMAND [ARGS]..." and "Commands:" in lines
    assert all(any(line.split()[:1] == [name] for line in lines) for name in COMMANDS)
    assert "no command prints this help and exits 3" in " ".join(bare.out.split())


def test_the_listed_help_is_each_commands_own() -> None:
    assert EXIT_UNKNOWN == USAGE_EXIT_UNKNOWN
    for name, (module, attribute, summary) in COMMANDS.items():
        command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command) and command.name == name
        first = " ".join(inspect.cleandoc(command.help or "").split("\n\n")[0].split())
        assert first == summary, name
    with click.Context(cli) as ctx:
        assert cli.list_commands(ctx) == sorted(COMMANDS)


_RECORD = """
import atexit, json, os, sys
atexit.register(lambda: open(os.environ["RECORD"], "w").write(json.dumps(sorted(sys.modules))))
from llmdoctor.cli import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize(("args", "needed"), [
    (("--help",), set()),
    (("checks",), {"llmdoctor.cli.offline"}),
    (("check", "--help"), {"llmdoctor.cli.check", "llmdoctor.cli.simulator"}),  # the demo endpoint
], ids=" ".join)
def test_a_command_imports_only_its_own_module(tmp_path: Path, args: tuple[str, ...], needed: set[str]) -> None:
    record = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", _RECORD, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "RECORD": str(record)}, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    modules = set(json.loads(record.read_text()))
    command_modules = {m for m, _, _ in COMMANDS.values()}
    assert command_modules & modules == needed
    assert "rich" not in modules and "httpx" not in modules
