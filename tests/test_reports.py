"""Markdown, JUnit XML and HTML reports of a real simulator run; the HTML opened in headless Chromium."""

from __future__ import annotations

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


def test_markdown_has_the_terminal_ranking_and_the_waterfall_table(
        capsys: pytest.CaptureFixture[str], recording: Path) -> None:
    text = _replay(capsys, recording)
    md = _replay(capsys, recording, "--format", "markdown")
    terminal_order = re.findall(r"^\s*\d+\. (?:WARNING|CRITICAL|INFO)\s+(LD\d+)", text, re.M)
    table_order = re.findall(r"^\| \d+ \| \w+ \| (LD\d+) \|", md, re.M)
    section_order = re.findall(r"^### \d+\. \w+ (LD\d+)", md, re.M)
    assert terminal_order == table_order == section_order == ["LD301", "LD702"]
    assert "| Phase | Time | Share | Clock | Note |" in md and "| wait for first token |" in md
    assert "skipped LD710" in md and md.startswith("# llmdoctor")


def test_evidence_reads_like_the_messages(capsys: pytest.CaptureFixture[str], recording: Path) -> None:
    """Times in the evidence have thousands separators and one decimal; flags read yes/no."""
    from llmdoctor.render.common import format_evidence

    assert format_evidence("first request TTFT", 1557.2891, "ms") == "first request TTFT 1,557.3 ms"
    assert format_evidence("measured", 71.727, "ms") == "measured 71.7 ms"
    assert format_evidence("ignore_eos honoured", True, "") == "ignore_eos honoured yes"
    assert format_evidence("uptime", 71, "s") == "uptime 71 s"
    for args in ((), ("--format", "markdown")):
        out = _replay(capsys, recording, *args)
        evidence = " ".join(line for line in out.splitlines() if "Evidence:" in line)
        assert "first request TTFT 1," in evidence and " True" not in evidence, evidence


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


def test_html_without_plotly_is_one_line_and_exit_3(capsys: pytest.CaptureFixture[str], recording: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "plotly.graph_objects", None)  # import fails as if not installed
    result = run_cli(capsys, "replay", str(recording), "--format", "html")
    assert result.code == 3 and result.out == ""
    assert result.err.strip() == ("llmdoctor: error: the html format needs Plotly: "
                                  "pip install 'llm-latency-doctor[html]'")


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
    assert "<script src=" not in page and "cdn" not in page.split("</script>")[-1].lower()  # self-contained
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("<head>", "<head>" + _PROBE, 1))

    dom = _chromium_run(binary, probed, "--dump-dom", tmp=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "errors=0;" in dom.stdout, re.findall(r"errors=.*", dom.stdout)
    # Plotly drew both charts as SVG: the waterfall's bars and the sweep's points with the fitted line.
    for chart in ("waterfall", "flat-latency"):
        block = dom.stdout.split(f'id="{chart}"', 1)[1][:200_000]
        assert 'class="main-svg"' in block, f"{chart} chart not rendered"
    assert dom.stdout.count('class="main-svg"') >= 4  # each Plotly chart has two stacked SVG layers
    assert "wait for first token" in dom.stdout and "fit: " in dom.stdout

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
