"""The simulator's latency engine: the one place that decides how long a request takes.

It holds the state an inference engine would: the concurrency slots (queueing), the cold start
(first load, idle unload, a load in progress), the jitter, the KV cache in use and the counters
and histograms its `/metrics` endpoint exports (`llmdoctor.sim.metrics` renders them). The HTTP
layer and the routes only ask it: "how long until the first token?", "may I run now?", "one more
token went out".
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from llmdoctor.sim.profiles import LatencyProfile

__all__ = ["Engine", "EngineState", "Histogram", "Stopped", "REQUEST_LATENCY_BUCKETS", "TTFT_BUCKETS"]


class Stopped(Exception):
    """The server is stopping: abandon the request."""


# Bucket bounds follow the ones vLLM's V1 Prometheus logger uses for these histograms
# (vllm-project/vllm, vllm/v1/metrics/loggers.py: PrometheusStatLogger).
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
INTER_TOKEN_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip


@dataclass
class Histogram:
    """A cumulative Prometheus histogram (not thread-safe; guarded by the engine's lock)."""

    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        """Count one observation in every bucket whose bound it does not exceed."""
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
        self.total += value
        self.count += 1

    def copy(self) -> Histogram:
        """An independent copy (for a snapshot taken under the engine's lock)."""
        return Histogram(self.buckets, list(self.counts), self.total, self.count)


@dataclass(frozen=True)
class EngineState:
    """A consistent snapshot of the engine's live state, as `/metrics` exports it."""

    running: int
    waiting: int
    kv_usage: float  # fraction of the KV capacity in use, 0..1
    prompt_tokens_total: int
    generation_tokens_total: int
    ttft: Histogram
    queue_time: Histogram
    #: Per finished request: scheduled -> first token, first -> last token, arrival -> end,
    #: scheduled -> end; and every gap between two output tokens (vLLM's V1 histograms).
    prefill_time: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    decode_time: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    inference_time: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    inter_token: Histogram = field(default_factory=lambda: Histogram(INTER_TOKEN_BUCKETS))
    finished: int = 0


class Engine:
    """Shared state of the simulated inference engine: slots, cold start, jitter, metrics.

    Every delay of a generation request is decided here; the HTTP layer only asks.
    """

    def __init__(self, profile: LatencyProfile, stopping: threading.Event) -> None:
        self.profile = profile
        self.stopping = stopping
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._rng = random.Random(profile.seed)
        self._slots = threading.Semaphore(profile.max_concurrency) if profile.max_concurrency else None
        self._loaded = False  # has the cold start been paid?
        self._warm_at = 0.0  # monotonic time when an in-progress load finishes
        self._last_done = self.started
        self._generations = 0
        # Live state, as exported by /metrics.
        self.running = 0
        self.waiting = 0
        self._kv_tokens = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self._prefixes: set[str] = set()
        self.ttft = Histogram(TTFT_BUCKETS)
        self.queue_time = Histogram(REQUEST_LATENCY_BUCKETS)
        self.prefill_time = Histogram(REQUEST_LATENCY_BUCKETS)
        self.decode_time = Histogram(REQUEST_LATENCY_BUCKETS)
        self.e2e = Histogram(REQUEST_LATENCY_BUCKETS)
        self.inference_time = Histogram(REQUEST_LATENCY_BUCKETS)
        self.inter_token = Histogram(INTER_TOKEN_BUCKETS)
        self.finished = 0

    # -- time --------------------------------------------------------------------------------
    def sleep_until(self, deadline: float) -> None:
        """Really sleep until the monotonic `deadline`; raise `Stopped` if the server stops."""
        remaining = deadline - time.monotonic()
        if remaining > 0 and self.stopping.wait(remaining):
            raise Stopped
        if self.stopping.is_set():
            raise Stopped

    def is_loading(self) -> bool:
        """Is the server still in its start-up load (`profile.loading_for_s`)?"""
        return time.monotonic() - self.started < self.profile.loading_for_s

    @property
    def loaded(self) -> bool:
        """Has the model been loaded (the cold start paid) at least once?"""
        return self._loaded

    def refuses(self) -> bool:
        """Count one generation request; whether the profile's refusal cycle refuses it."""
        p = self.profile
        with self._lock:
            self._generations += 1
            n = self._generations
        return p.refuse_every is not None and (n - 1) % p.refuse_every >= p.refuse_every - p.refuse_burst

    # -- the latency model -------------------------------------------------------------------
    def _cold_start_s(self, now: float) -> float:
        """Cold-start delay due now (lock held): first load, idle unload, or a load in progress."""
        p = self.profile
        if now < self._warm_at:  # another request is loading the model: wait for it
            return self._warm_at - now
        # Unloaded after idling: nothing else is running (this request is already counted).
        idle_unloaded = p.idle_unload_s is not None and self.running <= 1 and now - self._last_done > p.idle_unload_s
        if not self._loaded or idle_unloaded:
            self._loaded = True
            self._warm_at = now + p.cold_start_ms / 1000.0
            return p.cold_start_ms / 1000.0
        return 0.0

    def cached(self, prompt_key: str) -> bool:
        """Whether this prompt was seen before (with `LatencyProfile.prefix_cache`); remembers it."""
        if not self.profile.prefix_cache:
            return False
        with self._lock:
            seen = prompt_key in self._prefixes
            self._prefixes.add(prompt_key)
        return seen

    def first_token_offset_s(self, prompt_tokens: int, now: float) -> float:
        """Seconds from admission to the start of decode: cold start + fixed (+jitter) + prefill."""
        p = self.profile
        with self._lock:
            cold = self._cold_start_s(now)
            jitter = self._rng.uniform(-p.jitter_ms, p.jitter_ms) if p.jitter_ms else 0.0
        fixed = max(p.fixed_ms + jitter, 0.0)
        return cold + (fixed + prompt_tokens * p.per_prompt_token_ms) / 1000.0

    def decode_s(self) -> float:
        """Seconds of decode per output token."""
        return self.profile.per_output_token_ms / 1000.0

    # -- admission ---------------------------------------------------------------------------
    @contextmanager
    def admitted(self, prompt_tokens: int) -> Iterator[None]:
        """Wait for a concurrency slot (queueing), then count the request as running."""
        queued_at = time.monotonic()
        if self._slots is not None:
            with self._lock:
                self.waiting += 1
            try:
                while not self._slots.acquire(timeout=0.05):
                    if self.stopping.is_set():
                        raise Stopped
            finally:
                with self._lock:
                    self.waiting -= 1
        try:
            with self._lock:
                self.queue_time.observe(time.monotonic() - queued_at)
                self.running += 1
                self._kv_tokens += prompt_tokens
                self.prompt_tokens_total += prompt_tokens
            yield
        finally:
            with self._lock:
                self.running -= 1
                self._kv_tokens -= prompt_tokens
                self._last_done = time.monotonic()
            if self._slots is not None:
                self._slots.release()

    def token_emitted(self, index: int, arrived_at: float) -> None:
        """Account one generated token (index 0 is the first: observe TTFT)."""
        with self._lock:
            self.generation_tokens_total += 1
            self._kv_tokens += 1
            if index == 0:
                self.ttft.observe(time.monotonic() - arrived_at)

    def request_finished(self, arrived_at: float, scheduled_at: float, token_times: list[float]) -> None:
        """Observe a finished generation's phases (monotonic times; `token_times`: each token's emission)."""
        end = time.monotonic()
        with self._lock:
            self.finished += 1
            self.e2e.observe(end - arrived_at)
            self.inference_time.observe(end - scheduled_at)
            if token_times:
                self.prefill_time.observe(token_times[0] - scheduled_at)
                self.decode_time.observe(token_times[-1] - token_times[0])
                for a, b in zip(token_times, token_times[1:]):
                    self.inter_token.observe(b - a)

    def release_kv(self, n: int) -> None:
        """Free the KV cache of `n` generated tokens when their request ends."""
        with self._lock:
            self._kv_tokens -= n

    # -- metrics -----------------------------------------------------------------------------
    def state(self) -> EngineState:
        """A consistent snapshot of the live state (taken under the lock)."""
        p = self.profile
        # KV capacity: one full context per possible concurrent request (4 when unlimited).
        capacity = p.context_window * (p.max_concurrency or 4)
        with self._lock:
            return EngineState(
                running=self.running,
                waiting=self.waiting,
                kv_usage=min(max(self._kv_tokens, 0) / capacity, 1.0),
                prompt_tokens_total=self.prompt_tokens_total,
                generation_tokens_total=self.generation_tokens_total,
                ttft=self.ttft.copy(),
                queue_time=self.queue_time.copy(),
                prefill_time=self.prefill_time.copy(),
                decode_time=self.decode_time.copy(),
                e2e=self.e2e.copy(),
                inference_time=self.inference_time.copy(),
                inter_token=self.inter_token.copy(),
                finished=self.finished,
            )
