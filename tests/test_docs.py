"""The reference pages are current and the README links what it promises."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_generated_pages_are_current() -> None:
    """docs/checks.md (the checks' docstrings) and docs/options.md (every --help): `python docs/reference.py`."""
    done = subprocess.run([sys.executable, str(ROOT / "docs" / "reference.py"), "--check"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_every_relative_link_of_the_readme_and_the_docs_leads_somewhere() -> None:
    pages = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        if not page.exists():
            continue
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_the_readme_is_for_the_first_ten_minutes() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 200
    assert "python -m venv .venv && . .venv/bin/activate" in readme
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    command = (
        "python -m pip install -e '.[test,test-llamacpp]'"
        " && python -m pytest -m \"not slow\" && python -m pytest -m slow"
    )
    assert command in readme and ci.rstrip().endswith(command)  # CI runs exactly the README's test command
