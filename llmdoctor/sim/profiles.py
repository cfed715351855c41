"""Latency profiles: the knobs of the simulator's latency model and its fault injection.

A profile says how long a generation request takes and how the server misbehaves.
The timing of one generation request is::

    wait for a concurrency slot (only if max_concurrency is set)
    -> cold start (first request, or first after an idle unload)
       + fixed_ms (+/- jitter) + prompt_tokens * per_prompt_token_ms
    -> for each output token: per_output_token_ms, then the token is sent

so a request costs about `fixed + prefill + n * decode` milliseconds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["FLAVORS", "LatencyProfile", "PROFILES", "get_profile"]

#: Servers the simulator can impersonate (`LatencyProfile.flavor`).
FLAVORS = ("vllm", "tgi", "ollama", "llamacpp", "openai")


@dataclass(frozen=True)
class LatencyProfile:
    """Latency model and fault switches of one simulated endpoint (times in ms unless noted)."""

    name: str = "custom"
    description: str = ""
    #: Per-request floor paid before the first token (queueing, scheduling, tokenization).
    fixed_ms: float = 25.0
    #: Prefill cost per prompt token.
    per_prompt_token_ms: float = 0.05
    #: Decode cost per output token, the first one included.
    per_output_token_ms: float = 4.0
    #: Uniform +/- jitter on the fixed cost, drawn from a `random.Random(seed)`.
    jitter_ms: float = 0.0
    #: Seed of the jitter's random generator (same seed, same sequence of delays).
    seed: int = 0
    #: Extra delay of the first generation request after start (and after an idle unload).
    cold_start_ms: float = 0.0
    #: Seconds without generation after which the model is unloaded (scale to zero); None: never.
    idle_unload_s: float | None = None
    #: Generation requests beyond this many wait for a slot (real queueing); None: unlimited.
    max_concurrency: int | None = None
    #: Answer every response with `Connection: close` and close the connection.
    close_connections: bool = False
    #: Tokens the model "wants" to answer when not forced by ignore_eos (capped by max_tokens).
    natural_output_tokens: int = 8
    #: Context window in tokens (prompt + max_tokens must fit).
    context_window: int = 4096
    #: Whether `/v1/models` and `/tokenize` state the window (``max_model_len``); llama-cpp-python states none.
    publish_window: bool = True
    #: Serve a prompt seen before from a prefix cache: it pays the prefill of its last token only.
    prefix_cache: bool = False
    #: Seconds after start during which generation requests get 503 "Loading model".
    loading_for_s: float = 0.0
    #: If set, every generation request answers this HTTP status with an OpenAI-shaped error.
    fail_status: int | None = None
    #: If set, the connection is closed after this many tokens, without `[DONE]`.
    stream_cut_after: int | None = None
    #: If set, `/v1/*` requests need `Authorization: Bearer <key>`, else 401.
    require_api_key: str | None = None
    #: The served model name.
    model: str = "sim-model"
    #: Reasoning tokens (`delta.reasoning_content`) emitted before the answer, chat only.
    reasoning_tokens: int = 0
    #: Which server the simulator impersonates beyond the OpenAI routes (`FLAVORS`): its /metrics
    #: names and native APIs (TGI /generate, Ollama /api/*, llama.cpp /props, /slots, timings),
    #: and the clocks it reports ("openai": a hosted-API-like server with ``openai-processing-ms``
    #: and no /metrics).
    flavor: str = "vllm"
    #: False: ``ignore_eos`` is accepted and ignored (llama-cpp-python); ``min_tokens`` always works.
    honours_ignore_eos: bool = True
    #: False: streams carry no ``usage`` whatever ``stream_options.include_usage`` asks (llama-cpp-python
    #: 0.3: its streamed chunks have no usage field), so a client must count prompt tokens otherwise.
    stream_usage: bool = True
    #: Refuse generation requests in a cycle of this many (counted from the first): the last
    #: `refuse_burst` of each cycle get `refuse_status` (``refuse_every=2``: every 2nd; ``5`` with a
    #: burst of 2: two in a row after three accepted). None: never.
    refuse_every: int | None = None
    refuse_burst: int = 1
    refuse_status: int = 429
    #: The ``Retry-After`` (seconds) sent with a refusal; None: no header.
    retry_after_s: float | None = None
    #: vLLM's ``--enable-per-request-metrics`` (0.32): each answer, and a stream's final usage chunk,
    #: carries a ``metrics`` object with the request's own queue, prefill and decode times. vLLM only.
    per_request_metrics: bool = False

    def __post_init__(self) -> None:
        for name in (
            "fixed_ms",
            "per_prompt_token_ms",
            "per_output_token_ms",
            "jitter_ms",
            "cold_start_ms",
            "loading_for_s",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1 or None, got {self.max_concurrency!r}")
        if self.idle_unload_s is not None and self.idle_unload_s < 0:
            raise ValueError(f"idle_unload_s must be >= 0 or None, got {self.idle_unload_s!r}")
        if self.natural_output_tokens < 1:
            raise ValueError("natural_output_tokens must be >= 1")
        if self.context_window < 1:
            raise ValueError("context_window must be >= 1")
        if self.stream_cut_after is not None and self.stream_cut_after < 0:
            raise ValueError("stream_cut_after must be >= 0 or None")
        if self.reasoning_tokens < 0:
            raise ValueError("reasoning_tokens must be >= 0")
        if self.flavor not in FLAVORS:
            raise ValueError(f"flavor must be one of {', '.join(FLAVORS)}, got {self.flavor!r}")
        if self.refuse_every is not None and not 1 <= self.refuse_burst < self.refuse_every:
            raise ValueError(f"refuse_burst must be >= 1 and below refuse_every, got {self.refuse_burst!r}")
        if not 400 <= self.refuse_status <= 599:
            raise ValueError(f"refuse_status must be an HTTP error status, got {self.refuse_status!r}")
        if self.per_request_metrics and self.flavor != "vllm":
            raise ValueError(f"per_request_metrics is vLLM's flag; flavor is {self.flavor!r}")
        if self.fail_status is not None and not 400 <= self.fail_status <= 599:
            raise ValueError(f"fail_status must be an HTTP error status (400-599), got {self.fail_status!r}")

    def expected_total_ms(self, prompt_tokens: int, output_tokens: int) -> float:
        """Latency the model predicts for a warm, unqueued request (without jitter)."""
        return self.fixed_ms + prompt_tokens * self.per_prompt_token_ms + output_tokens * self.per_output_token_ms


def _profile(name: str, description: str, **knobs: Any) -> LatencyProfile:
    return LatencyProfile(name=name, description=description, **knobs)


_HEALTHY: dict[str, Any] = {"fixed_ms": 25.0, "per_prompt_token_ms": 0.05, "per_output_token_ms": 4.0}

#: The named profiles, by name.
PROFILES: dict[str, LatencyProfile] = {
    p.name: p
    for p in (
        _profile("healthy", "A well-behaved endpoint: small floor, fast prefill and decode.", **_HEALTHY),
        _profile(
            "slow-floor",
            "Flat latency dominated by a 500 ms per-request floor.",
            fixed_ms=500.0,
            per_prompt_token_ms=0.05,
            per_output_token_ms=6.0,
        ),
        _profile(
            "cold-start",
            "Healthy, but the first request pays a 1.5 s model load.",
            **_HEALTHY,
            cold_start_ms=1500.0,
        ),
        _profile(
            "long-prefill",
            "Prefill costs 1.5 ms per prompt token: big prompts are slow to start.",
            fixed_ms=25.0,
            per_prompt_token_ms=1.5,
            per_output_token_ms=4.0,
        ),
        _profile(
            "slow-decode",
            "Decode costs 45 ms per token: long answers are slow.",
            fixed_ms=25.0,
            per_prompt_token_ms=0.05,
            per_output_token_ms=45.0,
        ),
        _profile(
            "queueing",
            "One request at a time with a 150 ms floor: concurrent requests queue.",
            fixed_ms=150.0,
            per_prompt_token_ms=0.05,
            per_output_token_ms=4.0,
            max_concurrency=1,
        ),
        _profile(
            "close-connections",
            "Healthy, but every response closes the connection (no keep-alive).",
            **_HEALTHY,
            close_connections=True,
        ),
        _profile(
            "stream-cut",
            "Healthy, but streams are cut after 3 tokens without [DONE].",
            **_HEALTHY,
            stream_cut_after=3,
        ),
        _profile(
            "loading",
            "Answers 503 'Loading model' for the first 30 s after start.",
            **_HEALTHY,
            loading_for_s=30.0,
        ),
        _profile(
            "unauthorized",
            "Requires the API key 'sim-secret' (401 without it).",
            **_HEALTHY,
            require_api_key="sim-secret",
        ),
        _profile("server-error", "Every generation request fails with HTTP 500.", **_HEALTHY, fail_status=500),
        _profile(
            "demo",
            "The demo: a visibly flat 350 ms floor, a 1.2 s cold start, 5 ms per token.",
            fixed_ms=350.0,
            per_prompt_token_ms=0.05,
            per_output_token_ms=5.0,
            cold_start_ms=1200.0,
        ),
    )
}


def get_profile(name: str, **overrides: Any) -> LatencyProfile:
    """Return the named profile, with `overrides` applied as by `dataclasses.replace`.

    Raises `KeyError` (listing the valid names) for an unknown name, and `TypeError`
    for an override that is not a field of `LatencyProfile`.
    """
    try:
        profile = PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown profile {name!r}; valid profiles: {', '.join(sorted(PROFILES))}") from None
    if not overrides:
        return profile
    fields = {f.name for f in dataclasses.fields(LatencyProfile)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise TypeError(f"unknown profile field(s): {', '.join(unknown)}")
    return dataclasses.replace(profile, **overrides)
