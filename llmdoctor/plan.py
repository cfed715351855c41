"""``--dry-run``: the requests a run WOULD send, derived from the options, with nothing sent.

The plan is static: which endpoint probes the selected checks need (with the probes those
depend on), and for each the HTTP requests it sends at most. The real run may send fewer
(a probe stops at the first failure, a 429 or a spent budget) and never more than
``--max-requests``: the upper bound printed is ``min(sum of the plan, --max-requests)``.
Each request may be retried once (a stale keep-alive connection, or a 429/503 with a short
``Retry-After``), and the retry counts against the same budget.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from llmdoctor.probes.dns import is_ip_literal
from llmdoctor.target import Options, Target

__all__ = ["PlannedRequest", "plan_requests", "render_plan", "PROBE_DEPENDS"]

CHAT_BODY = '{"model", "messages": [{"role": "user", "content": "Say ok."}], "max_tokens": 8, "stream": true}'
SWEEP_BODY = '{"model", "messages": [count from 1 to 1000], "max_tokens": N, "stream": true, "ignore_eos": true}'


@dataclass(frozen=True)
class PlannedRequest:
    """Up to `count` requests of one shape, sent by probe `probe`."""

    probe: str
    method: str
    url: str
    body: str
    count: int
    note: str = ""


# Probes that run other probes first (static mirror of the probe functions' ctx.get calls).
PROBE_DEPENDS: dict[str, tuple[str, ...]] = {
    "first_request": ("discovery",),
    "baseline": ("first_request", "discovery"),
    "sweep": ("baseline",),
    "server_metrics": ("discovery", "baseline"),
    "prefill": ("baseline",),
    "idle": ("baseline",),
    "concurrency": ("baseline", "discovery"),
    "transport": ("baseline",),
    "context_window": ("discovery",),
    "server_tokens": ("discovery",),
    "diagnosis": ("first_request", "baseline", "server_metrics"),
}


def _closure(names: Iterable[str]) -> list[str]:
    seen: list[str] = []

    def visit(name: str) -> None:
        if name in seen:
            return
        for dep in PROBE_DEPENDS.get(name, ()):
            visit(dep)
        seen.append(name)

    for name in names:
        visit(name)
    return seen


def _requests(probe: str, target: Target, o: Options) -> list[PlannedRequest]:
    base, root = target.base_url.rstrip("/"), target.root_url.rstrip("/")
    parts = urlsplit(base)
    origin = f"{parts.scheme}://{parts.netloc}"
    chat = f"{base}/chat/completions"
    table: dict[str, Callable[[], list[PlannedRequest]]] = {
        "discovery": lambda: [PlannedRequest(probe, "GET", f"{base}/models", "-", 1),
                              *([PlannedRequest(probe, "GET", f"{origin}/v1/models", "-", 1,
                                                "only when the base path answers 404")]
                                if urlsplit(base).path != "/v1" else [])],
        "first_request": lambda: [PlannedRequest(probe, "POST", chat, CHAT_BODY, 1)],
        "baseline": lambda: [PlannedRequest(probe, "POST", chat, CHAT_BODY, max(0, o.warmup - 1) + o.samples,
                                            "stops at the first 401/403/404/429/503")],
        "sweep": lambda: [PlannedRequest(probe, "POST", chat, SWEEP_BODY,
                                         2 * o.sweep_repeats * len(o.sweep_max_tokens),
                                         f"max_tokens in {list(o.sweep_max_tokens)} × {o.sweep_repeats}; "
                                         "each resent without ignore_eos if the server rejects it")],
        "server_metrics": lambda: [PlannedRequest(probe, "GET", o.metrics_url or f"{root}/metrics", "-", 2,
                                                  "before and after the baseline"),
                                   PlannedRequest(probe, "GET", f"{root}/api/ps", "-", 2, "only if no /metrics"),
                                   PlannedRequest(probe, "GET", f"{root}/props, {root}/slots", "-", 2,
                                                  "only if neither answers")],
        "gpu_metrics": lambda: ([PlannedRequest(probe, "GET", o.gpu_metrics_url, "-", 1)]
                                if o.gpu_metrics_url else []),
        "context_window": lambda: [PlannedRequest(probe, "GET", f"{root}/props", "-", 1,
                                                  "only if /v1/models gives no context length")],
        "server_tokens": lambda: ([PlannedRequest(probe, "POST", f"{root}/tokenize", '{"prompt" or "messages"}', 8,
                                                  "a few of the --request bodies")] if o.request_files else []),
        "prefill": lambda: [PlannedRequest(probe, "POST", chat, '{"messages": [short or long prompt], '
                                           '"max_tokens": 1, "stream": true}', 2)],
        "idle": lambda: ([PlannedRequest(probe, "POST", chat, CHAT_BODY, 1, f"after {o.idle_test_s:g} s idle")]
                         if o.idle_test_s > 0 else []),
        "diagnosis": lambda: ([PlannedRequest(probe, "POST/GET", f"{chat}, {root}/metrics", "follow-up tests",
                                              o.followup_requests,
                                              "the differential diagnosis orders only the tests that still tell "
                                              "its hypotheses apart (prompt-length pair, lone request, 2 at once, "
                                              "repeated prompt, 2 s idle), within --budget")]
                              if o.followup else []),
        "concurrency": lambda: ([PlannedRequest(probe, "POST", chat, CHAT_BODY, 2 + o.concurrency,
                                                f"2 alone, then {o.concurrency} in parallel")]
                                if o.concurrency > 0 else []),
    }
    make = table.get(probe)
    return make() if make is not None else []


def plan_requests(target: Target, options: Options, required: Iterable[str]) -> list[PlannedRequest]:
    """The HTTP requests the probes behind `required` (check requirements) would send, at most."""
    return [r for name in _closure(required) for r in _requests(name, target, options) if r.count > 0]


def render_plan(target: Target, options: Options, required: Iterable[str]) -> str:
    """The dry-run listing: one line per request shape, then the upper bound and what else is touched."""
    names = _closure(required)
    planned = plan_requests(target, options, names)
    total = sum(r.count for r in planned)
    lines = [f"llmdoctor dry run — {target.base_url}: nothing is sent.", ""]
    for r in planned:
        note = f"  ({r.note})" if r.note else ""
        lines.append(f"  {r.count:>3} × {r.method:<4} {r.url}  body {r.body}{note}  [{r.probe}]")
    lines.append("")
    lines.append(f"At most {min(total, options.max_requests)} HTTP requests (plan {total}, "
                 f"--max-requests {options.max_requests}); each may be retried once (stale keep-alive, "
                 "or 429/503 with a short Retry-After) within the same budget.")
    if options.deadline_s is not None:
        lines.append(f"Nothing is started after --deadline {options.deadline_s:g} s; "
                     f"each request is bounded by --timeout {options.timeout_s:g} s.")
    if "transport" in names:
        lines.append(f"Also: up to 10 raw TCP connections{' and 3 TLS handshakes' if target.scheme == 'https' else ''}"
                     " to time the round trip (no HTTP request), and one connect to each further address"
                     " (up to 5) while the first ones fail.")
    if "dns" in names and not is_ip_literal(target.host):
        lines.append(f"Also: DNS queries (A and AAAA) for {target.host} to each configured resolver.")
    lines.append("Credentials: sent only to the endpoint's own origin; redirects are reported, never followed.")
    return "\n".join(lines) + "\n"
