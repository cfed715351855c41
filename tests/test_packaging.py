"""`pip install .` ships everything: checks/ as llmdoctor.checks, every subpackage, the schemas."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_holds_every_module_and_the_schemas(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, text=True,
    )
    wheel = next(tmp_path.glob("llmdoctor-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"llmdoctor/checks/{p.name}" for p in (ROOT / "checks").glob("*.py")}
    expected |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "llmdoctor").rglob("*.py")}
    expected |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "llmdoctor" / "schema").glob("*.json")}
    missing = sorted(expected - names)
    assert not missing, f"not in the wheel (add the package to pyproject's packages list?): {missing}"
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[llmdoctor.checks]" in text and "LD001 = llmdoctor.checks.ld001_reachability:Reachability" in text
