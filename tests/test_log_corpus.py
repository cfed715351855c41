"""Recall gate: every real log line of the labelled corpus (fixtures/logs/corpus) raises its event.

The corpus is one file per backend and class, each line quoted from a public issue thread, doc or a
recorded run, with its source and version in ``expected.tsv``; ``healthy.log`` holds real healthy lines
(stats lines of busy engines, start-up progress, access lines) that must raise nothing. A change to the
scanner, for speed or anything else, that loses one line fails here.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from llmdoctor.logs.engine import SATURATED_KV_PCT, SATURATED_TOKEN_USAGE
from llmdoctor.logs.recall import CorpusLine, load_corpus, score
from llmdoctor.logs.scan import CLASSES, GATE_ANCHORS, KV_PREEMPTION, LogScanner, scan_lines

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "logs" / "corpus"
LINES = load_corpus(CORPUS)
BACKENDS = ("vllm", "sglang", "tgi", "llamacpp", "llamacpp-python", "ollama", "kernel", "systemd", "docker", "ray")


def test_the_corpus_covers_every_backend_and_class() -> None:
    events = [item for item in LINES if item.cls != "none"]
    assert len(events) >= 100 and sum(item.cls == "none" for item in LINES) >= 25
    assert {item.cls for item in events} == set(CLASSES)
    assert {item.file.rsplit("-", 1)[0] for item in events} == set(BACKENDS)
    for item in LINES:  # a file is named for the class its lines raise; every line says where it is from
        assert item.cls == "none" or item.file.endswith(f"-{item.cls}.log") or item.file.endswith("-shard_wait.log")
        assert item.source and item.text.strip()


def test_every_corpus_file_line_is_labelled() -> None:
    labelled = {(item.file, item.line) for item in LINES}
    for path in CORPUS.glob("*.log"):
        lines = path.read_text(encoding="utf-8").splitlines()
        assert {(path.name, n) for n in range(1, len(lines) + 1)} <= labelled, path.name


@pytest.mark.parametrize("item", [i for i in LINES if i.cls != "none"], ids=lambda i: f"{i.file}:{i.line}")
def test_every_event_line_is_found_with_its_class_and_kind(item: CorpusLine) -> None:
    result = score([item])
    assert result.perfect, result.misses


@pytest.mark.parametrize("item", [i for i in LINES if i.cls == "none"], ids=lambda i: f"{i.file}:{i.line}")
def test_healthy_lines_raise_nothing(item: CorpusLine) -> None:
    result = score([item])
    assert result.perfect, result.alarms


def test_whole_files_raise_their_class_and_nothing_else() -> None:
    """Scanned as files (bursts folded, tracebacks joined), each file raises its class only."""
    for path in sorted(CORPUS.glob("*.log")):
        scanner = LogScanner()
        scanner.scan_stream(io.BytesIO(path.read_bytes()), path.name)
        counts = scanner.result().counts
        expected = {item.cls for item in LINES if item.file == path.name} - {"none"}
        assert set(counts) == expected, (path.name, counts)


def test_every_event_line_carries_a_gate_anchor() -> None:
    for item in LINES:
        if item.cls != "none":
            assert any(a in item.text.encode("utf-8") for a in GATE_ANCHORS), f"{item.file}:{item.line}"


def _vllm_stats(kv: float, waiting: int) -> str:
    return (f"INFO 07-24 09:55:30 metrics.py:334] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
            f"2136.3 tokens/s, Running: 247 reqs, Swapped: 0 reqs, Pending: {waiting} reqs, GPU KV cache usage: "
            f"{kv:.1f}%, CPU KV cache usage: 0.0%")


def _sglang_decode(usage: float, queued: int) -> str:
    return (f"[2025-12-12 08:43:59 TP0] Decode batch, #running-req: 6, #token: 1920, token usage: {usage:.2f}, "
            f"cuda graph: True, gen throughput (token/s): 446.45, #queue-req: {queued},")


@pytest.mark.parametrize(
    ("line", "fires"),
    [
        (_vllm_stats(SATURATED_KV_PCT, 1), True),
        (_vllm_stats(SATURATED_KV_PCT - 0.1, 40), False),
        (_vllm_stats(100.0, 0), False),
        (_sglang_decode(SATURATED_TOKEN_USAGE, 1), True),
        (_sglang_decode(SATURATED_TOKEN_USAGE - 0.01, 9), False),
        (_sglang_decode(1.0, 0), False),
    ],
)
def test_a_full_kv_cache_is_pressure_only_with_requests_waiting(line: str, fires: bool) -> None:
    """The saturation threshold: full with nobody waiting is a busy engine, waiting below it is queueing."""
    assert (scan_lines([line]).count(KV_PREEMPTION) == 1) is fires
