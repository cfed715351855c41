"""The serving backend's own metrics, normalised: `ServerMetrics` (an absent series is None, never 0),
the delta between two scrapes and the ``server_metrics`` probe's result.

Scraped and parsed by `llmdoctor.probes.metrics`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmdoctor.measurements.metricnames import FIELDS, describe

__all__ = ["Histogram", "KvCacheInfo", "LoadedModel", "MetricsDelta", "ServerMetrics", "ServerMetricsResult",
           "parse_time"]


Samples = dict[str, list[tuple[dict[str, str], float]]]


@dataclass
class Histogram:
    """Cumulative ``_sum`` (seconds) and ``_count`` of a latency histogram."""

    sum: float
    count: float

    @property
    def mean_ms(self) -> float | None:
        """Mean observation in milliseconds, None when empty."""
        return self.sum / self.count * 1000 if self.count > 0 else None


@dataclass
class KvCacheInfo:
    """The KV cache as the server describes it (vLLM's ``vllm:cache_config_info`` labels); None = not given."""

    block_size: int | None = None
    num_blocks: int | None = None
    num_blocks_override: int | None = None
    size_tokens: int | None = None
    memory_bytes: int | None = None
    max_concurrency: float | None = None
    prefix_caching: bool | None = None

    @property
    def capacity_tokens(self) -> int | None:
        """Tokens the cache holds: the exported size, else blocks x block size."""
        if self.size_tokens is not None:
            return self.size_tokens
        if self.num_blocks is not None and self.block_size is not None:
            return self.num_blocks * self.block_size
        return None


@dataclass
class LoadedModel:
    """A model resident in the server (Ollama ``/api/ps``)."""

    name: str
    size_bytes: int = 0
    size_vram_bytes: int = 0
    expires_at: str = ""
    context_length: int | None = None

    @property
    def expires_unix(self) -> float | None:
        """`expires_at` as a Unix time (None when absent or unparseable)."""
        return parse_time(self.expires_at)

    @property
    def cpu_fraction(self) -> float:
        """Share of the model's memory not in VRAM (0 = fully on the GPU)."""
        if self.size_bytes <= 0:
            return 0.0
        return max(0.0, 1.0 - self.size_vram_bytes / self.size_bytes)


@dataclass
class ServerMetrics:
    """One scrape, normalised across backends; None means "not exported"."""

    backend: str = "unknown"
    url: str = ""
    scraped_at: float = 0.0
    requests_running: float | None = None
    requests_waiting: float | None = None
    kv_cache_usage: float | None = None
    preemptions_total: float | None = None
    retracted: float | None = None
    engine_sleeping: bool | None = None
    ttft: Histogram | None = None
    queue_time: Histogram | None = None
    prefill_time: Histogram | None = None
    decode_time: Histogram | None = None
    e2e: Histogram | None = None
    inference_time: Histogram | None = None
    prefix_cache_hits: float | None = None
    prefix_cache_queries: float | None = None
    process_start_time: float | None = None
    startup_s: float | None = None
    slots_total: int | None = None
    slots_busy: int | None = None
    inter_token: Histogram | None = None
    request_preemptions: Histogram | None = None
    waiting_by_reason: dict[str, float] | None = None
    finished: dict[str, float] | None = None
    rejected_4xx: float | None = None
    kv_cache: KvCacheInfo | None = None
    models: list[LoadedModel] | None = None
    model_names: list[str] = field(default_factory=list)
    samples: dict[str, float] = field(default_factory=dict)
    #: Attribute (``kv_cache_usage``, ``inter_token``, ...) -> the series name it was read from.
    series: dict[str, str] = field(default_factory=dict)
    #: Attribute -> why it is None: "absent in this version: <names with their versions>" when the backend
    #: exported it under some name in some version (llmdoctor/measurements/metricnames.py), else "not exported by X".
    absent: dict[str, str] = field(default_factory=dict)

    def why_absent(self, attr: str) -> str | None:
        """Why `attr` has no value (None when it has one, or for an attribute no table row maps)."""
        return self.absent.get(attr)

    @property
    def uptime_s(self) -> float | None:
        """Seconds since the serving process started, when it exports its start time."""
        if self.process_start_time is None or not self.scraped_at:
            return None
        return max(0.0, self.scraped_at - self.process_start_time)


@dataclass
class MetricsDelta:
    """What changed between the two scrapes (the interval that holds our requests)."""

    seconds: float
    requests: float | None = None
    our_requests: int = 0
    ttft_ms: float | None = None
    queue_ms: float | None = None
    prefill_ms: float | None = None
    decode_ms: float | None = None
    e2e_ms: float | None = None
    inference_ms: float | None = None
    inter_token_ms: float | None = None
    #: Observations each histogram gained (name as in `ServerMetrics`: "queue_time", "inter_token", ...):
    #: compared with what we sent, they tell whether a mean is over our requests alone.
    counts: dict[str, float] = field(default_factory=dict)
    preemptions: float | None = None
    preempted_per_request: float | None = None
    finished: dict[str, float] | None = None
    rejected_4xx: float | None = None
    counter_reset: bool = False

    def observed(self, histogram: str) -> float | None:
        """Observations `histogram` gained over the window (recordings older than `counts`: the requests seen)."""
        return self.counts.get(histogram, self.requests) if self.counts else self.requests


@dataclass
class ServerMetricsResult:
    """Both scrapes, their delta, and notes on what could not be read."""

    backend: str
    url: str
    before: ServerMetrics
    after: ServerMetrics | None = None
    delta: MetricsDelta | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def latest(self) -> ServerMetrics:
        """The most recent scrape."""
        return self.after or self.before

    def why_absent(self, attr: str) -> str:
        """Why `attr` (a `ServerMetrics` attribute) reads nothing on this server, in words.

        The latest scrape's reason ("absent in this version: <names with their versions>" or "not
        exported by <backend>"); for a recording made before scrapes kept their reasons, the same
        words from the metric-name table.
        """
        reason = self.latest.why_absent(attr) or self.before.why_absent(attr)
        if reason:
            return reason
        key = next((k for k, a in FIELDS.items() if a == attr), None)
        return describe(self.backend, key) if key is not None else f"not exported by {self.backend}"

    def worst_sleeping(self) -> bool:
        """True when either scrape saw the engine asleep."""
        return any(s is not None and s.engine_sleeping for s in (self.before, self.after))

    def worst(self, attr: str) -> float | None:
        """The larger of a gauge over both scrapes (None when neither has it)."""
        values = [getattr(s, attr) for s in (self.before, self.after) if s is not None]
        present = [v for v in values if v is not None]
        return max(present) if present else None


def parse_time(text: str) -> float | None:
    """Parse an RFC 3339 time as Go writes it (up to 9 fraction digits) into Unix seconds."""
    import datetime as dt
    import re

    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?", text.strip())
    if not match:
        return None
    base, frac, zone = match.groups()
    stamp = base + (f".{frac[:6].ljust(6, '0')}" if frac else "") + ("+00:00" if zone in (None, "Z") else zone)
    try:
        return dt.datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None
