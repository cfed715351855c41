"""The installed ``llmdoctor`` command: the commonest texts without click, everything else through it.

``llmdoctor --help`` (and bare ``llmdoctor``, which prints it and exits 3), ``llmdoctor check
--help``, ``llmdoctor checks`` and ``llmdoctor explain ID`` print texts that depend on nothing the
user supplied: `llmdoctor.cli.prerendered` holds them as click rendered them (``python -m
llmdoctor.checklist.indexgen`` writes it; ``--check`` fails while it is stale), and this module prints them
without importing click, whose import alone costs more than ``python -c pass`` (issue 28: start-up
within 3x of it).

The text printed is the one click would print, byte for byte (``tests/test_cli_start.py`` runs
both), so a prerendered text is used only when everything it depends on is as it was rendered,
and any doubt runs `llmdoctor.cli.app.main`:

- the arguments are exactly one of those vectors (``-h`` for ``--help``; any case of a built-in
  check's id);
- standard output is the process's own, UTF-8;
- the terminal width is one the texts were rendered at (80 columns, the default when there is no
  terminal, or 100 and more: click's help and ``explain`` are no wider than that);
- for the help texts, the installed click is the version that rendered them;
- for ``checks`` and ``explain``, the ``llmdoctor.checks`` entry points are the built-ins only
  (a plugin's check would be listed, or its import might print);
- ``explain``'s bold headings are kept exactly where click would keep them (a terminal, no
  ``NO_COLOR``);
- no secret the click path would mask (a credential-like environment variable's value, a proxy
  URL's password) may be in the text.

The text goes to the descriptor as the guarded streams (`llmdoctor.cli.streams`) would write it: a
reader that left (``| head -1``) is no error, a failed write is one line on stderr, and neither
changes the exit code.
"""

from __future__ import annotations

import os
import sys

__all__ = ["columns", "click_version", "main", "prerendered_exit_unknown", "prerendered_text"]

#: Click's help is never wider than this many columns (`llmdoctor.cli.app`'s ``max_content_width``),
#: nor is ``explain``'s text: a wider terminal prints what this width prints.
WIDEST = 100
#: The ending of an environment variable's name that marks its value as a credential (a superset of
#: `llmdoctor.redact`'s rule: the fast path only needs to know when it might mask).
_CREDENTIAL_ENDINGS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "PAT")
#: Characters that every spelling of a secret (plain, URL-quoted, JSON-escaped) leaves as they are.
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~")
_BOLD, _RESET = "\x1b[1m", "\x1b[0m"  # what click.style(bold=True) wraps a text in


def main() -> None:
    """The ``llmdoctor`` command (pyproject's ``[project.scripts]``): a prerendered text, or the click CLI."""
    try:
        found = prerendered_text(sys.argv[1:])
        if found is None:
            from llmdoctor.cli.app import main as click_main

            click_main()
        text, code = found
        _write(text)
    except KeyboardInterrupt:  # Ctrl-C before click's handlers are in place: as `llmdoctor.cli.app` says it
        try:
            sys.stderr.write("llmdoctor: aborted\n")
        except Exception:  # noqa: BLE001 - stderr itself is broken: nothing more to say
            pass
        code = prerendered_exit_unknown()
    sys.exit(code)


def prerendered_exit_unknown() -> int:
    """The exit code of a run that could not run (3), as `llmdoctor.cli.prerendered` restates it."""
    from llmdoctor.cli import prerendered

    return prerendered.EXIT_UNKNOWN


def columns() -> int:
    """The terminal width click would use, as `shutil.get_terminal_size` gives it; 0 when unsure.

    Restated (importing shutil costs more than the rest of the fast path): ``COLUMNS`` when it is a
    positive number, else the width of the terminal on the original standard output, else 80.
    """
    try:
        value = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        value = 0
    if value > 0:
        return value
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr] # 0: unknown
    except (AttributeError, ValueError, OSError):  # None, closed, detached, not a terminal
        return 80


def click_version() -> str | None:
    """The version of the click that ``import click`` would import, from its ``.dist-info`` folder
    (None when that is not one plain install: click from an egg, a zip, two dist-infos)."""
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec("click")
    if spec is None or not spec.origin or os.path.basename(spec.origin) != "__init__.py":
        return None
    site = os.path.dirname(os.path.dirname(spec.origin))
    try:
        infos = [n for n in os.listdir(site) if n.startswith("click-") and n.endswith(".dist-info")]
    except OSError:
        return None
    return infos[0][len("click-"):-len(".dist-info")] if len(infos) == 1 else None


def prerendered_text(args: list[str]) -> tuple[str, int] | None:
    """What ``llmdoctor ARGS`` prints on standard output and its exit code, when that is prerendered
    and still true here; None otherwise (the click CLI then runs)."""
    shape = _shape(args)
    if shape is None or not _plain_stdout():
        return None
    from llmdoctor.cli import prerendered

    width = columns()
    key = WIDEST if width >= WIDEST else width
    if shape in ("help", "check-help"):
        texts = prerendered.HELP if shape == "help" else prerendered.CHECK_HELP
        if key not in texts or click_version() != prerendered.CLICK_VERSION:
            return None
        text = texts[key]
    else:
        if not _builtin_checks_only(prerendered.BUILTIN_ENTRY_POINTS, prerendered.ENTRY_POINT_GROUP):
            return None
        if shape == "checks":
            text = prerendered.CHECKS
        else:
            explained = prerendered.EXPLAIN.get(key, {}).get(args[1].upper())
            if explained is None:
                return None
            color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
            text = explained if color else explained.replace(_BOLD, "").replace(_RESET, "")
    if _may_be_masked(text):
        return None
    return text, (prerendered.EXIT_UNKNOWN if not args else 0)


def _shape(args: list[str]) -> str | None:
    """Which prerendered command these arguments are, if they are exactly one."""
    if not args or args in (["--help"], ["-h"]):
        return "help"
    if args in (["check", "--help"], ["check", "-h"]):
        return "check-help"
    if args == ["checks"]:
        return "checks"
    if len(args) == 2 and args[0] == "explain":
        return "explain"
    return None


def _plain_stdout() -> bool:
    """Standard output is the process's own stream on descriptor 1, encoding UTF-8."""
    out = sys.stdout
    if out is not sys.__stdout__ or out is None:
        return False
    try:
        return out.fileno() == 1 and (getattr(out, "encoding", "") or "").lower().replace("_", "-") in (
            "utf-8", "utf8")
    except (AttributeError, ValueError, OSError):
        return False


def _builtin_checks_only(builtins: frozenset[str], group: str) -> bool:
    """No installed distribution has an entry point of `group` but the built-in checks' (``name = value``
    as generated); False too where that cannot be told cheaply.

    Conservative, where `llmdoctor.checklist.plugins` is exact: every distribution on ``sys.path`` is read (not
    only the first of each name), and a zip, an egg or a meta-path finder with distributions of its
    own is not looked into (the click path reads those through `importlib.metadata`). Not that
    module itself: its import (typing, its compiled pattern) costs a third of this whole path.
    """
    from importlib.machinery import PathFinder

    if any(finder is not PathFinder and hasattr(finder, "find_distributions") for finder in sys.meta_path):
        return False
    header = f"[{group}]"
    for entry in sys.path:
        root = os.fspath(entry) or "."
        try:
            children = os.listdir(root)
        except OSError:
            if os.path.isfile(root):
                return False
            continue
        if root.lower().endswith(".egg"):
            return False
        for child in children:
            if child.lower().endswith((".dist-info", ".egg-info")):
                try:
                    with open(os.path.join(root, child, "entry_points.txt"), encoding="utf-8") as f:
                        text = f.read()
                except (OSError, UnicodeDecodeError):
                    continue
                if header in text and not _only(builtins, text, header):
                    return False
    return True


def _only(builtins: frozenset[str], text: str, header: str) -> bool:
    """Every entry point under `header` in this ``entry_points.txt`` is one of `builtins`."""
    section = None
    for line in map(str.strip, text.splitlines()):
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line
        elif section == header:
            name, _, value = line.partition("=")
            if f"{name.strip()} = {value.strip()}" not in builtins:
                return False
    return True


def _may_be_masked(text: str) -> bool:
    """Whether the click path's redaction (`llmdoctor.redact`) might change `text`."""
    for name, value in os.environ.items():
        if name.lower().endswith("_proxy"):
            if "@" in value or "?" in value:  # a password or query values would be registered
                return True
        elif name.upper().endswith(_CREDENTIAL_ENDINGS) and len(value) >= 6:
            if not _PLAIN.issuperset(value) or value in text:
                return True
    return False


def _write(text: str) -> None:
    """Write `text` to descriptor 1 as the guarded stdout would: EPIPE is silent, another failure one line."""
    import errno

    data = memoryview(text.encode("utf-8"))
    done = 0
    while done < len(data):
        try:
            done += os.write(1, data[done:])
        except BlockingIOError:  # a non-blocking pipe from the parent: wait until it drains
            import select

            select.select([], [1], [], 1.0)
        except OSError as exc:
            _devnull_on_stdout()
            if exc.errno != errno.EPIPE:
                why = "it is closed" if exc.errno == errno.EBADF else (exc.strerror or str(exc))
                try:
                    sys.stderr.write(f"llmdoctor: error: could not write to standard output: {why}\n")
                    sys.stderr.flush()
                except Exception:  # noqa: BLE001 - stderr itself is broken: nothing more to say
                    pass
            return


def _devnull_on_stdout() -> None:
    """Point descriptor 1 at /dev/null, so that nothing fails again at interpreter shutdown."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
    except OSError:
        pass
