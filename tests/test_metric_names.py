"""The versioned table of backend metric names, read on recorded /metrics pages of old and new versions."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from llmdoctor.measurements.metricnames import FIELDS, METRIC_NAMES, candidates, describe
from llmdoctor.measurements.server_metrics import ServerMetrics
from llmdoctor.probes.backends import BACKENDS
from llmdoctor.probes.metrics import normalize

ROOT = Path(__file__).resolve().parent.parent
PAGES = {
    "vllm-old": ROOT / "fixtures/metrics/vllm-old-names-datadog.prom",
    "vllm-both": ROOT / "fixtures/metrics/vllm-v1-datadog.prom",
    "vllm-0.32": ROOT / "fixtures/vllm/metrics_idle.prom",
    "llamacpp-old": ROOT / "fixtures/metrics/llamacpp-ik-pr695.prom",
    "llamacpp-new": ROOT / "fixtures/metrics/llamacpp-upstream-readme.prom",
    "sglang": ROOT / "fixtures/metrics/sglang-0.5.10.prom",
    "tgi": ROOT / "fixtures/metrics/tgi-datadog.prom",
}


def _read(page: str) -> ServerMetrics:
    return normalize(PAGES[page].read_text(encoding="utf-8"))


def test_every_backend_reads_its_names_from_the_table_newest_first() -> None:
    for name, backend in BACKENDS.items():
        for key in FIELDS:
            assert getattr(backend, key) == candidates(name, key)
        for key in FIELDS:
            rows = [m for m in METRIC_NAMES[name] if m.field == key]
            removed = [m.removed is not None for m in rows]
            assert removed == sorted(removed), (name, key)  # names still exported come first
    for rows in METRIC_NAMES.values():
        assert all(m.field in FIELDS and m.source and m.name for m in rows)
        assert len({(m.field, m.name) for m in rows}) == len(rows)


def test_vllm_before_the_renames_reads_the_old_names() -> None:
    m = _read("vllm-old")
    assert m.series["kv_cache_usage"] == "vllm:gpu_cache_usage_perc" and m.kv_cache_usage == 0.0
    assert m.series["inter_token"] == "vllm:time_per_output_token_seconds"
    assert m.inter_token is not None and m.inter_token.count == 6.0
    assert m.prefix_cache_hits is None
    why = m.why_absent("prefix_cache_hits")
    assert why is not None and why.startswith("absent in this version")
    assert "vllm:prefix_cache_hits_total (since 0.10)" in why and "removed in 0.11" in why


def test_vllm_032_reads_the_new_names_and_the_old_ones_are_gone() -> None:
    text = PAGES["vllm-0.32"].read_text(encoding="utf-8")
    assert "vllm:gpu_cache_usage_perc" not in text and "vllm:time_per_output_token_seconds" not in text
    m = normalize(text)
    assert m.series["kv_cache_usage"] == "vllm:kv_cache_usage_perc"
    assert m.series["inter_token"] == "vllm:inter_token_latency_seconds"
    assert m.why_absent("kv_cache_usage") is None and m.why_absent("inter_token") is None


def test_the_new_name_wins_when_a_server_exports_both() -> None:
    text = PAGES["vllm-both"].read_text(encoding="utf-8")
    assert "vllm:gpu_cache_usage_perc{" in text and "vllm:kv_cache_usage_perc{" in text
    assert _read("vllm-both").series["kv_cache_usage"] == "vllm:kv_cache_usage_perc"


def test_llamacpp_kv_gauge_is_absent_in_this_version_not_zero() -> None:
    old, new = _read("llamacpp-old"), _read("llamacpp-new")
    assert old.kv_cache_usage is not None and old.series["kv_cache_usage"] == "llamacpp:kv_cache_usage_ratio"
    assert new.kv_cache_usage is None
    assert new.why_absent("kv_cache_usage") == (
        "absent in this version: llamacpp:kv_cache_usage_ratio (removed in PR #13660 (2025-05))")


def test_a_field_a_backend_never_exported_says_so() -> None:
    assert _read("tgi").why_absent("kv_cache_usage") == "not exported by tgi"
    assert describe("sglang", "queue_time").count("sglang:") == 2  # the queue histogram's two names


@pytest.mark.parametrize("page", sorted(PAGES))
def test_an_absent_field_is_none_never_zero(page: str) -> None:
    m = _read(page)
    assert m.absent and not set(m.absent) & set(m.series)
    for attr in m.absent:
        assert getattr(m, attr) is None, (page, attr)
    for attr, series in m.series.items():
        assert getattr(m, attr) is not None, (page, attr, series)


def test_absent_and_series_survive_serialisation() -> None:
    from llmdoctor.serde import from_data, to_data

    m = _read("llamacpp-new")
    assert from_data(ServerMetrics, to_data(m)) == m
    assert {f.name for f in dataclasses.fields(ServerMetrics)} >= {"absent", "series"}


def test_the_docs_table_names_every_metric() -> None:
    doc = (ROOT / "docs" / "logs-and-metrics.md").read_text(encoding="utf-8")
    for rows in METRIC_NAMES.values():
        for m in rows:
            assert f"`{m.name}`" in doc, m.name


def _skip_reason(check_id: str, page: str) -> str:
    """LD204 or LD205's outcome on a scrape of `page` (both scrapes the same page, reasons kept)."""
    from llmdoctor.checklist.registry import find_check
    from llmdoctor.context import Context
    from llmdoctor.measurements.server_metrics import ServerMetricsResult
    from llmdoctor.options import Options
    from llmdoctor.probes.catalog import SERVER_METRICS
    from llmdoctor.runner import run_checks
    from llmdoctor.serde import to_data
    from llmdoctor.target import Target

    m = _read(page)
    recorded = {SERVER_METRICS.name: to_data(ServerMetricsResult(m.backend, "/metrics", m, m))}
    ctx = Context(target=Target(base_url="http://127.0.0.1:9/v1"), options=Options.of(), recorded=recorded,
                  replay_local=True)
    check = find_check(check_id)
    assert check is not None
    outcome = run_checks([check], ctx)[0]
    assert outcome.status == "skipped", outcome
    return outcome.reason


def test_ld204_and_ld205_say_why_a_metric_is_absent() -> None:
    """Issue 26: "absent in this version" (a name some version had, with its versions) is told apart from
    "not exported" (no version had one), on the real pages' scrapes, not only in recordings."""
    assert _skip_reason("LD204", "llamacpp-new") == (
        "no KV-cache usage gauge on llamacpp: absent in this version: llamacpp:kv_cache_usage_ratio "
        "(removed in PR #13660 (2025-05))")
    assert _skip_reason("LD204", "tgi") == "no KV-cache usage gauge on tgi: not exported by tgi"
    assert _skip_reason("LD205", "tgi") == (
        "no preemption or retraction metric on tgi: preemptions not exported by tgi; retractions not exported by tgi")


def test_a_recording_without_reasons_gets_them_from_the_table() -> None:
    from llmdoctor.measurements.server_metrics import ServerMetricsResult

    m = _read("llamacpp-new")
    bare = dataclasses.replace(m, absent={})
    result = ServerMetricsResult(m.backend, "/metrics", bare)
    assert result.why_absent("kv_cache_usage") == m.why_absent("kv_cache_usage")
    assert result.why_absent("engine_sleeping") == "not exported by llamacpp"  # no row maps it
