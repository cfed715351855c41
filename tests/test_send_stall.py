"""`llmdoctor.analysis.send_stall`: a request whose answer waited for this client measures the client.

The timings are those of real requests (vLLM 0.32, ``--max-num-seqs 1`` behind two background streams,
a saturated two-core host: fixtures/LD203/fires_vllm_032_queue_client_stalled_sending.json) and, as
controls, of requests whose send was quick, or slow with the server still working after it.
"""

from __future__ import annotations

from llmdoctor.analysis.clocks import judge
from llmdoctor.analysis.send_stall import client_bound, server_bound
from llmdoctor.analysis.waterfall import client_waterfall
from llmdoctor.measurements.timing import ClockKind, ClockOrigin, RequestTiming, ServerClock


def _timing(sent: float, ttfb: float, ttft: float | None, *, connect: float | None = None) -> RequestTiming:
    return RequestTiming("POST", "/v1/chat/completions", streamed=ttft is not None, status=200, connect_ms=connect,
                         sent_ms=sent, ttfb_ms=ttfb, ttft_ms=ttft, total_ms=(ttft or ttfb) + 1.0,
                         reused_connection=connect is None)


# The five baseline requests of the CI run: sent, headers, first token (ms from the request's start).
RECORDED = [_timing(7142.293, 7142.562, 7143.687, connect=0.385),
            _timing(6807.611, 6807.839, 6808.913, connect=1859.895),
            _timing(1.095, 5.342, 1706.486), _timing(48.403, 48.668, 49.277), _timing(45.052, 45.28, 45.864)]


def test_a_late_send_with_the_answer_waiting_is_client_bound() -> None:
    assert [client_bound(t) for t in RECORDED] == [True, True, False, True, True]


def test_control_a_quick_send_is_not_client_bound_however_fast_the_answer() -> None:
    """Must not fire: the request left at once (a fast server answering in 4 ms is the server)."""
    assert not client_bound(_timing(0.4, 3.9, 4.3))
    assert not client_bound(_timing(0.2, 301.5, 342.9))


def test_control_a_slow_send_with_the_server_still_working_is_not_client_bound() -> None:
    """Must not fire: a large body that took 80 ms to send, then 2 s of prefill: the server's time is real."""
    assert not client_bound(_timing(80.0, 85.0, 2080.0))


def test_connection_set_up_is_no_send_stall() -> None:
    """A new connection's connect time is the path's, not a stalled send: only the send after it counts."""
    assert not client_bound(_timing(1860.0 + 3.0, 1864.0, 1865.0, connect=1860.0))
    assert client_bound(_timing(1860.0 + 40.0, 1900.5, 1901.0, connect=1860.0))


def test_server_bound_keeps_the_fast_bounds_and_sets_the_long_ones_aside() -> None:
    """The two 7 s requests are set aside; the 49 and 46 ms ones, upper bounds below the fastest timed one, stay."""
    kept, set_aside = server_bound(RECORDED)
    assert set_aside == 2
    assert [t.ttft_ms for t in kept] == [1706.486, 49.277, 45.864]


def test_server_bound_keeps_everything_when_every_request_is_client_bound() -> None:
    stalled = [RECORDED[0], RECORDED[1], RECORDED[3]]
    assert server_bound(stalled) == (stalled, 0)


def test_server_bound_keeps_everything_without_a_stall() -> None:
    quick = [_timing(0.3, 4.0, 60.0), _timing(0.2, 4.1, 2200.0)]
    assert server_bound(quick) == (quick, 0)


def test_a_server_clock_on_a_client_bound_request_is_judged_from_the_first_byte() -> None:
    """vLLM's queue clock of 900 ms on a request whose send came back at 954 ms, the first token 0.4 ms later:
    the server may have worked from our first byte on, so the clock fits (it was set aside as "longer than
    the 0.4 ms the server had"); on a request that truly left at once, the same clock is still impossible."""
    stalled = _timing(953.65, 953.84, 954.03)
    stalled.server_clocks.append(ServerClock(ClockKind.QUEUE, 900.0, "metrics.queue_time_ms", ClockOrigin.BODY))
    assert judge(stalled).own(ClockKind.QUEUE) is not None
    quick = _timing(0.3, 4.0, 50.0)
    quick.server_clocks.append(ServerClock(ClockKind.QUEUE, 900.0, "metrics.queue_time_ms", ClockOrigin.BODY))
    assert judge(quick).own(ClockKind.QUEUE) is None


def test_the_waterfall_says_a_stalled_send_is_this_clients() -> None:
    phases = {p.name: p for p in client_waterfall(RECORDED[3])}
    assert phases["send request"].ms > 40 and "this client stalled" in phases["send request"].note
    quick = {p.name: p for p in client_waterfall(RECORDED[2])}
    assert quick["send request"].note == ""
