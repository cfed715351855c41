"""The join of the client's clock with the server's (llmdoctor.analysis.waterfall) and the stream's delivery shape.

Pure functions on hand-built request timings: the numbers are the test's own, so each expected
split is computed here from them. Whatever the server's clocks say (negative, longer than the
request, not a number, missing), the phases are never negative and add up to the client's total.
"""

from __future__ import annotations

import math
import random

import pytest

from llmdoctor.analysis.clocks import judge
from llmdoctor.analysis.delivery import TokenClock, hop_headers, stream_shape, whole_short_answers
from llmdoctor.analysis.waterfall import HELD, IN_FRONT, Clock, join
from llmdoctor.measurements.timing import ClockKind, ClockOrigin, RequestTiming, ServerClock

PER_TOKEN = TokenClock(4.0, "test clock", ClockOrigin.METRICS)


def _stream(ttfb: float, ttft: float, tokens: int, gap: float, *, reads_per_token: bool = True,
            clocks: tuple[ServerClock, ...] = ()) -> RequestTiming:
    times = [ttft + i * gap for i in range(tokens)]
    t = RequestTiming("POST", "/v1/chat/completions", streamed=True, status=200, sent_ms=0.5, ttfb_ms=ttfb,
                      ttft_ms=ttft, token_times_ms=times, total_ms=times[-1] + 1.0, reused_connection=True,
                      completion_tokens=tokens, server_clocks=list(clocks))
    if reads_per_token:
        t.read_times_ms, t.read_bytes = list(times), [120] * tokens
    else:  # everything in one read at the end (a buffering hop)
        t.read_times_ms, t.read_bytes = [times[-1]], [120 * tokens]
    return t


def _assert_sound(phases: list, total: float) -> None:
    assert all(p.ms >= 0 and math.isfinite(p.ms) for p in phases), phases
    assert sum(p.ms for p in phases) == pytest.approx(total, abs=1e-6)


def _phase(phases: list, name: str) -> float:
    return next(p.ms for p in phases if p.name == name)


def test_without_server_clocks_the_phases_stay_merged_and_say_why() -> None:
    t = _stream(20.0, 60.0, 8, 4.0)
    j = join(t, judge(t))
    _assert_sound(j.phases, j.total_ms)
    assert j.in_front_ms is None and j.server_ms is None and not j.anchor
    assert any("no server clock" in n for n in j.notes)
    assert all(p.clock == Clock.CLIENT for p in j.phases)


def test_the_servers_time_to_first_token_splits_off_the_time_in_front() -> None:
    """llama.cpp: prompt_ms is the server's time to its first token; the rest of the wait is in front."""
    t = _stream(5.0, 340.5, 8, 4.0, clocks=(ServerClock(ClockKind.PREFILL, 30.0, "timings.prompt_ms",
                                                        ClockOrigin.BODY),))
    j = join(t, judge(t))
    _assert_sound(j.phases, j.total_ms)
    assert j.anchor == "first token"
    assert j.in_front_ms == pytest.approx(340.5 - 0.5 - 30.0)
    assert _phase(j.phases, "prefill") == pytest.approx(30.0)
    front = next(p for p in j.phases if p.name == IN_FRONT)
    assert front.clock == Clock.INFERRED and front.source == "timings.prompt_ms"
    assert j.server_ms == pytest.approx(30.0 + 7 * 4.0)


@pytest.mark.parametrize(("ms", "why"), [(-5.0, "negative"), (60_000.0, "longer than"), (math.nan, "not a number")])
def test_an_impossible_server_clock_is_set_aside_with_the_reason(ms: float, why: str) -> None:
    t = _stream(300.0, 330.0, 8, 4.0, clocks=(ServerClock(ClockKind.HEADERS, ms, "openai-processing-ms"),))
    j = join(t, judge(t))
    _assert_sound(j.phases, j.total_ms)
    assert j.in_front_ms is None
    assert any(why in n for n in j.notes), j.notes


def test_a_stream_held_whole_shows_a_delivery_phase_not_time_in_front() -> None:
    """nginx with an HTTP/1.0 upstream held the headers with the body: the hold is delivery, not in front."""
    t = _stream(60.0, 60.0, 8, 0.0, reads_per_token=False,
                clocks=(ServerClock(ClockKind.HEADERS, 0.0, "openai-processing-ms"),))
    shape = stream_shape(t, PER_TOKEN)
    assert shape is not None and shape.held and shape.pattern == "one read"
    assert shape.held_ms == pytest.approx(7 * 4.0)
    j = join(t, judge(t), shape)
    _assert_sound(j.phases, j.total_ms)
    assert _phase(j.phases, HELD) == pytest.approx(28.0)
    assert j.in_front_ms == pytest.approx(60.0 - 0.5 - 28.0)
    assert any("headers were held" in n for n in j.notes)


def test_a_stream_at_the_servers_pace_is_not_held() -> None:
    t = _stream(5.0, 40.0, 16, 4.0)
    shape = stream_shape(t, PER_TOKEN)
    assert shape is not None and not shape.held and shape.held_ms == pytest.approx(0.0)
    assert shape.pattern == ""


def test_bursts_at_a_fixed_interval_are_named() -> None:
    t = _stream(5.0, 40.0, 64, 4.0)
    arrivals = [t.token_times_ms[i] for i in range(15, 64, 16)]  # a buffer released every 16 tokens
    t.token_times_ms = [arrivals[i // 16] for i in range(64)]
    t.read_times_ms, t.read_bytes = arrivals, [16 * 120] * 4
    shape = stream_shape(t, PER_TOKEN)
    assert shape is not None and shape.held and shape.pattern.startswith("bursts every ~64 ms")


def test_short_or_unstreamed_answers_say_nothing_about_delivery() -> None:
    assert stream_shape(_stream(5.0, 40.0, 3, 4.0), PER_TOKEN) is None
    t = _stream(5.0, 40.0, 8, 4.0)
    t.streamed = False
    assert stream_shape(t, PER_TOKEN) is None


def test_only_headers_that_name_a_hop_say_there_is_one() -> None:
    """A model server's own Server header is no hop; a proxy's Server, Via or a CDN's ray id is."""
    assert hop_headers({"server": "llmdoctor-sim/0.1 Python/3.11.7"}) == {}
    assert hop_headers({"server": "uvicorn", "content-encoding": "gzip"}) == {}
    assert hop_headers({"server": "nginx/1.22.1"}) == {"server": "nginx/1.22.1"}
    assert hop_headers({"server": "uvicorn", "via": "1.1 varnish"}) == {"via": "1.1 varnish"}
    assert hop_headers({"cf-ray": "8a1b2c3d4e5f-AMS"}) == {"cf-ray": "8a1b2c3d4e5f-AMS"}


def test_the_short_answers_held_whole_are_told_from_those_a_stall_covered() -> None:
    """Of the shorter half of the answers, those in one read at the end were held whole; one at pace was
    not; the long ones are not short, and one too fast to show a hold (under 20 ms by its clock) says nothing."""
    clock = TokenClock(4.0, "test clock", "inferred")
    whole = [stream_shape(_stream(5.0, 60.0, 8, 0.0, reads_per_token=False), clock) for _ in range(3)]
    paced = stream_shape(_stream(5.0, 40.0, 8, 4.0), clock)
    long = stream_shape(_stream(5.0, 40.0, 64, 4.0), clock)
    fast = stream_shape(_stream(5.0, 40.0, 4, 0.0, reads_per_token=False), TokenClock(1.0, "fast", "inferred"))
    shapes = [s for s in (*whole, paced, long, long, fast) if s is not None]
    assert len(shapes) == 7
    short, held_whole = whole_short_answers(shapes)
    assert short == [*whole, paced]
    assert held_whole == whole
    assert all(s.whole_at_end and not s.server_clocked for s in held_whole)


def test_random_clocks_never_break_the_waterfall() -> None:
    """Fuzz: any mix of plausible, negative, huge or missing clocks on any request shape."""
    rng = random.Random(14)
    origins = [ClockOrigin.HEADER, ClockOrigin.BODY, ClockOrigin.METRICS]
    kinds = [ClockKind.HEADERS, ClockKind.TOTAL, ClockKind.QUEUE, ClockKind.PREFILL, ClockKind.DECODE,
             ClockKind.INFERENCE, ClockKind.TTFT, ClockKind.LOAD, ClockKind.VALIDATION]
    for _ in range(500):
        ttfb = rng.uniform(0.5, 400.0)
        ttft = ttfb + rng.uniform(0.0, 300.0)
        tokens = rng.randint(1, 40)
        clocks = tuple(ServerClock(k, rng.choice([rng.uniform(0, 800), -rng.uniform(0, 50), 1e6, math.inf]),
                                   f"clock {k}", rng.choice(origins))
                       for k in rng.sample(kinds, rng.randint(0, 4)))
        t = _stream(ttfb, ttft, tokens, rng.choice([0.0, 4.0, 9.0]), reads_per_token=rng.random() < 0.5,
                    clocks=clocks)
        t.streamed = rng.random() < 0.8
        shape = stream_shape(t, PER_TOKEN if rng.random() < 0.7 else None)
        j = join(t, judge(t), shape)
        _assert_sound(j.phases, j.total_ms)
        for value in (j.in_front_ms, j.server_ms, j.held_ms):
            assert value is None or value >= 0


def test_a_late_first_token_after_early_headers_takes_nothing_from_the_time_in_front() -> None:
    """A busy host: the gateway's 300 ms before the headers, then a first token 900 ms later with the
    tokens bunched. Whatever the hold estimate, the headers were not held: the 300 ms stay in front."""
    t = _stream(300.5, 1266.0, 8, 0.1, reads_per_token=False,
                clocks=(ServerClock(ClockKind.HEADERS, 1.0, "openai-processing-ms"),))
    shape = stream_shape(t, TokenClock(310.0, "the output-length sweep's fit", "inferred"))
    assert shape is not None and shape.held
    j = join(t, judge(t), shape)
    _assert_sound(j.phases, j.total_ms)
    assert j.in_front_ms == pytest.approx(300.5 - 0.5 - 1.0)
    assert j.held_ms <= 1266.0 - 300.5
