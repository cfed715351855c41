"""Causes are a closed set, and every report lists each cause once, above the symptoms it explains.

Every simulator profile is diagnosed once, live (in parallel: the simulator's latencies are waits, not
work), and its recording is replayed in each output format: replay is fast, live runs are not.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from llmdoctor.analysis.measures import METRICS, metric
from llmdoctor.causes import CAUSES, Cause, Frequency, Kind, Symptom
from llmdoctor.checklist.registry import load_registry
from llmdoctor.diagnosis.hypotheses import HYPOTHESES
from llmdoctor.findings import Confidence, Severity
from llmdoctor.sim.profiles import PROFILES
from tests.checkcases import case_files, load_case, run_case
from tests.cliutil import validate_report

FORMATS = ("json", "text", "markdown", "junit", "html")
# LD102's findings about form alone: they cost nothing and no server rejects them
HYGIENE = {"System message not at the start", "Unusual role order", "Text sent as content-part arrays"}


# -- the closed set --------------------------------------------------------------------------------

def test_every_cause_has_a_title_a_kind_and_only_known_symptoms() -> None:
    assert set(CAUSES) == set(Cause)
    titles = [spec.title for spec in CAUSES.values()]
    assert len(set(titles)) == len(titles) and all(t[0].isupper() for t in titles)
    for cause, spec in CAUSES.items():
        assert spec.explains <= set(Symptom)
        if spec.kind is Kind.FAILURE:
            assert spec.explains <= {Symptom.UNSTABLE_FLOOR}, cause  # failures explain no latency, bar retries
    explained = set().union(*(spec.explains for spec in CAUSES.values()))
    assert explained == set(Symptom), "a symptom no cause can explain would never fold"


def test_hypotheses_are_causes_of_the_set() -> None:
    for h in HYPOTHESES:
        assert Cause(h.id) is h.cause and h.title == CAUSES[h.cause].title


def test_every_gate_metric_shows_a_symptom() -> None:
    assert metric("ttft_p90").symptom is Symptom.SLOW_FIRST_TOKEN
    assert metric("total").symptom is Symptom.HIGH_FLOOR
    for m in METRICS:
        assert isinstance(m.symptom, Symptom)
    with pytest.raises(KeyError):
        metric("tokens_per_joule")


def test_the_schema_lists_the_same_causes_and_symptoms() -> None:
    schema = json.loads(resources.files("llmdoctor").joinpath("schema/report.schema.json").read_text())
    assert schema["$defs"]["cause_id"]["enum"] == [c.value for c in Cause]
    assert schema["$defs"]["symptom_id"]["enum"] == [s.value for s in Symptom]
    assert schema["$defs"]["frequency_id"]["enum"] == [f.value for f in Frequency]


def test_every_firing_fixture_finding_names_a_cause_or_a_symptom() -> None:
    """Only LD102's hygiene findings name neither; LD701/LD702/LD401/LD710/LD711 are symptoms."""
    registry = load_registry()
    named: dict[str, set[str]] = {}
    for path in case_files():
        if load_case(path)["expect"]["status"] != "failed":
            continue
        check = registry.by_id(path.parent.name)
        assert check is not None
        for f in run_case(check, path).findings:
            what = f.cause.value if f.cause else f.symptom.value if f.symptom else ""
            # Neither a cause nor a symptom: LD102's hygiene, and LD208's caveat about our own instrument (the
            # client host's load when the endpoint is served elsewhere: info, never the patient's cause).
            caveat = f.check_id == "LD208" and f.severity is Severity.INFO
            assert what or (f.check_id == "LD102" and f.title in HYGIENE) or caveat, (path.name, f.title)
            named.setdefault(f.check_id, set()).add(what)
    symptoms = {cid for cid, whats in named.items() if whats & {s.value for s in Symptom}}
    assert symptoms == {"LD401", "LD701", "LD702", "LD710", "LD711"}, symptoms


# -- every profile, every format -------------------------------------------------------------------

@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One live run of every profile (default options, as `llmdoctor demo`), saved for replay."""
    from llmdoctor.doctor import diagnose
    from llmdoctor.inputs.recording import recording_dict
    from llmdoctor.options import Options
    from llmdoctor.sim.server import SimServer
    from llmdoctor.target import Target

    folder = tmp_path_factory.mktemp("profiles")

    def record(name: str) -> tuple[str, Path]:
        with SimServer(PROFILES[name]) as server:
            report, ctx = diagnose(Target(base_url=server.base_url), Options())
        path = folder / f"{name}.json"
        path.write_text(json.dumps(recording_dict(report, ctx)))
        return name, path

    with ThreadPoolExecutor(max_workers=6) as pool:
        return dict(pool.map(record, PROFILES))


@pytest.fixture(scope="module")
def rendered(recordings: dict[str, Path]) -> dict[tuple[str, str], str]:
    """(profile, format) -> the report replayed from the recording in that format (`llmdoctor replay`)."""
    from llmdoctor.cli import main

    out: dict[tuple[str, str], str] = {}
    for name, path in recordings.items():
        for fmt in FORMATS:
            target = path.with_name(f"{name}-report.{fmt}")
            with pytest.raises(SystemExit) as exc:
                main(["replay", str(path), "--format", fmt, "-o", str(target)])
            assert exc.value.code in (0, 1, 2), (name, fmt)
            out[name, fmt] = target.read_text()
    return out


_TITLE_TO_ID = {spec.title: cause.value for cause, spec in CAUSES.items()}


def _strip(title: str) -> str:
    return re.sub(r"\s+—.*$", "", title.strip())


def listed_causes(fmt: str, out: str) -> list[str]:
    """The cause ids a report lists as findings, once per listing (repeats kept).

    Text, Markdown and HTML head each listed finding with what it is about (its cause's title, when it
    names one) and its check id; JUnit names the cause on a ``Cause:`` line.
    """
    if fmt == "json":
        return [f["cause"] for f in json.loads(out)["findings"] if f["cause"]]
    if fmt == "text":
        titles = re.findall(r"^\s*(?:\d+\.|-) (.+?) · LD\d+ ·", out, re.M)
    elif fmt == "markdown":
        titles = re.findall(r"^### (?:\d+\. )?(.+?) · LD\d+ ·", out, re.M)
    elif fmt == "junit":
        texts = [e.text or "" for e in ET.fromstring(out).iter() if e.tag in ("failure", "system-out")]
        titles = [m for t in texts for m in re.findall(r"^Cause: (.+)$", t, re.M)]
    else:
        import html

        titles = [html.unescape(t) for t in re.findall(r"<h3><span class=sev[^>]*>\w+</span> (?:\d+\. )?(.+?) · LD\d+",
                                                        out)]
    return [_TITLE_TO_ID[_strip(t)] for t in titles if _strip(t) in _TITLE_TO_ID]


def test_replays_run_in_every_format(rendered: dict[tuple[str, str], str]) -> None:
    assert {name for name, _ in rendered} == set(PROFILES)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("profile", list(PROFILES))
def test_each_cause_is_listed_once(profile: str, fmt: str, rendered: dict[tuple[str, str], str]) -> None:
    report = json.loads(rendered[profile, "json"])
    causes = [c["id"] for c in report["causes"]]
    listed = listed_causes(fmt, rendered[profile, fmt])
    repeated = [c for c, n in Counter(listed).items() if n > 1]
    assert not repeated, (profile, fmt, listed)
    # ... and none is dropped: every format lists the causes the JSON names
    assert sorted(listed) == sorted(causes), (profile, fmt)


@pytest.mark.parametrize("profile", list(PROFILES))
def test_nothing_is_lost_and_causes_rank_above_their_symptoms(profile: str,
                                                               rendered: dict[tuple[str, str], str]) -> None:
    report = json.loads(rendered[profile, "json"])
    validate_report(report)
    top = report["findings"]
    produced = sum(c["findings"] for c in report["checks"])
    assert produced == len(top) + sum(len(f["supporting"]) for f in top), "every finding is listed once"

    def key(f: dict[str, Any]) -> tuple[int, int, bool, float]:
        """Where a finding ranks: severity; a measured cost, then none estimated, then ~0 ms; a recurring cost
        before a one-time one; the expected cost per request weighted by confidence; a group where its best
        member would."""
        one_time = Frequency(f["frequency"]) is Frequency.COLD_START
        cost = (f["impact_ms"] if one_time else f["cost_per_request_ms"]) or 0.0
        known = 2 if f["negligible"] else 1 if f["impact_ms"] is None else 0
        own = (Severity(f["severity"]).rank, known, one_time, -max(0.0, cost) * Confidence(f["confidence"]).weight)
        return min([own, *(key(s) for s in f["supporting"])])

    keys = [key(f) for f in top]
    assert keys == sorted(keys), "findings in rank order, a folded group where its best member would be"
    for f in top:
        for s in f["supporting"]:
            assert s["supporting"] == [] and (s["symptom"] or s["cause"] == f["cause"]), (f["check_id"], s)
            # the cause takes the worst severity and the largest impact of what it explains
            assert Severity(f["severity"]).rank <= Severity(s["severity"]).rank, (profile, f["check_id"], s)
            assert s["impact_ms"] is None or (f["impact_ms"] or 0.0) >= s["impact_ms"], (profile, f["check_id"], s)
            if s["symptom"]:
                assert s["symptom"] in f["symptoms"] and f["cause"], "a symptom folds under a cause"
    # the exit code is the worst listed severity, as before folding
    severities = {s["own_severity"] for f in top for s in [f, *f["supporting"]]}
    worst = min(severities, key=lambda v: Severity(v).rank, default=None)
    assert report["status"] == {"critical": "critical", "warning": "warning", "info": "ok", None: "ok"}[worst]


def test_slow_floor_lists_the_floor_cause_once_with_its_symptoms_folded(
        rendered: dict[tuple[str, str], str]) -> None:
    """The server's own clock (the simulator's vLLM prefill histogram over our requests) places the fixed
    cost in prefill, so LD702 names the floor as the cause itself (issue 26); the high floor and the
    diagnosis's restatement of the same cause fold under it."""
    report = json.loads(rendered["slow-floor", "json"])
    floor = [f for f in report["findings"] if f["cause"] == "server_floor"]
    assert len(floor) == 1 and floor[0]["rank"] == 1, [(f["check_id"], f["cause"]) for f in report["findings"]]
    assert floor[0]["check_id"] == "LD702" and "prefill by the server's own clock" in floor[0]["title"]
    folded = {s["check_id"]: s["symptom"] or s["cause"] for s in floor[0]["supporting"]}
    assert folded == {"LD701": "high_floor", "LD720": "server_floor"}
    assert not {"LD701", "LD720"} & {f["check_id"] for f in report["findings"]}
    assert floor[0]["impact_ms"] >= max(s["impact_ms"] or 0 for s in floor[0]["supporting"])
    text = rendered["slow-floor", "text"]
    assert len(re.findall(r"^\s*\d+\. Fixed per-request server overhead \(slow floor\) · LD702", text, re.M)) == 1
    supporting = text[text.index("It explains:"):]
    assert "- LD701 High latency floor" in supporting and "- LD720" in text[text.index("Also found by:"):]
    assert not re.search(r"^\s*\d+\. .+ · LD7(01|20) ·", text, re.M), "LD701/LD720 are not listed on their own"
    suite = ET.fromstring(rendered["slow-floor", "junit"])
    cases = {c.get("name", "").split()[0]: c for c in suite.iter("testcase")}
    assert cases["LD702"].find("failure") is not None
    for check_id in ("LD701", "LD720"):
        assert cases[check_id].find("failure") is None
        assert "Folded under LD702" in (cases[check_id].findtext("system-out") or "")
