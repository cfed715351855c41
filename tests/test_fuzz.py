"""Fuzzing every parser of untrusted input with hypothesis: no crash, no hang, bounded output.

Each parser may reject input only with its own documented error (SSEError, RecordingError,
RequestFileError, SerdeError, SloError, ValueError for /metrics); anything else is a bug. The
hypothesis deadline catches hangs; output sizes are checked against the input's, so a parser
cannot balloon memory. Examples are kept modest so CI stays fast.
"""

from __future__ import annotations

import io
import json
import string
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmdoctor.inputs.recording import RecordingError, load_recording
from llmdoctor.measurements.timing import ErrorKind, RequestTiming
from llmdoctor.options import Options
from llmdoctor.probes.client import ClientSettings, ProbeClient, parse_retry_after
from llmdoctor.probes.clock import SYSTEM_CLOCK
from llmdoctor.probes.sse import SSEError, SSEParser
from llmdoctor.probes.transports import Attempt
from llmdoctor.serde import SerdeError, from_data
from llmdoctor.target import Target

# The deadline catches a hang, not a slow example: an example takes milliseconds, and 2 s was exceeded on a
# busy 2-core host (issue 28), so 20 s (a hang still fails, and hypothesis replays it to be sure).
FUZZ = settings(max_examples=200, deadline=20_000, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Pieces that SSE streams and OpenAI chunks are made of, so random mixes reach deep paths.
SSE_ATOMS = [b"data: ", b"data:", b"event: error", b"event:", b"id: 1", b"id: \x00", b"retry: 5", b"retry: x",
             b": comment", b"\n", b"\r", b"\r\n", b"\n\n", b"[DONE]", b"\xef\xbb\xbf", b"\xff", b"\xc3",
             b'{"choices": [{"delta": {"content": "ok"}}]}', b'{"choices": [{"delta": {}, "finish_reason": "stop"}]}',
             b'{"choices": []}', b'{"choices": [null]}', b'{"choices": "x"}', b'{"error": {"message": "boom"}}',
             b'{"usage": {"prompt_tokens": -1, "completion_tokens": "7"}}', b'{"timings": {"a": 1e309}}',
             b'{"choices": [{"text": "t", "finish_reason": 1}]}', b'{"choices": [{"delta": {"reasoning": "r"}}]}',
             b"[1, 2]", b'"str"', b"null", b"{", b"}"]
PAYLOADS = [a for a in SSE_ATOMS if a[:1] in (b"{", b"[", b'"', b"n")] + [b"[DONE]"]
EOLS = [b"\n", b"\r\n", b"\r"]
# Mostly well-formed events (field, payload, end of line, blank line) with garbage mixed in.
sse_events = st.one_of(
    st.builds(lambda field, payload, eol, blank: field + payload + eol + (eol if blank else b""),
              st.sampled_from([b"data: ", b"data:", b"event: message\ndata: ", b"event: error\ndata: ",
                               b"id: 3\ndata: "]),
              st.sampled_from(PAYLOADS), st.sampled_from(EOLS), st.booleans()),
    st.sampled_from(SSE_ATOMS),
    st.binary(max_size=20),
)
sse_bodies = st.lists(sse_events, max_size=40).map(b"".join)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for p in points:
        pieces.append(data[last:p])
        last = p
    pieces.append(data[last:])
    return pieces


# -- SSE parser -------------------------------------------------------------------------------

@FUZZ
@given(body=sse_bodies, cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=20))
def test_sse_parser_any_bytes_any_split(body: bytes, cuts: list[int]) -> None:
    whole = SSEParser(dispatch_incomplete=True)
    expected = whole.feed(body) + whole.close()
    parser = SSEParser(dispatch_incomplete=True)
    events = []
    for piece in _split(body, cuts):
        events += parser.feed(piece)
    events += parser.close()
    assert events == expected  # chunk boundaries never change the events
    assert sum(len(e.data) for e in events) <= len(body)  # bounded: nothing invented


@FUZZ
@given(body=st.binary(min_size=0, max_size=400))
def test_sse_parser_limits_raise_only_sse_error(body: bytes) -> None:
    parser = SSEParser(max_line_bytes=64, max_event_bytes=128)
    try:
        parser.feed(body)
        parser.close()
    except SSEError:
        pass


# -- the client's stream handling, on real httpx responses ----------------------------------

@pytest.fixture(scope="module")
def client() -> Any:
    with ProbeClient(Target("http://127.0.0.1:9/v1", api_key="sk-FUZZKEY-0123456789"),
                     ClientSettings(timeout_s=5, max_requests=1)) as c:
        yield c


@FUZZ
@given(body=sse_bodies, cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=10),
       ctype=st.sampled_from(["text/event-stream", "text/plain", ""]))
def test_client_stream_handling_never_raises(client: ProbeClient, body: bytes, cuts: list[int], ctype: str) -> None:
    response = httpx.Response(200, headers={"content-type": ctype}, content=iter(_split(body, cuts)))
    timing = RequestTiming(method="POST", path="/v1/chat/completions", streamed=True, status=200)
    t0 = time.perf_counter()
    client._read_stream(response, timing, t0, Attempt(SYSTEM_CLOCK, t0=t0, deadline=t0 + 5), ctype)
    assert timing.error is None or timing.error in vars(ErrorKind).values()
    assert len(timing.text) <= 200 and len(timing.error_detail) <= 500
    assert timing.content_events + timing.reasoning_events <= body.count(b"{")
    assert "FUZZKEY" not in timing.error_detail + timing.text


@FUZZ
@given(body=st.one_of(st.binary(max_size=300), st.sampled_from(SSE_ATOMS)),
       mode=st.sampled_from(["json", "completion", "text"]),
       status=st.sampled_from([200, 400, 404, 429, 500, 503]))
def test_client_whole_body_handling_never_raises(client: ProbeClient, body: bytes, mode: str, status: int) -> None:
    response = httpx.Response(status, headers={"content-type": "application/json", "retry-after": "1"},
                              content=iter([body]))
    timing = RequestTiming(method="POST", path="/v1/completions")
    t0 = time.perf_counter()
    client._handle_response(response, timing, t0, Attempt(SYSTEM_CLOCK, t0=t0, deadline=t0 + 5), mode)
    assert (timing.status == status) and (status == 200 or timing.error == ErrorKind.HTTP_STATUS)


@FUZZ
@given(value=st.one_of(st.none(), st.text(max_size=40), st.sampled_from(
    ["0", "1", "-5", "1e400", "nan", "inf", "Wed, 21 Oct 2015 07:28:00 GMT", "Mon, 99 Foo 9999 99:99:99 GMT"])))
def test_retry_after_parser(value: str | None) -> None:
    wait = parse_retry_after(value)
    assert wait is None or (wait >= 0 and wait == wait and wait != float("inf"))


# -- Prometheus adapters --------------------------------------------------------------------

METRIC_ATOMS = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                "vllm:time_to_first_token_seconds_bucket", "tgi_queue_size", "sglang:num_running_reqs",
                "process_start_time_seconds", "llamacpp:requests_processing", "# TYPE x histogram", "# HELP x y",
                '{model_name="m",le="+Inf"}', '{le="0.1"}', '{model_name="\\"}', " ", "1", "-1", "NaN", "+Inf",
                "1e309", "\n", "_sum", "_count", "_total", "{", "}", '"', "=", ",", "#"]
METRIC_NAMES = [a for a in METRIC_ATOMS[:8]] + ["vllm:num_preemptions_total", "vllm:e2e_request_latency_seconds_sum",
                                               "vllm:e2e_request_latency_seconds_count", "tgi_batch_current_size"]
metric_lines = st.one_of(
    st.builds(lambda name, labels, value: f"{name}{labels} {value}\n", st.sampled_from(METRIC_NAMES),
              st.sampled_from(["", '{model_name="m"}', '{le="0.1"}', '{le="+Inf",model_name="m"}', "{}"]),
              st.sampled_from(["1", "0", "-1", "NaN", "+Inf", "1e309", "3.5", "x"])),
    st.sampled_from(METRIC_ATOMS), st.text(max_size=12))
metric_texts = st.lists(metric_lines, max_size=40).map("".join)


@FUZZ
@given(text=metric_texts)
def test_prometheus_normalize_raises_only_value_error(text: str) -> None:
    from llmdoctor.probes.backends import detect_backend
    from llmdoctor.probes.metrics import normalize, parse_samples

    try:
        samples = parse_samples(text)
    except ValueError:
        return
    detect_backend(set(samples))
    try:
        metrics = normalize(text, "/metrics")
    except ValueError:
        return
    assert len(metrics.samples) <= text.count("\n") + 1


@FUZZ
@given(data=st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                         lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                         max_leaves=20))
def test_native_json_adapters(data: Any) -> None:
    from llmdoctor.measurements.server_metrics import ServerMetrics
    from llmdoctor.probes.metrics import apply_llamacpp_slots, parse_ollama_ps

    try:
        parse_ollama_ps(data)
    except ValueError:
        pass
    apply_llamacpp_slots(ServerMetrics(backend="llamacpp", url="/slots", scraped_at=0.0), data)


# -- log scanner ----------------------------------------------------------------------------

LOG_ATOMS = [b"torch.OutOfMemoryError: CUDA out of memory", b"CUDA error: an illegal memory access",
             b"Traceback (most recent call last):\n", b"  File \"x.py\", line 1\n", b"Preempted", b"INFO ",
             b"ERROR ", b"2024-05-01 10:00:00 ", b"\x1b[31m", b"\x1b[0m", b'{"level":"error","msg":"', b'"}',
             b"Loading model weights took 12.5 GB and 33.1 seconds", b"\r\n", b"\n", b"\xff\xfe", b"\x00",
             b"Authorization: Bearer sk-LOGSECRET-123456789", b"context length exceeded", b"maximum context length"]
log_bodies = st.lists(st.one_of(st.sampled_from(LOG_ATOMS), st.binary(max_size=30)), max_size=80).map(b"".join)


@FUZZ
@given(body=log_bodies)
def test_log_scanner_any_bytes(body: bytes) -> None:
    logscan = pytest.importorskip("llmdoctor.logs.scan")
    scanner = logscan.LogScanner()
    scanner.scan_stream(io.BytesIO(body), "fuzz.log")
    result = scanner.result()
    rendered = json.dumps(__import__("llmdoctor.serde", fromlist=["to_data"]).to_data(result))
    assert "LOGSECRET" not in rendered
    assert len(rendered) < 20_000 + 4 * len(body)  # bounded by the input, not by its line count


# -- request files, recordings, config files, the serde -------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(
        st.sampled_from(["model", "messages", "role", "content", "prompt", "max_tokens", "stream", "tools",
                         "n", "temperature", "logprobs", "type", "text", "image_url"]) | st.text(max_size=6),
        c, max_size=5),
    max_leaves=25)


@FUZZ
@given(payload=st.one_of(json_values.map(lambda v: json.dumps(v).encode()), st.binary(max_size=200),
                         st.lists(json_values, max_size=4).map(lambda vs: "\n".join(map(json.dumps, vs)).encode())))
def test_request_file_reader(tmp_path: Path, payload: bytes) -> None:
    from llmdoctor.inputs.request_files import RequestFileError, load_requests

    path = tmp_path / "req.jsonl"
    path.write_bytes(payload)
    try:
        load_requests([str(path)])
    except RequestFileError:
        pass


@FUZZ
@given(payload=st.one_of(
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({"format": st.just("llmdoctor-measurements"), "version": st.sampled_from([1, 2, "1"])},
                          optional={"measurements": json_values, "options": json_values, "endpoint": json_values,
                                    "model": json_values}).map(lambda d: json.dumps(d).encode())))
def test_recording_loader_raises_only_recording_error(tmp_path: Path, payload: bytes) -> None:
    path = tmp_path / "rec.json"
    path.write_bytes(payload)
    try:
        load_recording(str(path))
    except RecordingError:
        pass


@FUZZ
@given(data=json_values, kind=st.sampled_from([Options, RequestTiming, list[RequestTiming], "baseline",
                                               "transport", "discovery", "dns", "server_metrics"]))
def test_serde_from_data_raises_only_serde_error(data: Any, kind: Any) -> None:
    if isinstance(kind, str):
        from llmdoctor.probes.catalog import PROBES

        kind = PROBES[kind].resolve_type()
    try:
        from_data(kind, data)
    except SerdeError:
        pass


@FUZZ
@given(text=st.one_of(st.text(alphabet=string.printable, max_size=200), st.sampled_from(
    ['[slo]\nttft_p90 = "800ms"', "[slo]\nttft_p90 = 5", '[slo]\nfoo = "x"', "slo = 3", "[[slo]]", "\x00"])))
def test_config_file_reader(tmp_path: Path, text: str) -> None:
    gate = pytest.importorskip("llmdoctor.inputs.slo")
    (tmp_path / gate.CONFIG_FILE).write_text(text)
    try:
        config, source = gate.load_config(tmp_path)
        gate.slos_from_config(config, source)
    except gate.SloError:
        pass
