"""`llmdoctor.checklist.plugins` reads the same entry points as `importlib.metadata`, in the same order.

Compared on this environment's real distributions (every group they declare) and on crafted
ones next to them: a second copy of an installed distribution (the first on ``sys.path`` wins), an
egg-info directory and an egg-info file, comments and other sections, odd case and separators in
names, and a zip on ``sys.path`` (read through `importlib.metadata` itself).
"""

from __future__ import annotations

import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from llmdoctor.checklist.plugins import EntryPoint, entry_points, load_object


def _reference(group: str) -> list[tuple[str, str]]:
    return [(ep.name, ep.value) for ep in metadata.entry_points(group=group)]


def _ours(group: str) -> list[tuple[str, str]]:
    eps = entry_points(group)
    assert all(isinstance(ep, EntryPoint) and ep.group == group for ep in eps)
    return [(ep.name, ep.value) for ep in eps]


def _groups() -> set[str]:
    return {ep.group for dist in metadata.distributions() for ep in dist.entry_points}


def test_every_group_of_this_environment_reads_the_same() -> None:
    groups = _groups()
    assert {"llmdoctor.checks", "console_scripts"} <= groups
    for group in sorted(groups):
        assert _ours(group) == _reference(group), group


def _dist(where: Path, dirname: str, text: str | None) -> None:
    info = where / dirname
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dirname.split('-')[0]}\nVersion: 1\n")
    if text is not None:
        (info / "entry_points.txt").write_text(text)


def test_crafted_distributions_read_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    _dist(first, "Acme.Checks-2.0.dist-info",
          "# a comment\n[console_scripts]\nacme = acme:main\n\n[llmdoctor.checks]\n"
          "  LD950 = acme.checks : Quota  [extra]\nLD951=acme.checks:Other\n")
    _dist(second, "acme_checks-1.0.dist-info", "[llmdoctor.checks]\nLD950 = acme_old:Quota\n")  # shadowed
    _dist(second, "legacy_plugin.egg-info", "[llmdoctor.checks]\nLD960 = legacy:Check\n")
    _dist(second, "no_entry_points-1.0.dist-info", None)
    (second / "flat-1.0.egg-info").write_text("Metadata-Version: 1.0\nName: flat\n")  # a file, not a directory
    monkeypatch.setattr(sys, "path", [str(first), str(tmp_path / "missing"), str(second), *sys.path])
    ours = _ours("llmdoctor.checks")
    assert ours == _reference("llmdoctor.checks")
    assert ("LD950", "acme.checks : Quota  [extra]") in ours and ("LD960", "legacy:Check") in ours
    assert ("LD950", "acme_old:Quota") not in ours
    assert _ours("console_scripts") == _reference("console_scripts")


def test_a_zip_on_sys_path_is_read_through_importlib_metadata(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "plugins.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("zipped-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: zipped\nVersion: 1.0\n")
        zf.writestr("zipped-1.0.dist-info/entry_points.txt", "[llmdoctor.checks]\nLD970 = zipped:Check\n")
    monkeypatch.setattr(sys, "path", [str(archive), *sys.path])
    ours = _ours("llmdoctor.checks")
    assert ("LD970", "zipped:Check") in ours and ours == _reference("llmdoctor.checks")


def test_load_object_follows_module_and_attributes() -> None:
    assert load_object("llmdoctor.checklist.plugins:EntryPoint.load") is EntryPoint.load
    assert load_object("os.path") is __import__("os").path
    assert load_object("llmdoctor.checklist.plugins : load_object [extra]") is load_object
    with pytest.raises(ValueError, match="not an entry point reference"):
        load_object("not a reference!")
    with pytest.raises(ModuleNotFoundError):
        load_object("llmdoctor.no_such_module:X")
