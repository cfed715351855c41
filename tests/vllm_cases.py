"""The real-vLLM cases of issue 26's acceptance, shared by the two vLLM test modules.

``tests/integration/test_vllm.py`` runs them on vLLM's default flags, ``test_vllm_request_clocks.py``
with ``--enable-per-request-metrics`` (each answer carries its own server clocks). Each case is one
server (a start is 30-110 s on two shared cores) and a :class:`Case` around it: its
``llmdoctor check`` runs once per host, on first use, quietly and with one busy loop per core
(:func:`tests.processes.busy_loops`, bounded, stopped after the check; the server itself starts on a
quiet host). What a case's report must show is a function here that lists what it got wrong::

    with VllmServer(model) as server:
        case = Case(server, tmp, "healthy")
        assert not healthy_problems(case.checked(busy=True).report)

- healthy: no loud finding (LD208's host pressure excepted, when the run measured its host saturated:
  vLLM shares this host, that warning is true), nothing confirmed;
- queue (``--max-num-seqs 1`` behind background streams): the first finding carries the queueing cause,
  and nothing but queueing is confirmed;
- KV pressure (a 1,280-token cache and six concurrent long generations): the first finding is KV
  pressure's, the log's past start-up is not loud, queueing and slow prefill are not listed beside it,
  and only KV pressure is confirmed (on the busy host, where the server's own host is saturated, the
  diagnosis may also confirm nothing).

"First", on the busy host: the busy loops starve vLLM's CPU engine too (it shares this host), so its own
compute can truly cost more than the case's cause; the case's finding may then rank behind the findings
of that compute (`STARVED_COMPUTE_CHECKS`) and nothing else, and only while LD208 says the server's host
was saturated.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cliutil import Result, run_process
from tests.processes import busy_loops
from tests.vllm_server import BackgroundLoad, VllmServer, wait_for_metric, words

__all__ = [
    "CHECK_TIMEOUT_S", "HOSTS", "KV_CAUSES", "KV_CHECKS", "KV_HOSTS", "KV_LOAD", "QUEUE_HOSTS", "QUEUE_LOAD",
    "STARVED_COMPUTE_CHECKS", "Case", "Checked", "case_finding", "check", "findings", "first", "first_in_text",
    "healthy_problems", "is_queueing", "kv_problems", "queue_confirmed_but", "queue_problems", "server_host_saturated",
    "summary", "under_load",
]

CHECK_TIMEOUT_S = 420
#: The findings of an engine's own compute (a high floor, a fixed cost, slow decode). With one busy loop per
#: core on the host that runs vLLM's CPU engine, the engine itself is starved: measured 2026-12-03 (CI and a
#: rehearsal of it, load 2-14), decode 54-59 ms a token and a "Say ok." floor of 1.7-2.0 s where vLLM's own
#: clock put 785-816 ms of it in the queue. The slowed compute then truly costs more than the case's cause, and
#: may rank above it, but only while LD208 says the server's own host was saturated.
STARVED_COMPUTE_CHECKS = ("LD701", "LD702", "LD703")
#: The host a case's check runs on: as it is, or with one busy loop per core (slow: the check takes longer).
HOSTS = (pytest.param(False, id="quiet"), pytest.param(True, id="busy", marks=pytest.mark.slow))
#: The queue case's hosts without per-request clocks. On the busy host the case itself does not always
#: happen, and without each request's own clock nothing tells when it did not: the background threads,
#: starved by the busy loops, leave vLLM's one slot idle when ours arrive (measured 2026-12-03: with the
#: clocks, 5 of our 6 requests waited 0 ms by vLLM's own clock; without them, 2 of 6 came in 33-39 ms, and
#: LD203 found no queue in 1 of 3 runs). So the busy run is an expected failure that may pass (it passed in
#: CI that day); the clocked module (test_vllm_request_clocks.py) asserts the busy case strictly whenever
#: vLLM's own clock says it happened.
_QUEUE_MAY_NOT_HAPPEN = pytest.mark.xfail(
    strict=False, reason="issue 26: on a busy host the background cannot always keep vLLM's one slot busy, and "
                         "without per-request clocks nothing tells when the queue did not happen")
QUEUE_HOSTS = (pytest.param(False, id="quiet"),
               pytest.param(True, id="busy", marks=[pytest.mark.slow, _QUEUE_MAY_NOT_HAPPEN]))
#: The KV case's hosts. On the busy host the preemptions do not always happen during our run (measured
#: 2026-12-03: "341 preemptions since the server started" but none in our window, the log's KV-full lines the
#: only loud KV finding, ranked under LD208): a non-strict expected failure there too, for the same reason.
_KV_MAY_NOT_HAPPEN = pytest.mark.xfail(
    strict=False, reason="issue 26: on a busy host the background cannot always keep vLLM's KV cache full during "
                         "our run")
KV_HOSTS = (pytest.param(False, id="quiet"),
            pytest.param(True, id="busy", marks=[pytest.mark.slow, _KV_MAY_NOT_HAPPEN]))
KV_CHECKS = ("LD204", "LD205", "LD210")
KV_CAUSES = ("kv_cache_pressure",)  # llmdoctor.causes.Cause.KV_CACHE_PRESSURE
#: The queue case's background (with QUEUE_ARGS): two threads each asking for a 200-token answer after
#: another, not streamed, so that one runs while the other waits (see `BackgroundLoad`: streamed answers
#: left vLLM's engine idle when 4 of 6 of ours arrived, at load 11-23 on two cores).
QUEUE_LOAD: dict[str, Any] = {"streams": 2, "max_tokens": 200, "max_requests_each": 400, "stream": False}
#: The KV case's background (with KV_PRESSURE_ARGS): six ~190-token prompts (distinct, so that the prefix
#: cache cannot share their blocks) each generating 500 tokens, 3x the 1,280-token cache (the recordings
#: used 800-token generations: as many preemptions, but our own requests then wait twice as long behind them).
KV_LOAD: dict[str, Any] = {"streams": 6, "max_tokens": 500, "prompt": words(90), "distinct": True,
                           "max_requests_each": 80}


def check(server: VllmServer, *args: str, timeout: float = CHECK_TIMEOUT_S) -> Result:
    """``llmdoctor check --json`` as a real process against `server`; the report is validated."""
    result = run_process("check", "--endpoint", server.url, "--json", "--timeout", "60", *args, timeout=timeout)
    assert result.code in (0, 1, 2), f"exit {result.code}\n{result.err[-3000:]}"
    return result


def findings(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every finding of the report: the ranked ones and those folded under them (``supporting``)."""
    return [g for f in report["findings"] for g in (f, *f.get("supporting", ()))]


def first(report: dict[str, Any]) -> dict[str, Any]:
    assert report["findings"], "no finding at all"
    return dict(report["findings"][0])


def summary(report: dict[str, Any]) -> str:
    """The ranked findings and the diagnosis's verdict, one line each (printed for the record)."""
    lines = []
    for f in report["findings"]:
        lines.append(f"{f['rank']}. {f['severity']} {f['confidence']} {f['check_id']} {f.get('cause') or '-'}: "
                     f"{f['title']} ({f.get('impact_ms')} ms)")
        lines += [f"     + {s['severity']} {s['confidence']} {s['check_id']} "
                  f"{s.get('cause') or s.get('symptom') or '-'}: {s['title']}" for s in f.get("supporting", ())]
    diagnosis = report.get("diagnosis") or {}
    confirmed = [f"{c['title']} (p={c['probability']})" for c in diagnosis.get("confirmed", [])]
    lines.append(f"diagnosis: confirmed {confirmed or 'nothing'}; stop: {diagnosis.get('stop_reason')}")
    lines.append(f"host saturated: {bool((report.get('client_host') or {}).get('saturated'))}")
    return "\n".join(lines)


def first_in_text(text: str) -> str:
    """The check id of the finding ranked first in the text report: the summary at the top says what it
    is (`` 1. WARNING Queueing: …``), the details of the same rank which check it is (`` 1. … · LD203 · ``)."""
    top = re.search(r"^\s*1\.\s+(?:CRITICAL|WARNING|INFO)\s+\S", text, re.MULTILINE)
    match = re.search(r"^\s*1\. .+? · (LD\d+) · ", text, re.MULTILINE)
    assert top and match and top.start() < match.start(), text[-2000:]
    return match.group(1)


def _confirmed(report: dict[str, Any]) -> list[str]:
    return [c["id"] for c in (report.get("diagnosis") or {}).get("confirmed", [])]


def _loud(report: dict[str, Any]) -> list[str]:
    """Ranked warnings and criticals, but LD208's when the run measured its own host saturated."""
    saturated = bool((report.get("client_host") or {}).get("saturated"))
    return [f"{f['check_id']} {f['severity']}: {f['title']}" for f in report["findings"]
            if f["severity"] in ("warning", "critical") and not (f["check_id"] == "LD208" and saturated)]


def healthy_problems(report: dict[str, Any]) -> list[str]:
    """What a healthy server's report got wrong: a loud finding, or a confirmed cause."""
    return [f"loud: {x}" for x in _loud(report)] + [f"confirmed: {c}" for c in _confirmed(report)]


def is_queueing(f: dict[str, Any]) -> bool:
    """Whether the finding carries the queueing cause."""
    return f.get("cause") == "queueing"


def _is_kv(f: dict[str, Any]) -> bool:
    return f["check_id"] in KV_CHECKS or f.get("cause") in KV_CAUSES


def server_host_saturated(report: dict[str, Any]) -> bool:
    """The run measured its host saturated, and LD208 says that host runs the server (loudly)."""
    saturated = bool((report.get("client_host") or {}).get("saturated"))
    return saturated and any(f["check_id"] == "LD208" and f["severity"] != "info"
                             and f["title"].startswith("Server host pressure") for f in findings(report))


def case_finding(report: dict[str, Any], is_case: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    """The best ranked finding that carries the case's cause, None when none does."""
    return next((f for f in report["findings"] if is_case(f)), None)


def _ranking_problems(report: dict[str, Any], is_case: Callable[[dict[str, Any]], bool], what: str) -> list[str]:
    """The case's cause must be ranked first; on a saturated host that runs the server it may rank behind
    the starved engine's own compute only (`STARVED_COMPUTE_CHECKS`), which is then truly slower."""
    ranked = report["findings"]
    at = next((i for i, f in enumerate(ranked) if is_case(f)), None)
    if at is None:
        return [f"{what} is not listed"]
    ahead = ranked[:at]
    if not ahead or (server_host_saturated(report) and all(f["check_id"] in STARVED_COMPUTE_CHECKS for f in ahead)):
        return []
    return [f"{what} is not first"]


def queue_confirmed_but(report: dict[str, Any], *allowed: str) -> list[str]:
    """The causes the diagnosis confirmed other than `allowed`."""
    return [c for c in _confirmed(report) if c not in allowed]


def queue_problems(report: dict[str, Any]) -> list[str]:
    """What a queued server's report got wrong: queueing not first (see `_ranking_problems`), or another
    cause confirmed."""
    out = _ranking_problems(report, is_queueing, "queueing")
    return out + [f"confirmed: {c}" for c in queue_confirmed_but(report, "queueing")]


def kv_problems(report: dict[str, Any]) -> list[str]:
    """What a KV-pressured server's report got wrong (see the module's docstring)."""
    out = _ranking_problems(report, _is_kv, "KV pressure")
    out += [f"loud past start-up: {f['title']}" for f in findings(report)
            if f["check_id"] == "LD303" and f["severity"] != "info" and "met a cold server" not in f["message"]]
    out += [f"beside KV pressure: {f['check_id']} {f.get('cause')}" for f in report["findings"]
            if f["severity"] != "info" and f.get("cause") in ("queueing", "long_prefill")]
    confirmed = _confirmed(report)
    # On a saturated host that runs the server the diagnosis may stop before it confirms (measured 2026-12-03:
    # "budget spent (8/10 requests, 14.9/30 s)", KV pressure first and critical): confirming nothing is no false
    # claim. Confirming another cause always is.
    unconfirmed_ok = server_host_saturated(report)
    # On such a host the diagnosis may also confirm the queue that KV pressure makes (rehearsal 2026-12-03: queueing
    # at p = 0.996 by vLLM's queue clock on lone requests, its LD720 folded under the critical KV finding). The queue
    # is real and the report reads KV first with the queue beneath it; beside KV, or on a quiet host, it is a fault.
    folded = _folded_under_kv(report) if unconfirmed_ok else set()
    kv_like = [c for c in confirmed if any(k in c for k in ("kv", "preempt"))]
    others = [c for c in confirmed if c not in kv_like and c not in folded]
    if (not kv_like and not unconfirmed_ok) or others:
        out.append(f"confirmed: {confirmed or 'nothing'}")
    return out


def _folded_under_kv(report: dict[str, Any]) -> set[str]:
    """The causes of the diagnosis's findings (LD720) folded under the first KV finding."""
    top = next((f for f in report["findings"] if _is_kv(f)), None)
    if top is None:
        return set()
    return {s["cause"] for s in top.get("supporting", ()) if s["check_id"] == "LD720" and s.get("cause")}


@dataclass
class Checked:
    """One check of a case: its JSON report, its saved measurements (the file and the same rendered as
    text: what an operator reads), and how long it took."""

    report: dict[str, Any]
    saved: Path
    text: str
    seconds: float

    @property
    def measurements(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.saved.read_text())
        return data


class Case:
    """One running vLLM server and its check, run once per host (quiet, busy) on first use.

    The check reads the server's log (``--log``) and saves its measurements, which are replayed as
    text (what an operator reads). With `wait_metric`, each check starts once that series of the
    server's ``/metrics`` reaches 1 (the case's fault is happening).
    """

    def __init__(self, server: VllmServer, tmp: Path, name: str, wait_metric: str | None = None) -> None:
        self.server = server
        self.tmp = tmp
        self.name = name
        self.wait_metric = wait_metric
        self._done: dict[bool, Checked] = {}

    def checked(self, busy: bool) -> Checked:
        if busy not in self._done:
            self._done[busy] = self._check(busy)
        return self._done[busy]

    def _check(self, busy: bool) -> Checked:
        name = f"{self.name}-{'busy' if busy else 'quiet'}"
        if self.wait_metric:
            wait_for_metric(self.server.url, self.wait_metric, 1, timeout_s=120)
        saved = self.tmp / f"{name}.measurements.json"
        t0 = time.monotonic()
        with busy_loops(seconds=CHECK_TIMEOUT_S) if busy else contextlib.nullcontext():
            result = check(self.server, "--log", str(self.server.log_path), "--save-measurements", str(saved))
        seconds = time.monotonic() - t0
        report = result.report
        text = run_process("replay", str(saved), timeout=120).out
        (self.tmp / f"{name}.json").write_text(json.dumps(report, indent=1))
        (self.tmp / f"{name}.txt").write_text(text)
        print(f"\n--- {name}: check took {seconds:.0f} s\n{summary(report)}")
        return Checked(report, saved, text, seconds)


def under_load(model: Path, tmp: Path, name: str, server_args: tuple[str, ...], wait_metric: str,
               load: dict[str, Any]) -> Iterator[Case]:
    """Start vLLM with `server_args` and a bounded background load (long enough for a quiet and a busy
    check), and yield the case; the load and the server stop afterwards."""
    with VllmServer(model, log_path=tmp / "server.log", extra_args=server_args) as server, \
            BackgroundLoad(server.url, server.model_id, max_s=3 * CHECK_TIMEOUT_S, **load) as background:
        yield Case(server, tmp, name, wait_metric)
        print(f"\n{name}: background requests {background.sent} sent, {background.completed} completed, "
              f"{background.failed} failed")
