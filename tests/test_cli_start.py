"""What a newcomer meets first: bare `llmdoctor`, `--help`, and the commands' lazy loading."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

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
], ids=lambda v: " ".join(sorted(v) if isinstance(v, set) else v))  # sorted: every xdist worker, one id
def test_a_command_imports_only_its_own_module(tmp_path: Path, args: tuple[str, ...], needed: set[str]) -> None:
    record = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", _RECORD, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "RECORD": str(record)}, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    modules = set(json.loads(record.read_text()))
    command_modules = {m for m, _, _ in COMMANDS.values()}
    assert command_modules & modules == needed
    assert "rich" not in modules and "httpx" not in modules


# --- The installed command's fast path (`llmdoctor.cli.entry`): prerendered texts, byte for byte click's ---

#: What the console script pip writes does, plus a record of the modules imported (to tell the paths apart).
_ENTRY = """
import atexit, json, os, re, sys
if os.environ.get("RECORD"):
    atexit.register(lambda: open(os.environ["RECORD"], "w").write(json.dumps(sorted(sys.modules))))
from llmdoctor.cli.entry import main
sys.exit(main())
"""
_CREDENTIAL_ENDINGS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "PAT")


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment without what the texts depend on (width, colour, credentials, proxies), plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "RECORD")
           and not k.upper().endswith(_CREDENTIAL_ENDINGS) and not k.lower().endswith("_proxy")}
    return {**env, **extra}


def _both(tmp_path: Path, args: tuple[str, ...], env: dict[str, str],
          **popen: Any) -> tuple[subprocess.CompletedProcess[bytes], subprocess.CompletedProcess[bytes], bool]:
    """`python -m llmdoctor ARGS` (always click) and the entry point; whether the entry imported click."""
    record = tmp_path / "modules.json"
    run = {"capture_output": True, "timeout": 120, "cwd": ROOT, **popen}
    clicked = subprocess.run([sys.executable, "-m", "llmdoctor", *args], env=env, **run)
    entry = subprocess.run([sys.executable, "-c", _ENTRY, *args], env={**env, "RECORD": str(record)}, **run)
    return clicked, entry, "click" in json.loads(record.read_text())


PRERENDERED = [(), ("--help",), ("-h",), ("check", "--help"), ("checks",), ("explain", "LD702"), ("explain", "ld411")]


@pytest.mark.parametrize("columns", [None, "130"], ids=["no-terminal", "130-columns"])
@pytest.mark.parametrize("args", PRERENDERED, ids=lambda a: " ".join(a) or "bare")
def test_the_fast_path_prints_what_click_prints(tmp_path: Path, args: tuple[str, ...], columns: str | None) -> None:
    if columns and args == ("checks",):
        pytest.skip("checks does not depend on the width")
    env = _clean_env(**({"COLUMNS": columns} if columns else {}))
    clicked, entry, imported_click = _both(tmp_path, args, env)
    assert (entry.stdout, entry.stderr, entry.returncode) == (clicked.stdout, clicked.stderr, clicked.returncode), \
        "the entry point printed another text than click: is llmdoctor/cli/prerendered.py stale? " \
        "Run python -m llmdoctor.checklist.indexgen"
    assert clicked.returncode == (EXIT_UNKNOWN if not args else 0) and clicked.stdout
    assert not imported_click, "the prerendered text was not used: is llmdoctor/cli/prerendered.py stale?"


def test_bare_llmdoctor_on_the_fast_path_is_the_readable_help_with_exit_3(tmp_path: Path) -> None:
    clicked, entry, imported_click = _both(tmp_path, (), _clean_env())
    helped, _, _ = _both(tmp_path, ("--help",), _clean_env())
    assert entry.returncode == 3 and not imported_click and entry.stderr == b""
    assert entry.stdout == helped.stdout
    lines = entry.stdout.decode().splitlines()
    assert lines[0] == "Usage: llmdoctor [OPTIONS] COMMAND [ARGS]..." and "Commands:" in lines
    assert all(any(line.split()[:1] == [name] for line in lines) for name in COMMANDS)


@pytest.mark.parametrize(("args", "extra"), [
    (("--help",), {"COLUMNS": "90"}),  # a width the texts were not rendered at
    (("explain", "LD702"), {"COLUMNS": "64"}),
    (("checks",), {"DEMO_API_KEY": "reachability"}),  # a credential the click path masks in its output
    (("--help",), {"HTTPS_PROXY": "http://user:sesame-open@proxy.invalid:3128"}),
], ids=["help-90-columns", "explain-64-columns", "a-secret-in-the-text", "a-proxy-password"])
def test_the_fast_path_steps_aside_when_the_text_could_differ(tmp_path: Path, args: tuple[str, ...],
                                                              extra: dict[str, str]) -> None:
    clicked, entry, imported_click = _both(tmp_path, args, _clean_env(**extra))
    assert (entry.stdout, entry.stderr, entry.returncode) == (clicked.stdout, clicked.stderr, clicked.returncode)
    assert imported_click
    if "DEMO_API_KEY" in extra:
        assert b"Endpoint reachability" not in clicked.stdout  # what the fast path would have got wrong


def test_a_plugin_check_sends_checks_and_explain_through_click(tmp_path: Path) -> None:
    site = tmp_path / "site"
    info = site / "acme_checks-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-checks\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[llmdoctor.checks]\nACME1 = acme_checks:Nothing\n")
    env = _clean_env(PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    listed = b""
    for args in (("checks",), ("explain", "LD702")):
        clicked, entry, imported_click = _both(tmp_path, args, env)
        assert (entry.stdout, entry.stderr, entry.returncode) == (clicked.stdout, clicked.stderr, clicked.returncode)
        assert imported_click, args
        listed = listed or clicked.stderr
    assert b"acme_checks" in listed  # the plugin's load error, which a prerendered text would have hidden


def _on_a_terminal(args: tuple[str, ...], env: dict[str, str], entry: bool) -> bytes:
    """What `llmdoctor ARGS` writes to a 120-column terminal (a pseudo-terminal on its stdout)."""
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
    command = [sys.executable, "-c", _ENTRY] if entry else [sys.executable, "-m", "llmdoctor"]
    try:
        done = subprocess.run([*command, *args], stdout=follower, stderr=subprocess.PIPE, env=env, cwd=ROOT,
                              timeout=120)
        os.close(follower)
        follower = -1
        out = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not chunk:
                break
            out += chunk
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    return out + f"\n[exit {done.returncode}] {done.stderr!r}".encode()


@pytest.mark.parametrize("no_color", [False, True], ids=["bold", "NO_COLOR"])
def test_explain_on_a_terminal_is_styled_as_click_styles_it(no_color: bool) -> None:
    env = _clean_env(**({"NO_COLOR": "1"} if no_color else {}))
    clicked = _on_a_terminal(("explain", "LD702"), env, entry=False)
    assert _on_a_terminal(("explain", "LD702"), env, entry=True) == clicked
    assert (b"\x1b[1m" in clicked) is not no_color
    assert _on_a_terminal(("--help",), env, entry=True) == _on_a_terminal(("--help",), env, entry=False)


def test_a_failed_write_is_reported_as_click_reports_it(tmp_path: Path) -> None:
    with open("/dev/full", "wb") as full:
        clicked, entry, _ = _both(tmp_path, ("checks",), _clean_env(), stdout=full, stderr=subprocess.PIPE,
                                  capture_output=False)
    assert (entry.stderr, entry.returncode) == (clicked.stderr, clicked.returncode)
    assert b"could not write to standard output" in clicked.stderr


def _stale_checks(source: str) -> str:
    """The prerendered module's source with a `llmdoctor checks` text that lists a check that is gone."""
    return "\n".join("CHECKS = 'LD000  a check that is gone\\n'" if line.startswith("CHECKS =") else line
                     for line in source.splitlines()) + "\n"


def test_the_prerendered_texts_are_up_to_date_and_a_stale_one_is_caught(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from llmdoctor.checklist import indexgen

    current = indexgen.PRERENDERED_FILE.read_text(encoding="utf-8")
    assert current == indexgen.render_prerendered(), "stale: run python -m llmdoctor.checklist.indexgen"
    copy = tmp_path / "prerendered.py"
    monkeypatch.setattr(indexgen, "PRERENDERED_FILE", copy)
    copy.write_text(_stale_checks(current), encoding="utf-8")
    assert indexgen.main(["--check"]) == 1
    assert "prerendered.py: stale: run python -m llmdoctor.checklist.indexgen" in capsys.readouterr().out.splitlines()
    # Rendered by another click: its help texts differ (and print only under it); the rest must still match.
    other = "\n".join(line.replace("Show this message", "Print this text") if line.startswith("HELP") else
                      "CLICK_VERSION = '0.0'" if line.startswith("CLICK_VERSION") else line
                      for line in current.splitlines()) + "\n"
    copy.write_text(other, encoding="utf-8")
    assert indexgen.main(["--check"]) == 0
    copy.write_text(_stale_checks(other), encoding="utf-8")
    assert indexgen.main(["--check"]) == 1
