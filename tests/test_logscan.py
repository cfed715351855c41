"""The log scanner and the logs probe, on real log excerpts (fixtures/logs) and generated files."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import textwrap
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import llmdoctor.logs.scan as logscan
from llmdoctor.context import Context, ProbeUnavailable
from llmdoctor.logs.scan import (
    CONTEXT_OVERFLOW,
    GATE_ANCHORS,
    GPU_ERROR,
    GPU_OOM,
    HOST_OOM,
    KV_PREEMPTION,
    MODEL_LOAD,
    LogScan,
    LogScanner,
    classify_line,
    clean_line,
    scan_lines,
)
from llmdoctor.options import Options
from llmdoctor.probes.logs import parse_since, scan_logs
from llmdoctor.serde import from_data, to_data

LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "logs"

# Exact event counts per class for every real excerpt (see fixtures/logs/SOURCES.md).
EXPECTED = {
    "vllm-oom.log": {GPU_OOM: 1, KV_PREEMPTION: 1},  # line 1: 97.1 % KV with 4 pending
    "vllm-oom-v1.log": {GPU_OOM: 1},
    "vllm-cuda-error.log": {GPU_ERROR: 2},
    "kernel-xid.log": {GPU_ERROR: 1},
    "vllm-preemption.log": {KV_PREEMPTION: 3},
    "sglang-retract.log": {KV_PREEMPTION: 1},
    "vllm-context.log": {CONTEXT_OVERFLOW: 2},
    "tgi-context.log": {CONTEXT_OVERFLOW: 3},
    "tgi-startup.log": {MODEL_LOAD: 3},
    "llamacpp-oom.log": {GPU_OOM: 1},
    "llamacpp-compose-oom.log": {GPU_OOM: 1},
    "llamacpp-context.log": {CONTEXT_OVERFLOW: 3},
    "llamacpp-startup.log": {MODEL_LOAD: 1},
    "ollama-truncate.log": {CONTEXT_OVERFLOW: 4},
    "ollama-startup.log": {MODEL_LOAD: 1, CONTEXT_OVERFLOW: 1, GPU_OOM: 1},
    "host-oom.log": {HOST_OOM: 1},
    "host-oom-compose.log": {HOST_OOM: 1},
    "vllm-startup.log": {MODEL_LOAD: 3},
    "vllm-benign.log": {},
}


def scan_file(path: Path) -> LogScan:
    scanner = LogScanner()
    with open(path, "rb") as f:
        scanner.scan_stream(f, path.name)
    return scanner.result()


def test_every_fixture_has_an_expectation() -> None:
    assert sorted(p.name for p in LOGS.glob("*.log")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_classified_exactly(name: str) -> None:
    result = scan_file(LOGS / name)
    assert result.counts == EXPECTED[name]
    assert result.lines_read == len((LOGS / name).read_bytes().splitlines())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_tiny_blocks_give_the_same_result(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines and tracebacks cut across read blocks are put back together."""
    whole = scan_file(LOGS / name)
    monkeypatch.setattr(logscan, "BLOCK", 37)
    assert to_data(scan_file(LOGS / name)) == to_data(whole)


def test_every_hit_line_contains_a_gate_anchor() -> None:
    """The gate must let through every line a rule matches (else the fast path would miss it)."""
    for path in LOGS.glob("*.log"):
        lines = path.read_bytes().splitlines()
        for hits in scan_file(path).hits.values():
            for hit in hits:
                assert any(a in lines[hit.line - 1] for a in GATE_ANCHORS), (path.name, hit.line)


def test_benign_log_reports_nothing() -> None:
    result = scan_file(LOGS / "vllm-benign.log")
    assert result.counts == {} and result.hits == {} and result.load_durations == []


def test_hits_point_at_file_and_line() -> None:
    result = scan_file(LOGS / "vllm-oom.log")
    hit = result.first(GPU_OOM)
    assert hit is not None and hit.where == "vllm-oom.log:12"
    assert hit.text.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 350.00 MiB")
    assert len(hit.text) <= logscan.MAX_LINE_CHARS
    assert hit.timestamp == "12-16 21:40:15" and hit.backend == "vllm"


def test_traceback_is_one_event_classified_by_its_last_line() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "/x/cuda_oom_guard.py", line 3, in run',
        '    raise RuntimeError("CUDA error: illegal memory access was encountered")',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "/x/engine.py", line 9, in step',
        "RuntimeError: engine dead",
        "INFO 06-02 11:03:56 [api_server.py:1336] Starting vLLM API server on http://0.0.0.0:8000",
    ]
    result = scan_lines(lines)
    assert result.counts == {GPU_OOM: 1}
    assert result.first(GPU_OOM) is not None and result.first(GPU_OOM).line == 4  # type: ignore[union-attr]


def test_nccl_error_on_the_header_line_and_in_the_exception_is_one_event() -> None:
    result = scan_file(LOGS / "vllm-cuda-error.log")
    kinds = [(h.kind, h.line) for h in result.hits[GPU_ERROR]]
    assert kinds == [("cuda", 4), ("nccl", 15)]


@pytest.mark.parametrize(
    "line",
    [
        "\x1b[1;31mERROR\x1b[0m 12-16 21:40:15 engine.py:135] torch.OutOfMemoryError: CUDA out of memory.",
        "vllm-1  | ERROR 12-16 21:40:15 engine.py:135] torch.OutOfMemoryError: CUDA out of memory.",
        "[llama-cpp] | ggml_backend_cuda_buffer_type_alloc_buffer: cudaMalloc failed: out of memory",
        "Jun 10 21:22:18 gpu-host vllm[159]: torch.OutOfMemoryError: CUDA out of memory.",
        "2024-05-01T10:00:00.123456789Z torch.OutOfMemoryError: CUDA out of memory.",
        '{"log":"torch.OutOfMemoryError: CUDA out of memory.\\n","stream":"stderr","time":"2024-05-01T10:00:00Z"}',
        '{"timestamp":"2024-05-01T10:00:00Z","level":"ERROR","fields":{"message":"CUDA out of memory"},"target":"x"}',
        "(EngineCore_0 pid=51) ERROR 05-02 21:10:15 [core.py:1136] torch.OutOfMemoryError: CUDA out of memory.\r",
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB.",
    ],
)
def test_prefixes_and_wrappers(line: str) -> None:
    result = scan_lines([line])
    assert result.counts == {GPU_OOM: 1}
    hit = result.first(GPU_OOM)
    assert hit is not None and "out of memory" in hit.text and "\x1b" not in hit.text and "\r" not in hit.text


def test_json_timestamp_and_prefix_inside_message() -> None:
    text, stamp = clean_line('{"log":"svc-1  | Killed\\n","time":"2024-05-01T10:00:00Z"}')
    assert text == "Killed" and stamp == "2024-05-01T10:00:00Z"
    assert classify_line(text) == (HOST_OOM, "killed")


def test_traceback_indentation_survives_prefix_stripping() -> None:
    text, _ = clean_line('ERROR 12-16 21:40:15 engine.py:135]   File "/usr/x.py", line 340, in forward')
    assert text.startswith('  File "/usr/x.py"')


@pytest.mark.parametrize(
    "line",
    [
        "WARNING 07-23 22:28:15.0 logging.py:314] Special tokens have been added in the vocabulary, make sure "
        "the associated word embeddings are fine-tuned or trained.",
        "FutureWarning: `resume_download` is deprecated and will be removed; prompt is too long to show",
        "INFO 05-09 00:49:33 [logger.py:39] Received request chatcmpl-1: prompt: 'why CUDA out of memory?', "
        "params: SamplingParams(n=1)",
        "INFO 10-26 21:48:00 [gpu_worker.py:276] Available KV cache memory: 18.38 GiB",
        "INFO 06-02 11:03:55 [gpu_model_runner.py:1933] Graph capturing finished in 37 secs, took 0.45 GiB",
        "(Worker pid=1) ERROR 07-15 21:01:01 [x.py:1] Compile with `TORCH_USE_CUDA_DSA` to enable device-side "
        "assertions.",
        "INFO 08-21 07:17:09 [scheduler.py:495] Preempted request cmpl-e59-0 has been resumed!",
    ],
)
def test_harmless_lines_are_not_reported(line: str) -> None:
    assert scan_lines([line]).counts == {}


def test_token_indices_warning_is_context_overflow() -> None:
    line = (
        "Token indices sequence length is longer than the specified maximum sequence length for this model "
        "(5012 > 4096). Running this sequence through the model will result in indexing errors"
    )
    assert scan_lines([line]).counts == {CONTEXT_OVERFLOW: 1}


def test_secrets_are_masked_in_hit_lines() -> None:
    line = (
        "ERROR torch.OutOfMemoryError: CUDA out of memory while serving Authorization: Bearer abcdef123456789 "
        "api_key=sk-proj-abcdefghijklmnop token=hf_abcdefghijklmnopqrstuvwx password: hunter22"
    )
    hit = scan_lines([line]).first(GPU_OOM)
    assert hit is not None
    for secret in ("abcdef123456789", "sk-proj-abcdefghijklmnop", "abcdefghijklmnop", "hf_abcdefghij", "hunter22"):
        assert secret not in hit.text
    assert "CUDA out of memory" in hit.text and logscan.MASK in hit.text


def test_long_and_invalid_lines() -> None:
    noise = b"x" * (3 * 1024 * 1024)
    data = (
        b"\xff\xfe\x80 CUDA error: an illegal memory access was encountered " + noise + b"\n"
        + noise + b" no newline at the end, but: Traceback (most recent call last)"
    )
    scanner = LogScanner()
    info = scanner.scan_stream(io.BytesIO(data), "big")
    result = scanner.result()
    assert result.counts == {GPU_ERROR: 1}
    hit = result.first(GPU_ERROR)
    assert hit is not None and len(hit.text) <= logscan.MAX_LINE_CHARS and hit.line == 1
    assert info.lines == 2 and info.bytes == len(data)


def test_hits_are_bounded_counts_are_not() -> None:
    line = "WARNING 08-20 10:18:39 scheduler.py:1141] Sequence group {} is preempted by PreemptionMode.RECOMPUTE mode"
    result = scan_lines([line.format(i) for i in range(500)])
    assert result.counts == {KV_PREEMPTION: 500}
    kept = result.hits[KV_PREEMPTION]
    assert len(kept) == logscan.MAX_HITS_KEPT
    assert kept[0].line == 1 and kept[-1].line == 500


def test_load_durations_and_cold_start() -> None:
    result = scan_file(LOGS / "vllm-startup.log")
    assert [(d.stage, d.seconds) for d in result.load_durations] == [
        ("weights", 1.27),
        ("model_load", 2.195456),
        ("engine_init", 90.84),
    ]
    cold = result.cold_start()
    assert cold is not None and cold[0] == pytest.approx(93.035456)
    assert result.starts() == 1
    tgi = scan_file(LOGS / "tgi-startup.log")
    assert tgi.cold_start() is not None and tgi.cold_start()[0] == pytest.approx(218.644204722)  # type: ignore[index]
    assert tgi.starts() == 1


def test_llamacpp_elapsed_timestamp_gives_the_load_time() -> None:
    result = scan_lines(["0.05.583.299 I srv          main: model loaded"])
    assert [(d.backend, d.stage, d.seconds) for d in result.load_durations] == [("llama.cpp", "model_loaded", 5.583)]


def test_ollama_load_duration_in_json() -> None:
    result = scan_lines(['{"msg":"request done","load_duration":2500000000,"time":"2024-05-01T10:00:00Z"}'])
    assert [(d.stage, d.seconds) for d in result.load_durations] == [("load_duration", 2.5)]


def test_result_round_trips_through_serde() -> None:
    result = scan_file(LOGS / "ollama-startup.log")
    assert from_data(LogScan, json.loads(json.dumps(to_data(result)))) == result


# -- fuzzing ------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=4096))
def test_random_bytes_never_crash(data: bytes) -> None:
    scanner = LogScanner()
    info = scanner.scan_stream(io.BytesIO(data), "fuzz")
    result = scanner.result()
    assert info.bytes == len(data)
    assert all(n > 0 for n in result.counts.values())


_FRAGMENTS = st.sampled_from(
    [
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in f',
        "torch.OutOfMemoryError: CUDA out of memory.",
        "The above exception was the direct cause of the following exception:",
        "",
        "Killed",
        "CUDA error: device-side assert triggered",
        "ERROR 12-16 21:40:15 engine.py:135] ",
        "\x1b[31m",
        "{\"log\":",
        "is preempted by PreemptionMode.RECOMPUTE",
        "Loading weights took 1.5 seconds",
        "\r",
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_FRAGMENTS | st.text(max_size=20), max_size=4).map("".join), max_size=40))
def test_random_lines_never_crash(lines: list[str]) -> None:
    result = scan_lines(lines)
    # At most one event a line the scanner read: a generated line may hold a newline, and then it is two.
    assert result.lines_read >= len(lines)
    assert sum(result.counts.values()) <= result.lines_read


# -- constant memory ----------------------------------------------------------------------

_RSS_SCRIPT = textwrap.dedent(
    """
    import sys
    from llmdoctor.logs.scan import LogScanner
    s = LogScanner()
    with open(sys.argv[1], "rb") as f:
        s.scan_stream(f, "x")
    r = s.result()
    # VmHWM: this process image's peak RSS (ru_maxrss would include the parent's, inherited at exec)
    hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    print(hwm, r.lines_read, sum(r.counts.values()))
    """
)


def _rss_kb(path: Path) -> tuple[int, int, int]:
    out = subprocess.run([sys.executable, "-c", _RSS_SCRIPT, str(path)], capture_output=True, text=True, check=True)
    rss, lines, events = (int(x) for x in out.stdout.split())
    return rss, lines, events


@pytest.mark.slow  # a benchmark: a 50 MB log
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc (Linux)")
def test_memory_stays_flat_on_a_50_mb_log(tmp_path: Path) -> None:
    block = (LOGS / "vllm-benign.log").read_bytes() + (LOGS / "vllm-preemption.log").read_bytes()
    small, big = tmp_path / "small.log", tmp_path / "big.log"
    small.write_bytes(block * (10 * 1024 * 1024 // len(block)))
    with open(big, "wb") as f:
        for _ in range(50 * 1024 * 1024 // len(block)):
            f.write(block)
    rss_small, _, _ = _rss_kb(small)
    rss_big, lines, events = _rss_kb(big)
    assert lines > 200_000 and events > 10_000
    assert rss_big - rss_small < 8 * 1024, (rss_small, rss_big)  # 10 MB vs 50 MB: no growth with size
    assert rss_big < 100 * 1024


# -- the probe ----------------------------------------------------------------------------


def _ctx(**options: object) -> Context:
    return Context(target=None, options=Options.of(**options))  # type: ignore[arg-type]


def test_probe_without_log_is_unavailable() -> None:
    with pytest.raises(ProbeUnavailable, match=r"no server log given \(use --log FILE\)"):
        scan_logs(_ctx())


def test_probe_with_only_missing_files_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(ProbeUnavailable, match="No such file"):
        scan_logs(_ctx(logs=(str(tmp_path / "absent.log"),)))


def test_probe_reads_several_files_gzip_and_records_errors(tmp_path: Path) -> None:
    gz = tmp_path / "oom.log.gz"
    gz.write_bytes(gzip.compress((LOGS / "llamacpp-oom.log").read_bytes()))
    result = scan_logs(_ctx(logs=(str(LOGS / "vllm-preemption.log"), str(gz), str(tmp_path / "gone.log"))))
    assert result.counts == {KV_PREEMPTION: 3, GPU_OOM: 1}
    assert result.files_read == 2 and [f.error is not None for f in result.files] == [False, False, True]


def test_probe_reads_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    stdin = io.TextIOWrapper(io.BytesIO((LOGS / "ollama-truncate.log").read_bytes()))
    monkeypatch.setattr(sys, "stdin", stdin)
    result = scan_logs(_ctx(logs=("-",)))
    assert result.counts == {CONTEXT_OVERFLOW: 4} and result.files[0].name == "<stdin>"


def test_probe_since_drops_older_dated_events(tmp_path: Path) -> None:
    log = tmp_path / "dated.log"
    log.write_text(
        "2020-01-01T00:00:00Z torch.OutOfMemoryError: CUDA out of memory.\n"
        + "2099-01-01T00:00:00Z CUDA error: an illegal memory access was encountered\n"
        + "WARNING 08-20 10:18:39 scheduler.py:1141] Sequence group 1 is preempted by PreemptionMode.RECOMPUTE\n"
    )
    result = scan_logs(_ctx(logs=(str(log),), since="2h"))
    assert result.counts == {GPU_ERROR: 1, KV_PREEMPTION: 1}  # the vLLM stamp has no year: kept
    assert result.skipped_before_since == 1
    with pytest.raises(ProbeUnavailable, match="--since"):
        scan_logs(_ctx(logs=(str(log),), since="last tuesday"))


def test_parse_since() -> None:
    now = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
    assert parse_since("2h", now) == datetime(2024, 5, 1, 10, 0, tzinfo=timezone.utc)
    assert parse_since("30 minutes ago", now) == datetime(2024, 5, 1, 11, 30, tzinfo=timezone.utc)
    assert parse_since("2024-04-30T08:00:00Z", now) == datetime(2024, 4, 30, 8, 0, tzinfo=timezone.utc)
    with pytest.raises(ValueError):
        parse_since("yesterday-ish", now)


def test_probe_journal_of_an_unknown_unit_does_not_crash() -> None:
    try:
        result = scan_logs(_ctx(journal_unit="llmdoctor-test-no-such-unit.service", since="1h"))
    except ProbeUnavailable as exc:  # no journal on this machine: a plain reason
        assert "journal" in exc.reason
    else:
        assert result.counts == {} and result.files[0].name == "journal:llmdoctor-test-no-such-unit.service"
