"""Markdown, JUnit XML and HTML reports of a real simulator run; the HTML opened in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cliutil import record_sim_run, run_cli

ROOT = Path(__file__).resolve().parent.parent
SPINE = "LD001,LD301,LD401,LD701,LD702,LD703,LD710"


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Measurements of one demo-profile run (cold start + flat latency), replayed by every test."""
    return record_sim_run(tmp_path_factory.mktemp("reports") / "demo.json", "demo", SPINE.split(","))


def _replay(capsys: pytest.CaptureFixture[str], recording: Path, *args: str) -> str:
    result = run_cli(capsys, "replay", str(recording), "--select", SPINE, *args)
    assert result.code == 1, result.err
    return result.out


_DETAIL = r"^\s*\d+\. .+? · (LD\d+) ·"


def test_markdown_has_the_terminal_ranking_and_the_waterfall_table(
        capsys: pytest.CaptureFixture[str], recording: Path) -> None:
    text = _replay(capsys, recording)
    md = _replay(capsys, recording, "--format", "markdown")
    terminal_order = re.findall(_DETAIL, text, re.M)
    section_order = re.findall(r"^### \d+\. .+? · (LD\d+) ·", md, re.M)
    # the ranking: the fixed cost every request pays above the cold start paid once
    assert terminal_order == section_order == ["LD702", "LD301"]
    summary = re.findall(r"^\| (\d+) \| \S+ (\w+) \| (.+?) \|", md, re.M)
    assert [(rank, severity) for rank, severity, _ in summary] == [("1", "warning"), ("2", "warning")]
    assert summary[0][2].startswith("Flat latency") and summary[1][2].startswith("Cold start")
    phases = [p["name"] for p in json.loads(_replay(capsys, recording, "--json"))["breakdown"]["phases"]]
    assert "| Phase | Time | Share | Note |" in md and all(f"| {name} |" in md for name in phases)
    assert "- skipped LD710: " in md and md.startswith("# llmdoctor")


def test_evidence_reads_like_the_messages(capsys: pytest.CaptureFixture[str], recording: Path) -> None:
    """Times in the evidence have thousands separators and one decimal; flags read yes/no; what the
    message already says is not repeated as evidence."""
    from llmdoctor.render.common import format_evidence

    assert format_evidence("first request TTFT", 1557.2891, "ms") == "first request TTFT 1,557.3 ms"
    assert format_evidence("measured", 71.727, "ms") == "measured 71.7 ms"
    assert format_evidence("ignore_eos honoured", True, "") == "ignore_eos honoured yes"
    assert format_evidence("uptime", 71, "s") == "uptime 71 s"
    assert format_evidence("load average", 4.81005859375, "") == "load average 4.81"
    assert format_evidence("fit r²", 0.9994, "") == "fit r² 0.999"
    for args in ((), ("--format", "markdown")):
        out = _replay(capsys, recording, *args)
        evidence = " ".join(line for line in out.splitlines() if "Evidence:" in line)
        assert " True" not in evidence and " False" not in evidence, evidence
        for value in re.findall(r"TTFT p\d+ (\S+) ms", evidence):  # shown unless the message says it already
            assert re.fullmatch(r"[\d,]+\.\d", value), evidence
        assert "ignore_eos honoured yes" in evidence and "load average" not in evidence
        assert "first request TTFT" not in evidence, "LD301's message already gives the first request's TTFT"


def test_junit_validates_against_the_schema_and_maps_outcomes(
        capsys: pytest.CaptureFixture[str], recording: Path) -> None:
    import xml.etree.ElementTree as ET

    import xmlschema

    schema = xmlschema.XMLSchema(str(ROOT / "tests" / "data" / "junit.xsd"))
    xml = _replay(capsys, recording, "--format", "junit")
    schema.validate(xml)
    suite = ET.fromstring(xml).find("testsuite")
    assert suite is not None
    cases = {c.get("name", "").split()[0]: c for c in suite.iter("testcase")}
    assert set(cases) == set(SPINE.split(","))
    assert cases["LD301"].find("failure") is not None and cases["LD702"].find("failure") is not None
    assert cases["LD710"].find("skipped") is not None and cases["LD701"].find("failure") is None
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("7", "2", "1")

    tolerant = run_cli(capsys, "replay", str(recording), "--select", SPINE, "--format", "junit",
                       "--fail-on", "critical")
    schema.validate(tolerant.out)
    suite = ET.fromstring(tolerant.out).find("testsuite")
    assert suite is not None and suite.get("failures") == "0" and tolerant.code == 0
    assert "LD301" in tolerant.out.split("<system-out>")[1]  # below the threshold: reported, not failed


def test_html_needs_no_optional_library(capsys: pytest.CaptureFixture[str], recording: Path,
                                       monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The charts are inline SVG: no Plotly (4.8 MB of inlined JavaScript), no script at all."""
    monkeypatch.setitem(sys.modules, "plotly", None)  # import fails as if not installed
    out = tmp_path / "r.html"
    result = run_cli(capsys, "replay", str(recording), "--select", SPINE, "--format", "html", "-o", str(out))
    assert result.code == 1 and result.out == ""
    assert result.err.strip() == f"llmdoctor: wrote the html report to {out}"  # -o says where it wrote
    page = out.read_text()
    assert "<script" not in page and "<svg" in page and len(page.encode()) < 100_000


@pytest.mark.parametrize(("name", "args", "fmt", "start"), [
    ("report.html", (), "html", "<!DOCTYPE html>"),
    ("incident.MD", (), "markdown", "# llmdoctor "),
    ("report.json", (), "json", "{"),
    ("llmdoctor.xml", (), "junit", "<?xml"),
    ("report.html", ("--format", "markdown"), "markdown", "# llmdoctor "),  # --format says otherwise: it wins
    ("report.html", ("--json",), "json", "{"),
    ("report.log", (), "text", "llmdoctor "),
])
def test_the_output_files_extension_picks_the_format(capsys: pytest.CaptureFixture[str], recording: Path,
                                                     tmp_path: Path, name: str, args: tuple[str, ...],
                                                     fmt: str, start: str) -> None:
    """`-o report.html` wrote the text report into a file named .html."""
    out = tmp_path / name
    result = run_cli(capsys, "replay", str(recording), "--select", SPINE, *args, "-o", str(out))
    assert result.code == 1 and result.out == ""
    assert result.err.strip() == f"llmdoctor: wrote the {fmt} report to {out}"
    assert out.read_text().startswith(start)


def test_html_on_a_terminal_is_refused_with_a_hint(capsys: pytest.CaptureFixture[str], recording: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    result = run_cli(capsys, "replay", str(recording), "--format", "html")
    assert result.code == 3 and result.out == ""
    assert result.err.strip() == ("llmdoctor: error: the HTML report is a file to open or attach: "
                                  "add -o report.html (or redirect stdout)")


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


# Reports console errors and uncaught exceptions into the DOM, where --dump-dom shows them.
_PROBE = """<script>window.__errors=[];
window.addEventListener('error',function(e){window.__errors.push(String(e.message))});
var _ce=console.error;
console.error=function(){window.__errors.push([].join.call(arguments,' '));_ce.apply(console,arguments)};
window.addEventListener('load',function(){setTimeout(function(){var d=document.createElement('pre');
d.id='probe';d.textContent='errors='+window.__errors.length+';'+window.__errors.join('|');
document.body.appendChild(d)},500)});
</script>"""


def _chromium_run(binary: str, html: Path, *mode: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
         f"--user-data-dir={tmp / 'profile'}", "--window-size=1200,1600", "--virtual-time-budget=10000",
         *mode, html.as_uri()],
        capture_output=True, text=True, timeout=120,
    )


@pytest.mark.slow  # a real headless Chromium
def test_html_renders_in_headless_chromium(capsys: pytest.CaptureFixture[str], recording: Path,
                                           tmp_path: Path) -> None:
    binary = _chromium()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (CI must install Debian's chromium package)")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    out = tmp_path / "report.html"
    result = run_cli(capsys, "replay", str(recording), "--select", SPINE, "--format", "html", "-o", str(out))
    assert result.code == 1
    page = out.read_text()
    assert len(page.encode()) < 500_000, len(page.encode())  # small enough for any ticket system
    assert "<script src=" not in page and "http" not in re.sub(r"http://127\.0\.0\.1:\d+/v1", "", page)
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("<head>", "<head>" + _PROBE, 1))

    dom = _chromium_run(binary, probed, "--dump-dom", tmp=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "errors=0;" in dom.stdout, re.findall(r"errors=.*", dom.stdout)
    # every section the Markdown report has, found in the DOM Chromium built
    for section in ("findings", "waterfall", "details", "checks"):  # no diagnosis: LD720 is not selected
        assert f'<section id="{section}">' in dom.stdout, section
    assert 'id="verdict"' in dom.stdout and "Result: WARNING (exit 1)" in dom.stdout
    findings = dom.stdout.split('<section id="findings">', 1)[1].split("</section>", 1)[0]
    assert findings.count("<tr>") == 3 and findings.count('class="sev"') == 2  # header + 2 rows, coloured
    assert "background:#b7791f" in findings  # warning's colour
    waterfall = dom.stdout.split('<section id="waterfall">', 1)[1].split("</section>", 1)[0]
    phases = [p["name"] for p in json.loads(run_cli(capsys, "replay", str(recording), "--select", SPINE,
                                                    "--json").out)["breakdown"]["phases"]]
    assert waterfall.count("<rect") == len(phases) and all(name in waterfall for name in phases)  # a bar each
    assert "Share" in waterfall and re.search(r">(?:8[5-9]|9\d)%<", waterfall), waterfall  # prefill's share
    assert "p90" in waterfall and "a new connection adds" in waterfall
    assert waterfall.count('class="point"') == 6 and 'class="fit"' in waterfall  # the sweep and its fit
    checks = dom.stdout.split('<section id="checks">', 1)[1].split("</section>", 1)[0]
    assert "with findings" in checks and "skipped LD710: " in checks  # tally, skipped grouped by reason
    assert re.search(r"<h3>.*?Cold start / scale-to-zero · LD301", dom.stdout)

    shot = tmp_path / "shot.png"
    taken = _chromium_run(binary, out, f"--screenshot={shot}", tmp=tmp_path)
    assert taken.returncode == 0 and shot.exists(), taken.stderr[-2000:]
    assert _distinct_colours(shot) > 20  # not a blank page: text, bars and points in several colours


def _distinct_colours(png: Path) -> int:
    """Distinct RGB(A) pixel values of a PNG (decoded with zlib; 8-bit RGB/RGBA, no PIL needed)."""
    import struct
    import zlib

    data = png.read_bytes()
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and colour in (2, 6)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    seen: set[bytes] = set()
    prev = bytearray(stride)
    for row in range(height):
        start = row * (stride + 1)
        ftype, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 255
            elif ftype == 2:
                line[i] = (line[i] + b) & 255
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        if row % 8 == 0:
            seen.update(bytes(line[i:i + 3]) for i in range(0, stride, channels * 4))
        prev = line
    return len(seen)
