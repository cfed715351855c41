"""Where the time of a request goes, by the clocks that saw it: the client's joined with the server's.

The client sees a request from the outside: set-up, sending, the headers, the first token, the
last, the end. The server reports its own share (`llmdoctor.analysis.clocks`). Joined, they split the
client's wait into what happened *in front of the model server* (gateways, load balancers, auth,
distance), what the server did (queue, model load, prefill, first token) and what was *held on
the way* (a buffering hop, `llmdoctor.analysis.delivery`):

- with the server's time to first token (llama.cpp ``prompt_ms``, vLLM's TTFT histogram, Ollama's
  load + prompt eval): in front = client wait for the first token − server's time − held;
- with the server's time to its headers (``openai-processing-ms``): in front = client wait for
  the headers − the server's;
- with only the server's whole time (TGI ``x-total-time``, an e2e histogram): in front = client
  time − server time, both ends of the request together.

Every phase names its clock (``client``, ``server_header``, ``server_body``, ``server_metrics``,
``inferred``) and its source; the phases add up to the client's total by construction, none is
negative. Where no server clock covers a span it stays one client phase, and the notes say why; a
server clock that cannot be true for this request is set aside with the reason (`clocks.judge`),
and one that does not fit the time the client saw is set aside here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmdoctor.analysis.clocks import TOLERANCE_MS, ClockSet
from llmdoctor.analysis.delivery import StreamShape
from llmdoctor.analysis.send_stall import client_bound
from llmdoctor.measurements.timing import ClockKind, ClockOrigin, RequestTiming
from llmdoctor.reporting.report import Phase

__all__ = ["Clock", "Joined", "PROXY", "client_waterfall", "join", "with_proxy_hop"]


class Clock:
    """Which clock measured a phase (the JSON ``clock`` of a phase)."""

    CLIENT = "client"
    SERVER_HEADER = ClockOrigin.HEADER
    SERVER_BODY = ClockOrigin.BODY
    SERVER_METRICS = ClockOrigin.METRICS
    #: Computed from others (the client's time minus the server's, a held stream from the token clock).
    INFERRED = "inferred"


IN_FRONT = "in front of the model server"
PROXY = "proxy"
HELD = "delivery (held on the way)"
_LABELS = {
    ClockKind.VALIDATION: ("validation", "tokenization and checks before queueing"),
    ClockKind.QUEUE: ("queue", "waiting for the server to schedule it"),
    ClockKind.LOAD: ("model load", "loading the model before it could run"),
    ClockKind.PREFILL: ("prefill", "processing the prompt up to the first token"),
    ClockKind.DECODE: ("decode (server)", "generating the output tokens"),
    ClockKind.INFERENCE: ("prefill + decode", "the server's inference time, not split further by it"),
}


@dataclass
class Joined:
    """One request's waterfall joined with its server clocks, and the split it gives."""

    phases: list[Phase]
    total_ms: float
    #: Client time not covered by the server's clocks (None: no server clock anchors the split).
    in_front_ms: float | None = None
    #: The server's own time on the request that the client waited for (to its last token, or its
    #: answer when not streamed): what the client waited for, less the time in front and held.
    server_ms: float | None = None
    #: Time the answer's first token was held between the server and the client.
    held_ms: float = 0.0
    queue_ms: float | None = None
    prefill_ms: float | None = None
    #: How the split was anchored: "first token", "headers", "total" or "" (client clock only).
    anchor: str = ""
    sources: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _gap(a: float | None, b: float | None) -> float:
    if a is None or b is None:
        return 0.0
    return max(0.0, b - a)


@dataclass(frozen=True)
class _Marks:
    """The client's marks of one request (ms from its start), made monotone."""

    setup: float
    sent: float
    headers: float
    first: float
    last: float
    total: float

    @classmethod
    def of(cls, t: RequestTiming) -> _Marks:
        setup = t.setup_ms if not t.reused_connection else 0.0
        sent = max(setup, t.sent_ms if t.sent_ms is not None else setup)
        headers = max(sent, t.ttfb_ms if t.ttfb_ms is not None else sent)
        first = max(headers, t.ttft_ms if t.ttft_ms is not None else headers)
        last = max(first, t.token_times_ms[-1] if t.token_times_ms else first)
        total = max(last, t.total_ms if t.total_ms is not None else last)
        return cls(setup, sent, headers, first, last, total)


def _head(t: RequestTiming, m: _Marks) -> list[Phase]:
    """The client's first two phases, in both waterfalls: connection set-up and sending the request."""
    return [
        Phase("connection set-up", m.setup, "DNS + TCP + TLS" if m.setup else "connection reused"),
        Phase("send request", m.sent - m.setup,
              "this client stalled: the answer was waiting when the send returned" if client_bound(t) else ""),
    ]


def client_waterfall(t: RequestTiming) -> list[Phase]:
    """The client's own split of one request into consecutive phases that add up to its total."""
    m = _Marks.of(t)
    return [
        *_head(t, m),
        Phase("wait for headers", m.headers - m.sent, "server accepts, routes, schedules"),
        Phase("wait for first token", m.first - m.headers, "queue + prefill + first decode step"),
        Phase("decode", m.last - m.first, f"{t.output_tokens} tokens"),
        Phase("end of stream", m.total - m.last, "final chunk, usage, [DONE]"),
    ]


def _lay_out(budget: float, cs: ClockSet, kinds: tuple[str, ...], notes: list[str]) -> tuple[list[Phase], float]:
    """Phases for the server's parts among `kinds` that fit in `budget` ms, in order; and the time left."""
    phases: list[Phase] = []
    left = budget
    for kind in kinds:
        clock = cs.accepted.get(kind)
        if clock is None:
            continue
        if clock.ms > left + TOLERANCE_MS:
            notes.append(f"{cs.source(kind)} = {clock.ms:,.1f} ms does not fit the {left:,.1f} ms left of the "
                         "server's time by the client's clock: set aside, kept merged")
            continue
        ms = min(clock.ms, left)
        name, note = _LABELS[kind]
        phases.append(Phase(name, ms, note, clock.origin, cs.source(kind)))
        left -= ms
    return phases, max(0.0, left)


def _server_ttft(cs: ClockSet, wait: float) -> tuple[float, str, str] | None:
    """The server's own time to first token (ms, source, clock), if its clocks give it.

    The request's own prefill clock (vLLM's per-request ``metrics``, llama.cpp's ``timings``) wins over
    a time to first token that is only a histogram's mean.
    """
    ttft_clock, prefill_clock = cs.accepted.get(ClockKind.TTFT), cs.accepted.get(ClockKind.PREFILL)
    own_prefill = prefill_clock is not None and prefill_clock.origin != ClockOrigin.METRICS
    if ttft_clock is not None and own_prefill and ttft_clock.origin == ClockOrigin.METRICS:
        ttft_clock = None
    if ttft_clock is not None and (ttft := ttft_clock.ms) is not None:
        return min(ttft, wait), cs.source(ClockKind.TTFT), cs.origin(ClockKind.TTFT) or Clock.INFERRED
    if cs.ms(ClockKind.PREFILL) is not None:
        kinds = (ClockKind.VALIDATION, ClockKind.QUEUE, ClockKind.LOAD, ClockKind.PREFILL)
        total = sum(cs.ms(k) or 0.0 for k in kinds)
        return min(total, wait), cs.source(*kinds), cs.origin(ClockKind.PREFILL) or Clock.INFERRED
    return None


def _tail(t: RequestTiming, m: _Marks, held: float, shape: StreamShape | None) -> list[Phase]:
    """Held delivery, decode as the client saw it, end of stream."""
    phases = []
    if held > 0:
        source = shape.expected_source if shape is not None else ""
        phases.append(Phase(HELD, held, "the first token was held between the server and the client "
                                        f"(seen decode {m.last - m.first:,.1f} ms)", Clock.INFERRED, source))
    phases.append(Phase("decode", m.last - m.first, f"{t.output_tokens} tokens, as they arrived"))
    phases.append(Phase("end of stream", m.total - m.last, "final chunk, usage, [DONE]"))
    return phases


def _held(shape: StreamShape | None, room: float) -> float:
    return min(shape.held_ms, room) if shape is not None and shape.held else 0.0


def join(t: RequestTiming, cs: ClockSet, shape: StreamShape | None = None) -> Joined:
    """Join request `t` with its judged server clocks `cs` (and its stream's shape) into one waterfall."""
    m = _Marks.of(t)
    head = _head(t, m)
    notes = list(cs.set_aside)
    if (shared := cs.shared) is not None:
        notes.append(f"shared traffic: server clocks averaged over {shared.requests} requests ({shared.ours} ours)")
    streamed = t.streamed and bool(t.token_times_ms)
    wait = m.first - m.sent
    anchor = _server_ttft(cs, wait) if streamed else None
    if anchor is not None:
        server_ttft, source, origin = anchor
        held = _held(shape, wait - server_ttft)
        in_front = max(0.0, wait - server_ttft - held)
        parts, left = _lay_out(server_ttft, cs, (ClockKind.VALIDATION, ClockKind.QUEUE, ClockKind.LOAD,
                                                 ClockKind.PREFILL), notes)
        if not parts:
            parts = [Phase("queue + prefill", left, "the server's time to first token; it does not split it",
                           origin, source)]
        elif left > 0:
            parts.append(Phase("first token", left, "the server's time to first token beyond its parts "
                                                    "(first decode step, API server work)", origin, source))
        if cs.ms(ClockKind.QUEUE) is None:
            notes.append("no server clock for the queue: any wait for a slot counts in front of the model server")
        phases = [*head, Phase(IN_FRONT, in_front, "client wait for the first token − the server's own time "
                                                   "to it − held delivery: gateways, balancers, auth, distance",
                               Clock.INFERRED, source),
                  *parts, *_tail(t, m, held, shape)]
        return _result(phases, m, in_front, True, held, cs, "first token", notes)
    if (headers := cs.ms(ClockKind.HEADERS)) is not None:
        hdr_wait = m.headers - m.sent
        server = min(headers, hdr_wait)
        in_front = hdr_wait - server
        source = cs.source(ClockKind.HEADERS)
        if not streamed:  # the headers came with the finished answer: the server's whole time
            parts, left = _lay_out(server, cs, (ClockKind.VALIDATION, ClockKind.QUEUE, ClockKind.LOAD,
                                                ClockKind.PREFILL, ClockKind.DECODE, ClockKind.INFERENCE), notes)
            parts.append(Phase("server, until its answer" if parts else "server (not split)", left,
                               "the server's time until it sent the answer" if not parts else
                               "the rest of the server's time", Clock.SERVER_HEADER, source))
            phases = [*head, Phase(IN_FRONT, in_front, "client wait − the server's own time: gateways, "
                                                       "balancers, auth, distance", Clock.INFERRED, source),
                      *parts, Phase("receive answer", m.total - m.headers, "the body after its headers")]
            return _result(phases, m, in_front, False, 0.0, cs, "headers", notes)
        gap = m.first - m.headers
        # A hop that holds the stream may hold its headers too (nginx with an HTTP/1.0 upstream): when
        # they came with the first token, what the gap after them cannot hold comes out of the wait for
        # them. Headers that came earlier were not held: a late first token then (a busy host) is no
        # reason to take time from the time in front.
        headers_held = gap <= TOLERANCE_MS
        held = _held(shape, gap + in_front if headers_held else gap)
        in_front = max(0.0, in_front - max(0.0, held - gap))
        if held > gap:
            notes.append("the headers were held with the stream: the server's time to its first token counts in "
                         "front of it here")
        notes.append(f"{source} ends at the server's headers, sent before the model ran: queue, prefill and "
                     "the first token stay merged in the client's wait for the first token")
        phases = [*head, Phase(IN_FRONT, in_front, "client wait for the headers − the server's own time to "
                                                   "them − held delivery: gateways, balancers, auth, distance",
                               Clock.INFERRED, source),
                  Phase("server, until its headers", server, "", Clock.SERVER_HEADER, source),
                  Phase("wait for first token", max(0.0, gap - held),
                        "queue + prefill + first decode step (client clock)"),
                  *_tail(t, m, held, shape)]
        return _result(phases, m, in_front, True, held, cs, "headers", notes)
    if (whole := cs.ms(ClockKind.TOTAL)) is not None:
        span = (m.total if streamed else m.headers) - m.sent
        server = min(whole, span)
        in_front = span - server
        source = cs.source(ClockKind.TOTAL)
        if streamed:
            in_front = min(in_front, wait)
            held = _held(shape, wait - in_front)
            budget = wait - in_front - held
            parts, left = _lay_out(budget, cs, (ClockKind.VALIDATION, ClockKind.QUEUE, ClockKind.LOAD), notes)
            parts.append(Phase("prefill + first token", left, "the rest of the server's wait for the first token",
                               Clock.INFERRED, source))
            phases = [*head, Phase(IN_FRONT, in_front, "client time − the server's whole time (both ways): "
                                                       "gateways, balancers, auth, distance", Clock.INFERRED, source),
                      *parts, *_tail(t, m, held, shape)]
            return _result(phases, m, in_front, True, held, cs, "total", notes)
        parts, left = _lay_out(server, cs, (ClockKind.VALIDATION, ClockKind.QUEUE, ClockKind.LOAD, ClockKind.PREFILL,
                                            ClockKind.DECODE, ClockKind.INFERENCE), notes)
        parts.append(Phase("other server time" if parts else "server (not split)", left,
                           "the server's time not split by its clocks", cs.origin(ClockKind.TOTAL) or Clock.INFERRED,
                           source))
        phases = [*head, Phase(IN_FRONT, in_front, "client time − the server's whole time: gateways, "
                                                   "balancers, auth, distance", Clock.INFERRED, source),
                  *parts, Phase("receive answer", m.total - m.headers, "the body after its headers")]
        return _result(phases, m, in_front, False, 0.0, cs, "total", notes)
    notes.append("no server clock for this request: the server's time and the time in front of it stay merged "
                 "in the client's phases")
    phases = client_waterfall(t)
    held = _held(shape, m.first - m.sent)
    if held > 0:  # out of the wait for the first token, then (headers held too) of the wait for the headers
        from_first = min(held, phases[3].ms)
        for i, take in ((3, from_first), (2, held - from_first)):
            phases[i] = Phase(phases[i].name, max(0.0, phases[i].ms - take), phases[i].note)
        phases[4:4] = [Phase(HELD, held, "the first token was held between the server and the client",
                             Clock.INFERRED, shape.expected_source if shape else "")]
    return _result(phases, m, None, streamed, held, cs, "", notes)


def _result(phases: list[Phase], m: _Marks, in_front: float | None, streamed: bool, held: float,
            cs: ClockSet, anchor: str, notes: list[str]) -> Joined:
    by_name = {p.name: p.ms for p in phases}
    prefill = by_name.get("prefill")
    server = None
    if in_front is not None:  # the rest of what the client waited for, once the request was sent
        server = max(0.0, (m.last if streamed else m.headers) - m.sent - in_front - held)
    return Joined(
        phases=phases, total_ms=m.total, in_front_ms=in_front, server_ms=server, held_ms=held,
        queue_ms=by_name.get("queue"), prefill_ms=prefill, anchor=anchor,
        sources=list(dict.fromkeys(p.source for p in phases if p.source)), notes=list(dict.fromkeys(notes)),
    )


#: The phases a proxy's measured cost is taken from, in order: it sits in front of the server, so it is
#: part of the time in front where a server clock split that off, else of the client's wait for the
#: headers (a proxy that answers only once it has the upstream's headers), else of the set-up.
_PROXY_FROM = (IN_FRONT, "wait for headers", "wait for first token", "connection set-up")


def with_proxy_hop(phases: list[Phase], cost_ms: float, proxy: str, per: str = "request") -> list[Phase]:
    """`phases` with a "proxy" hop of `cost_ms` (measured through the proxy − around it) in front of the server.

    It is taken out of the phases that hold it (`_PROXY_FROM`, never more than they hold), so the
    phases still add up to the total; a cost paid per new connection comes out of the set-up only.
    """
    left = cost_ms
    out = list(phases)
    for name in (("connection set-up",) if per == "connection" else _PROXY_FROM):
        i = next((k for k, p in enumerate(out) if p.name == name), None)
        if i is None or left <= 0:
            continue
        take = min(left, out[i].ms)
        if take <= 0:
            continue
        p = out[i]
        out[i] = Phase(p.name, p.ms - take, p.note, p.clock, p.source)
        at = next((k for k, q in enumerate(out) if q.name == PROXY), None)
        if at is None:
            out.insert(i, Phase(PROXY, take, f"{proxy}: measured through it − around it", Clock.INFERRED,
                                "transport (raw requests through and around the proxy)"))
        else:
            q = out[at]
            out[at] = Phase(q.name, q.ms + take, q.note, q.clock, q.source)
        left -= take
    return out
