"""``--dry-run``: the requests a run WOULD send, derived from the options, with nothing sent.

The plan comes from the probe declarations (`llmdoctor.probes.catalog`): the probes the
selected checks read under these options (with the probes those need), in the order the
run measures them, and for each the HTTP requests it sends at most. The real run measures
exactly these probes (plus, with follow-ups on, those the diagnosis orders within its own
budget); it may send fewer requests (a probe stops at the first failure, a 429 or a spent
budget) and never more than ``--max-requests``: the upper bound printed is
``min(sum of the plan, --max-requests)``. Each request may be retried once (a stale
keep-alive connection, or a 429/503 with a short ``Retry-After``), and the retry counts
against the same budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from llmdoctor.check import Check
from llmdoctor.options import Options
from llmdoctor.probes.catalog import DIAGNOSIS, DNS, ORDER, TRANSPORT
from llmdoctor.probes.contract import AnyProbe, Endpoint, PlannedRequest, schedule, static_off
from llmdoctor.probes.dns import is_ip_literal
from llmdoctor.target import Target

__all__ = ["PlannedRequest", "plan_line", "plan_probes", "plan_requests", "render_plan"]


def plan_probes(checks: Iterable[type[Check]], options: Options) -> list[AnyProbe]:
    """The probes a live run of `checks` measures, in measuring order (the runner's schedule)."""
    return schedule((c.reads(options) for c in checks), lambda p: static_off(p, options), ORDER, options)


def plan_requests(target: Target, options: Options, probes: Iterable[AnyProbe]) -> list[PlannedRequest]:
    """The HTTP requests `probes` would send at most (a probe switched off by the options sends none)."""
    endpoint = Endpoint.of(target)
    return [r for p in probes if static_off(p, options) is None for r in p.requests(endpoint, options)]


def plan_line(r: PlannedRequest) -> str:
    """One request shape of a dry run: how many, the method, URL and body, and the probe that sends it."""
    note = f"  ({r.note})" if r.note else ""
    return f"  {r.count:>3} × {r.method:<4} {r.url}  body {r.body}{note}  [{r.probe}]"


def _transport_line(target: Target) -> str:
    """What the transport probe touches besides HTTP requests: raw connections, and a proxy in the path."""
    from llmdoctor.probes.transport import MAX_ADDRESSES, MAX_SAMPLES, TLS_SAMPLES
    from llmdoctor.proxies import route_for

    tls = f" and {TLS_SAMPLES} TLS handshakes" if target.scheme == "https" else ""
    route = route_for(target.scheme, target.host, target.port)
    if route.proxy is None:
        return (f"Also: up to {MAX_SAMPLES} raw TCP connections{tls} to time the round trip (no HTTP request), and "
                f"one connect to each further address (up to {MAX_ADDRESSES - 1}) while the first ones fail.")
    authority = f"{target.host}:{target.port}"
    asked = (f"CONNECT {authority}" if target.scheme == "https" else
             f"HEAD http://{authority}/ (a second on the same connection when the proxy keeps it open)")
    around = ("a TCP connect only" if target.scheme == "https" else
              "HEAD / (a second on the same connection when the endpoint keeps it open)")
    through = f" (the TLS handshakes through CONNECT {authority} tunnels)" if tls else ""
    return (f"Also, through the proxy {route.settings.proxy_url} (from {route.settings.variable}): up to "
            f"{MAX_SAMPLES} raw TCP connections to it, each sending {asked}, to time the round trip and the proxy"
            f"{tls}{through}; and around it, up to {MAX_SAMPLES} connections to {authority} itself, each "
            f"{around}, to measure what the proxy costs (none when the endpoint cannot be reached directly).")


def render_plan(target: Target, options: Options, checks: Sequence[type[Check]]) -> str:
    """The dry-run listing: one line per request shape, the upper bound, the probes and what else is touched."""
    probes = plan_probes(checks, options)
    planned = plan_requests(target, options, probes)
    total = sum(r.count for r in planned)
    lines = [f"llmdoctor dry run — {target.base_url}: nothing is sent.", ""]
    lines += [plan_line(r) for r in planned]
    lines.append("")
    lines.append(f"At most {min(total, options.request.max_requests)} HTTP requests (plan {total}, "
                 f"--max-requests {options.request.max_requests}); each may be retried once (stale keep-alive, "
                 "or 429/503 with a short Retry-After) within the same budget.")
    lines.append("Probes, in the order they run: " + (", ".join(p.name for p in probes) or "none"))
    off = [(p, static_off(p, options)) for p in probes]
    for p, reason in off:
        if reason:
            lines.append(f"  not measured: {p.name} ({reason})")
    if DIAGNOSIS in probes and static_off(DIAGNOSIS, options) is None:
        ordered = [p.name for p in DIAGNOSIS.orders if p not in probes and static_off(p, options) is None]
        if ordered:
            lines.append("The diagnosis may also order, within its budget: " + ", ".join(ordered))
    if options.request.deadline_s is not None:
        lines.append(f"Nothing is started after --deadline {options.request.deadline_s:g} s; "
                     f"each request is bounded by --timeout {options.request.timeout_s:g} s.")
    if TRANSPORT in probes:
        lines.append(_transport_line(target))
    if DNS in probes and not is_ip_literal(target.host):
        lines.append(f"Also: DNS queries (A and AAAA) for {target.host} to each configured resolver.")
    lines.append("Credentials: sent only to the endpoint's own origin; redirects are reported, never followed.")
    return "\n".join(lines) + "\n"
