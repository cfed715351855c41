"""``llmdoctor check`` against a REAL llama.cpp server (llama-cpp-python) serving the tiny random GGUF.

What is asserted is what is true of the real server, measured by llmdoctor and cross-checked against
the server's own clocks: the ``openai-processing-ms`` header of non-streamed responses and the
``llama_perf_context_print: total time`` line llama.cpp logs after every generation.

Tolerances (loopback, two shared CPU cores):

- non-streamed: llmdoctor's total (= its TTFT, nothing earlier is observable) minus the server's
  ``openai-processing-ms`` is the loopback + HTTP overhead: never below -1 ms (the header is whole
  milliseconds), median at most ``NON_STREAM_OVERHEAD_MS``;
- streamed: llmdoctor's total minus llama.cpp's logged total covers the request parsing before
  llama.cpp starts its clock and the SSE framing after: never below -2 ms, median at most
  ``STREAM_OVERHEAD_MS``, each at most 25 % + 60 ms (a scheduling hiccup on a shared CPU).

Timing bands elsewhere are wide on purpose (the machine is shared); precise numbers belong in
benchmark scripts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmdoctor.probes.client import ClientSettings, ProbeClient
from llmdoctor.target import Target
from tests.cliutil import all_finding_ids, run_cli, run_process, validate_report
from tests.llamacpp_server import LlamaCppServer
from tests.processes import busy_loops

NON_STREAM_OVERHEAD_MS = 15.0
STREAM_OVERHEAD_MS = 25.0
PERF_TOTAL = re.compile(r"llama_perf_context_print:\s+total time =\s+([\d.]+) ms")
# LD301's rule (checks/ld301_cold_start.py): the penalty must exceed all three.
LD301_MIN_PENALTY_MS = 100.0

LONG_PROMPT_SHARE = 0.55
WORDS = (
    "river stone garden window paper light music forest winter summer table simple yellow orange market "
    "bridge silver planet letter number morning evening doctor teacher country village ocean mountain"
).split()


def _long_request(path: Path, server: LlamaCppServer) -> tuple[Path, int]:
    """A request whose prompt fills ~55 % of the window (LD101 then prices its prefill), and its
    token count by the server's own ``/extras/tokenize/count``."""
    words: list[str] = []
    count = 0
    with httpx.Client(base_url=server.url, timeout=30) as client:
        while count < LONG_PROMPT_SHARE * server.n_ctx:
            words += [WORDS[(len(words) * 7 + i) % len(WORDS)] for i in range(200)]
            resp = client.post("/extras/tokenize/count", json={"input": " ".join(words)})
            assert resp.status_code == 200, resp.text
            count = resp.json()["count"]
    body = {"model": "tiny-llama", "messages": [{"role": "user", "content": "Summarise: " + " ".join(words)}],
            "max_tokens": 16, "stream": True}
    path.write_text(json.dumps(body))
    return path, count


def _generations(measurements: dict[str, Any]) -> list[dict[str, Any]]:
    """Every successful generation request in the saved measurements, in the order sent."""
    seen: dict[tuple[float, str], dict[str, Any]] = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            # full timings only: the request_outcomes records (issue 15) repeat each request without them
            if "completions" in str(node.get("path", "")) and "started_at" in node and node.get("status") == 200 \
                    and "streamed" in node:
                seen[(node["started_at"], node["path"])] = node
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(measurements["measurements"])
    return sorted(seen.values(), key=lambda t: t["started_at"])


def _perf_totals(log: str) -> list[float]:
    return [float(m) for m in PERF_TOTAL.findall(log)]


def _wait_for_perf_lines(server: LlamaCppServer, offset: int, expected: int, timeout_s: float = 5.0) -> str:
    """The log after `offset`, once it holds `expected` total-time lines (they follow the stream's end)."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = server.log_text()[offset:]
        if len(_perf_totals(text)) >= expected or time.monotonic() > deadline:
            return text
        time.sleep(0.05)


def _warm(server: LlamaCppServer) -> None:
    with ProbeClient(Target(server.base_url), ClientSettings(timeout_s=60, max_requests=10)) as client:
        for _ in range(3):
            assert client.chat("Say ok.", max_tokens=8).ok


@pytest.fixture(scope="module")
def full_run(llama_server: LlamaCppServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One full ``llmdoctor check --json`` as a real subprocess against the (warmed) session server."""
    return _full_check(llama_server, tmp_path_factory.mktemp("vs-llamacpp"))


@pytest.fixture(scope="module")
def busy_run(llama_server: LlamaCppServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same check while one busy loop per core saturates this machine (bounded, stopped afterwards)."""
    with busy_loops(seconds=300):
        return _full_check(llama_server, tmp_path_factory.mktemp("vs-llamacpp-busy"), timeout=480)


def _full_check(llama_server: LlamaCppServer, tmp: Path, timeout: float = 240) -> dict[str, Any]:
    _warm(llama_server)
    saved = tmp / "measurements.json"
    long_request, long_tokens = _long_request(tmp / "long.json", llama_server)
    before = llama_server.log_text()
    offset = len(before)
    t0 = time.perf_counter()
    # LD212's probe (prefix_reuse) resends the --request prompt three times: the server log's longest prompt
    # would then be that one, not the prefill probe's, which the prefill-clock test reads from the log.
    result = run_process(
        "check", "--endpoint", llama_server.url, "--json", "--timeout", "60", "--max-requests", "40",
        "--save-measurements", str(saved), "--request", str(long_request),
        "--log", str(llama_server.log_path), "--ignore", "LD212", timeout=timeout,
    )
    elapsed = time.perf_counter() - t0
    assert result.code in (0, 1, 2), result.err
    measurements = json.loads(saved.read_text())
    gens = _generations(measurements)
    log = _wait_for_perf_lines(llama_server, offset, len(gens))
    print(f"\nllmdoctor check against llama_cpp.server: {elapsed:.1f} s, {len(gens)} generation requests")
    return {"result": result, "report": result.report, "measurements": measurements, "gens": gens, "log": log,
            "log_before": before,
            "long_tokens": long_tokens}


def _probe(measurements: dict[str, Any], name: str) -> Any:
    value = measurements["measurements"].get(name)
    if isinstance(value, dict) and "value" in value:
        return value["value"]
    return value


# ---------------------------------------------------------------------------------------------


def test_report_validates_and_no_check_crashes(full_run: dict[str, Any]) -> None:
    report = full_run["report"]
    validate_report(report)
    assert report["endpoint"] and report["model"] == "tiny-llama"
    statuses = {c["check_id"]: c["status"] for c in report["checks"]}
    assert len(statuses) >= 40
    assert "error" not in statuses.values(), [c for c in report["checks"] if c["status"] == "error"]
    for check in report["checks"]:
        if check["status"] == "skipped":
            assert check["reason"].strip(), check
    for probe in report["probes"]:
        if not probe["available"]:
            assert probe["reason"].strip(), probe
    # Probes that a plain llama-cpp-python server must satisfy.
    available = {p["name"] for p in report["probes"] if p["available"]}
    assert {"discovery", "first_request", "baseline", "sweep", "prefill", "logs"} <= available
    assert statuses["LD001"] == "passed"
    assert report["requests"]["sent"] <= report["requests"]["budget"] == 40


def test_breakdown_phases_add_up_to_the_total(full_run: dict[str, Any]) -> None:
    breakdown = full_run["report"]["breakdown"]
    phases = breakdown["phases"]
    assert phases and all(p["ms"] >= 0 for p in phases)
    assert sum(p["ms"] for p in phases) == pytest.approx(breakdown["total_ms"], abs=0.5 + 0.05 * len(phases))
    decode = next(p for p in phases if p["name"] == "decode")
    assert decode["ms"] > 0  # a real model decodes its 8 tokens after the first


def test_flat_latency_fit_separates_a_fixed_and_a_per_token_cost(full_run: dict[str, Any]) -> None:
    """Streams carry no usage here, so output tokens come from the events: every sweep request must
    generate exactly max_tokens (one chunk per token, empty byte-fallback deltas included).

    Found on the real server: the per-token cost GROWS with the answer's length (llama.cpp's own log:
    7.7 ms/token over 15 tokens, 10.7 ms/token over 64; llama-cpp-python's streaming re-detokenizes
    the text so far for every token), so the straight line through 1, 16 and 64 tokens has an
    intercept near zero and often slightly negative (-5 to -9 ms measured), although the true fixed
    cost (a 1-token request: 10-45 ms) is positive. Since the fit is robust with an interval (issue 15),
    an intercept whose interval spans zero is "not determined" and shown as no number rather than a
    negative one. What is asserted: the true fixed cost is positive and small, the fit's intercept is
    small, or not determined whenever its interval reaches 60 ms (no flat latency: LD702 stays silent),
    and the per-token cost is determined, in a plausible band and close to the sweep's own slope. When the
    run itself says the client host was saturated (other work on this machine), the busy-host assertions
    below apply instead.
    """
    one_token = [p["timing"]["total_ms"] for p in _probe(full_run["measurements"], "sweep")["points"]
                 if p["max_tokens"] == 1]
    assert one_token and 0 < min(one_token) < 250
    _assert_fit_honest(full_run)


def test_flat_latency_fit_on_a_busy_host_is_never_negative_nor_a_floor(busy_run: dict[str, Any]) -> None:
    """Issue 15: with every core busy the least-squares fit gave a fixed cost of -2,187 ms here. The robust
    fit either settles a small fixed cost or says it is not determined (no number, with the reason); it
    never shows a negative one, LD702 reports no flat latency, and the report says the host was saturated."""
    assert busy_run["report"]["client_host"]["saturated"], busy_run["report"]["client_host"]
    _assert_fit_honest(busy_run, busy=True)


def _sweep_slope(points: list[dict[str, Any]]) -> float:
    """ms per output token between the median totals of the sweep's shortest and longest answers."""
    by_tokens: dict[int, list[float]] = {}
    for p in points:
        by_tokens.setdefault(p["max_tokens"], []).append(p["timing"]["total_ms"])
    low, high = min(by_tokens), max(by_tokens)
    return (statistics.median(by_tokens[high]) - statistics.median(by_tokens[low])) / (high - low)


def _assert_fit_honest(run: dict[str, Any], busy: bool = False) -> None:
    report = run["report"]
    breakdown = report["breakdown"]
    points = _probe(run["measurements"], "sweep")["points"]
    answered = [p for p in points if p["timing"]["status"] == 200 and p["timing"]["error"] is None]
    if busy and len(answered) < len(points):
        # a starved server may miss llmdoctor's timeout: each such request is counted and the run is not OK
        failed = [(p["max_tokens"], p["timing"]["status"], p["timing"]["error"]) for p in points if p not in answered]
        assert report["requests"]["generation"]["failed"] >= len(failed), (failed, report["requests"])
        assert report["status"] != "ok", failed
        points = answered
    for point in points:
        assert point["timing"]["completion_tokens"] is None  # llama-cpp-python: no usage in streams
        assert point["timing"]["finish_reason"] == "length"
        assert point["timing"]["content_events"] == point["max_tokens"], point
    assert "LD702" not in all_finding_ids(report)
    by_tokens: dict[int, list[float]] = {}
    for p in points:
        by_tokens.setdefault(p["max_tokens"], []).append(round(p["timing"]["total_ms"], 1))
    print(f"\nsweep totals by max_tokens: {by_tokens}; fit {report['breakdown']['fixed_interval_ms']} "
          f"{report['breakdown']['per_token_ms']} {report['breakdown']['per_token_interval_ms']}")
    fixed, interval, per_token = breakdown["fixed_ms"], breakdown["fixed_interval_ms"], breakdown["per_token_ms"]
    seen = (fixed, interval, per_token, breakdown["per_token_interval_ms"], breakdown["fit_note"])
    assert fixed is None or 0 <= fixed < 60, seen
    if report["client_host"]["saturated"]:
        assert fixed is not None or "not determined" in breakdown["fit_note"], seen
        # How slow a starved server decodes is the host's business (~29 ms a token under busy loops, 541 ms
        # in one CI run where other servers competed too: 35 s for 64 tokens): the fit must agree with
        # the sweep's own slope between its shortest and longest answers, not with a fixed band.
        slope = _sweep_slope(points)
        assert per_token is None or (per_token > 2.0 and 0.5 * slope <= per_token <= 1.5 * slope), (seen, slope)
        return
    # On a quiet host the fit must have an interval, and when that interval cannot rule out a fixed cost of
    # 60 ms or more the fit must say the fixed cost is not determined rather than give one. How narrow the
    # interval is, is the host's business: quiet runs here measured tops of 39, 50 and 53 ms (64-token
    # answers 110-130 ms apart between repeats), and one CI run 142.7 (-63.0 to 142.7, 13.8 ms a token)
    # on a host the load probe did not call saturated; the doctor said "not determined" there, as it must.
    assert interval is not None and interval[0] <= interval[1], seen
    assert interval[1] < 60 or (fixed is None and "fixed cost not determined" in breakdown["fit_note"]), seen
    # The cost per token is determined (interval no wider than the estimate) and agrees with the sweep's own
    # slope between its shortest and longest answers: ≈ 8-17 ms a token measured here quiet.
    slope = _sweep_slope(points)
    low, high = breakdown["per_token_interval_ms"]
    assert per_token is not None and 2.0 < per_token < 40.0 and high - low <= per_token, seen
    assert 0.5 * slope <= per_token <= 1.5 * slope, (seen, slope)


def test_long_prompt_costs_more_time_to_first_token(full_run: dict[str, Any]) -> None:
    prefill = _probe(full_run["measurements"], "prefill")
    assert prefill["long_ttft_ms"] > prefill["short_ttft_ms"]
    assert prefill["long_tokens"] > 5 * prefill["short_tokens"]
    # ≈ 0.8 ms per prompt token by hand; the band is wide for a shared CPU.
    assert 0.1 < prefill["per_token_ms"] < 10.0
    # LD101 prices the --request prompt (more than half the window) with the measured prefill.
    ld101 = [f for f in full_run["report"]["findings"] if f["check_id"] == "LD101"]
    assert ld101, full_run["report"]["checks"]
    counted = {e["label"]: e["value"] for e in ld101[0]["evidence"]}
    print(f"\nLD101 evidence: {counted}; the server counts {full_run['long_tokens']} tokens in the text")
    assert ld101[0]["impact_ms"] and ld101[0]["impact_ms"] > 0


PROMPT_EVAL = re.compile(r"llama_perf_context_print: prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens")


def test_without_a_server_prompt_clock_the_prefill_cost_says_it_is_inferred(full_run: dict[str, Any]) -> None:
    """Control of the server-clocked prefill cost (tests/test_prefill_clock.py): llama-cpp-python sends no
    ``timings``, so the cost LD101 uses is the client's estimate, and its basis and evidence say so.

    The server's own log (its perf line after each of the prefill probe's two fresh prompts, the longest
    prompt of the run and the one before it) gives the rate by its clock: printed beside the estimate.
    """
    prefill = _probe(full_run["measurements"], "prefill")
    assert prefill["server_per_token_ms"] is None and "no server clock" in prefill["server_note"], prefill
    (ld101,) = [f for f in full_run["report"]["findings"] if f["check_id"] == "LD101"]
    assert "inferred from the client's time to first token" in ld101["impact_basis"], ld101["impact_basis"]
    assert any("(inferred clock)" in e["label"] for e in ld101["evidence"]), ld101["evidence"]
    lines = [(float(ms), int(n)) for ms, n in PROMPT_EVAL.findall(full_run["log"])]
    longest = max(range(len(lines)), key=lambda i: lines[i][1])
    (short_ms, short_n), (long_ms, long_n) = lines[longest - 1], lines[longest]
    by_log = (long_ms - short_ms) / (long_n - short_n)
    print(f"\nprefill probe: {prefill}\nserver log: short {short_ms} ms / {short_n} tokens, long {long_ms} ms / "
          f"{long_n} tokens: {by_log:.3f} ms a prompt token by the server")
    # Streams carry no usage: the prompts were counted by the tokenizer server_tokens found for --request.
    # Before, 1.3 tokens a word was assumed where this tokenizer spends ~2.4, and the rate was ~2x the log's.
    assert prefill["tokens_source"].startswith("server tokenizer (llama-cpp-python /extras/tokenize"), prefill
    assert abs(prefill["long_tokens"] - long_n) <= 0.05 * long_n, (prefill["long_tokens"], long_n)
    assert 0.7 * by_log <= prefill["per_token_ms"] <= 1.3 * by_log, (prefill["per_token_ms"], by_log)


def test_log_scan_reports_no_errors_in_a_healthy_llamacpp_log(full_run: dict[str, Any]) -> None:
    """No error in the log, except the 400s of the prompts over n_ctx that test_llamacpp_server.py sent
    to this session server before us (uvicorn's access lines: LD209 counts them, at low confidence)."""
    report = full_run["report"]
    statuses = {c["check_id"]: c for c in report["checks"]}
    for check_id in ("LD206", "LD210"):
        assert statuses[check_id]["status"] == "passed", statuses[check_id]
    rejected_before = len(re.findall(r'"POST /v1/(?:chat/)?completions HTTP/1\.1" 400', full_run["log_before"]))
    rejected_during = len(re.findall(r'"POST /v1/(?:chat/)?completions HTTP/1\.1" 400', full_run["log"]))
    # LD209 names the oversized-prompt cause: it may be folded under another finding of that cause
    ld209 = [g for f in report["findings"] for g in (f, *f["supporting"]) if g["check_id"] == "LD209"]
    if rejected_before + rejected_during == 0:
        assert statuses["LD209"]["status"] == "passed", statuses["LD209"]
    else:
        (finding,) = ld209
        assert finding["confidence"] == "low" and "HTTP 400" in finding["title"], finding
        assert f"({rejected_before + rejected_during}x)" in finding["title"], (finding, rejected_during)
    logs = _probe(full_run["measurements"], "logs")
    assert logs is not None
    # llama-cpp-python prints llama.cpp's loader lines but no load duration: LD303 says so (info).
    assert statuses["LD303"]["status"] in ("passed", "failed")
    ld303 = [f for f in report["findings"] if f["check_id"] == "LD303"]
    assert all(f["severity"] == "info" for f in ld303)


def test_warm_server_shows_no_cold_start(full_run: dict[str, Any]) -> None:
    """The session server was warmed before the run: LD301 must stay silent."""
    assert "LD301" not in all_finding_ids(full_run["report"])


def test_non_streamed_timing_agrees_with_openai_processing_ms(llama_server: LlamaCppServer) -> None:
    """llmdoctor's client on a non-streamed chat vs the server's own ``openai-processing-ms``."""
    diffs = []
    with ProbeClient(Target(llama_server.base_url, model="tiny-llama"),
                     ClientSettings(timeout_s=60, max_requests=10)) as client:
        for max_tokens in (4, 16, 4, 16, 4):
            t = client.chat("Say ok.", max_tokens=max_tokens, stream=False, extra={"logit_bias": {"2": -100}})
            assert t.ok, t
            assert t.ttft_ms == t.total_ms and t.completion_tokens is not None and t.completion_tokens >= max_tokens
            server_ms = t.server_timing["openai.processing_ms"]
            diffs.append(t.total_ms - server_ms)
            assert t.total_ms - server_ms > -1.0, (t.total_ms, server_ms)
    print(f"\nnon-streamed total - openai-processing-ms: {[round(d, 1) for d in diffs]} ms")
    assert statistics.median(diffs) < NON_STREAM_OVERHEAD_MS


def test_streamed_totals_agree_with_the_servers_own_log(
    llama_server: LlamaCppServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """In-process ``check --select LD70``: every generation request it sends (first request, baseline,
    sweep) is saved, so the n-th one pairs with the n-th ``total time`` line llama.cpp logs."""
    saved = tmp_path / "m.json"
    offset = len(llama_server.log_text())
    result = run_cli(capsys, "check", "--endpoint", llama_server.base_url, "--json", "--select", "LD70",
                     "--timeout", "60", "--save-measurements", str(saved))
    report = result.report
    assert result.code in (0, 1, 2), result.err
    ran = {c["check_id"]: c["status"] for c in report["checks"]}
    reasons = {c["check_id"]: c["reason"] for c in report["checks"]}
    # LD701 may skip, truthfully, when the floor is low and its spread within what this client's own
    # scheduling lag explains (rehearsal run of stop 31, on a machine where the client woke late); any
    # other skip, or a crash, is a failure.
    assert ran["LD701"] in ("passed", "failed") or (
        ran["LD701"] == "skipped" and "scheduling lag" in reasons["LD701"]), (ran["LD701"], reasons["LD701"])
    assert ran["LD702"] in ("passed", "failed") and ran["LD703"] in ("passed", "failed"), (ran, reasons)
    # A loaded host (another server decoding, abandoned requests of a busy run still generating) may leave
    # the sweep's slope undetermined: then the fit must say so instead of a number.
    breakdown = report["breakdown"]
    assert (breakdown["per_token_ms"] or 0) > 0 or "cost per token not determined" in breakdown["fit_note"], breakdown

    gens = _generations(json.loads(saved.read_text()))
    server_totals = _perf_totals(_wait_for_perf_lines(llama_server, offset, len(gens)))
    assert len(server_totals) == len(gens) >= 10
    diffs = []
    for timing, server_ms in zip(gens, server_totals):
        assert timing["streamed"]
        diff = timing["total_ms"] - server_ms
        diffs.append(diff)
        assert diff > -2.0, (timing["total_ms"], server_ms)
        assert diff < 0.25 * server_ms + 60.0, (timing["total_ms"], server_ms)
    print(f"\nstreamed total - llama.cpp's logged total: median {statistics.median(diffs):.1f} ms, "
          f"min {min(diffs):.1f}, max {max(diffs):.1f} ms over {len(diffs)} requests")
    assert statistics.median(diffs) < STREAM_OVERHEAD_MS


# ---------------------------------------------------------------------------------------------
# Cold start after launch: a fresh server per test


def _evicted_copy(src: Path, dst: Path) -> Path:
    """Copy the GGUF and drop the copy from the page cache, so the server must read it from disk."""
    shutil.copyfile(src, dst)
    fd = os.open(dst, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return dst


@pytest.fixture
def cold_server(llamacpp_version: str, tiny_gguf: Path, tmp_path: Path) -> Any:
    """A FRESH server whose weights are mmapped but neither mlocked nor in the page cache.

    llama-cpp-python mmaps and mlocks the model by default, so the load faults every page in and the
    first request after launch is barely slower (phase 1 measured 68 vs 43 ms). With
    ``--use_mlock false`` on an evicted copy, the first forward passes fault the 111 MB of weights in
    from disk: a real cold start of the kind a freshly scaled-out instance pays.
    """
    model = _evicted_copy(tiny_gguf, tmp_path / "cold.gguf")
    server = LlamaCppServer(model, model_alias="tiny-llama", log_path=tmp_path / "cold.log",
                            extra_args=["--use_mlock", "false"])
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _ld301_rule(first: dict[str, Any], samples: list[dict[str, Any]]) -> tuple[float, float, bool]:
    from llmdoctor.measurements.stats import percentile

    ttfts = [s["ttft_ms"] for s in samples if s["status"] == 200 and s["ttft_ms"] is not None]
    p50, p90 = percentile(ttfts, 50), percentile(ttfts, 90)
    assert p50 is not None and p90 is not None
    penalty = first["ttft_ms"] - ((first["connect_ms"] or 0) + (first["tls_ms"] or 0)) - p50
    return penalty, p50, penalty >= max(LD301_MIN_PENALTY_MS, p50, 3 * (p90 - p50))


def test_cold_start_is_detected_on_the_first_run_and_not_the_next(
    cold_server: LlamaCppServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """First request after launch vs the warm ones, as llmdoctor measures them.

    Found on the real server: with the weights paged in lazily the first request (sometimes the first
    two) pays for reading them from disk. Measured penalties on this machine: 114 to ~1,600 ms over a
    warm median of 14-25 ms, i.e. from just above LD301's 100 ms floor to far above it, depending on
    the disk and the CPU load. So whether LD301 *should* fire at this model size is decided by the
    numbers of each run, not by the test: LD301 must agree with its own rule (penalty >= max(100 ms,
    warm median, 3 × (p90 − p50))) applied to the saved measurements, in both runs. ``--samples 12``
    keeps one still-cold second request from setting p90 (with the default 5 samples its outlier
    inflates the jitter term and hides the cold start). Hard facts asserted: the first request after
    launch is slower than the warm median, and the next run against the now-warm server shows no
    cold start (penalty under 100 ms, LD301 silent).
    """
    first_saved, second_saved = tmp_path / "first.json", tmp_path / "second.json"
    reports = []
    for saved in (first_saved, second_saved):
        result = run_cli(capsys, "check", "--endpoint", cold_server.url, "--json", "--select", "LD301",
                         "--samples", "12", "--timeout", "60", "--save-measurements", str(saved))
        reports.append(result.report)
    penalties = []
    for report, saved in zip(reports, (first_saved, second_saved)):
        m = json.loads(saved.read_text())
        first, base = _probe(m, "first_request"), _probe(m, "baseline")
        penalty, p50, should_fire = _ld301_rule(first, base["samples"])
        fired = "LD301" in all_finding_ids(report)
        assert fired == should_fire, (penalty, p50, report["findings"])
        penalties.append((penalty, p50, fired))
    print(f"\ncold-start penalty (first TTFT - warm median): run 1 {penalties[0][0]:.0f} ms "
          f"(warm {penalties[0][1]:.0f} ms), run 2 {penalties[1][0]:.0f} ms (warm {penalties[1][1]:.0f} ms)")
    (penalty1, _, fired1), (penalty2, _, fired2) = penalties
    assert not fired1 or penalty1 >= LD301_MIN_PENALTY_MS
    assert penalty1 > 0  # the first request after launch is slower than the warm median
    assert not fired2 and penalty2 < LD301_MIN_PENALTY_MS
