"""`pip install .` ships everything: checks/ as llmdoctor.checks, every subpackage, the schemas.

The distribution is ``llm-latency-doctor`` (``llmdoctor`` is taken on PyPI by another project); the
command and the import name stay ``llmdoctor``.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from llmdoctor.check import Category, Check

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTION = "llm-latency-doctor"


def test_the_wheel_holds_every_module_and_the_schemas(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, text=True,
    )
    wheel = next(tmp_path.glob("llm_latency_doctor-*.whl"))
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    expected = {f"llmdoctor/checks/{p.name}" for p in (ROOT / "checks").glob("*.py")}
    expected |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "llmdoctor").rglob("*.py")}
    expected |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "llmdoctor" / "schema").glob("*.json")}
    missing = sorted(expected - names)
    assert not missing, f"not in the wheel (add the package to pyproject's packages list?): {missing}"
    metadata = Parser().parsestr(archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode())
    assert metadata["Name"] == DISTRIBUTION
    assert {n.split("/")[0] for n in names if not n.endswith((".dist-info", ".py.typed"))} == {
        "llmdoctor", next(n.split("/")[0] for n in names if ".dist-info/" in n)}  # one import package
    text = archive.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "[llmdoctor.checks]" in text and "LD001 = llmdoctor.checks.ld001_reachability:Reachability" in text
    scripts = text.split("[console_scripts]")[1].split("[")[0].split()
    assert scripts[:2] == ["llmdoctor", "="] and scripts[2].startswith("llmdoctor.cli"), text


def test_the_installed_distribution_is_found_by_its_new_name() -> None:
    """What importlib.metadata looks up (version, entry points) is the renamed distribution."""
    from importlib.metadata import distribution, entry_points

    import llmdoctor

    dist = distribution(DISTRIBUTION)
    assert dist.version == llmdoctor.__version__
    assert any(ep.name == "llmdoctor" for ep in dist.entry_points if ep.group == "console_scripts")
    owners = {ep.dist.name for ep in entry_points(group="llmdoctor.checks") if ep.dist is not None}
    assert DISTRIBUTION in owners


def test_an_old_install_under_the_former_name_does_not_duplicate_the_checks() -> None:
    """A stale ``llmdoctor`` distribution (an egg-info left by an editable install) registers the same classes."""
    from importlib.metadata import EntryPoint

    from llmdoctor.checklist.registry import load_registry

    same = EntryPoint("LD001", "llmdoctor.checks.ld001_reachability:Reachability", "llmdoctor.checks")
    registry = load_registry([same, same])
    assert [c.id for c in registry.checks] == ["LD001"] and not registry.errors
    # another class claiming a taken id is still refused
    registry = load_registry([same, EntryPoint("LD001x", "tests.test_packaging:Impostor", "llmdoctor.checks")])
    assert [c.id for c in registry.checks] == ["LD001"]
    assert [e.reason for e in registry.errors] == [
        "duplicate check id LD001 (already provided by llmdoctor.checks.ld001_reachability:Reachability)"]


class Impostor(Check):
    """A third-party check that claims a built-in id."""

    id = "LD001"
    name = "impostor"
    title = "Impostor"
    category = Category.ENDPOINT
