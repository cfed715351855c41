"""LD001: can the doctor talk to the endpoint at all."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from llmdoctor.analysis.failures import who_answered_503
from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Severity
from llmdoctor.measurements.latency_samples import describe_failure
from llmdoctor.measurements.ledger import RequestOutcome
from llmdoctor.measurements.timing import ErrorKind, FailedBy, RequestTiming
from llmdoctor.probes.catalog import DISCOVERY, FIRST_REQUEST, HOST
from llmdoctor.probes.discovery import EndpointInfo
from llmdoctor.probes.host import HostResult

# A server process younger than this, found on this machine while its port refuses connections,
# is probably still starting (vLLM binds its port only once the engine is ready: 26-114 s for a
# tiny model on two CPU cores, minutes for large models on GPUs).
LOADING_WINDOW_S = 900.0


class Reachability(Check):
    """Endpoint reachability: connection, TLS, authentication, path, model, a first generation.

    ## What it checks
    Sends ``GET /v1/models`` and one minimal streamed chat request ("Say ok.")
    and classifies what goes wrong: connection refused, timeout, DNS failure,
    TLS failure, 401/403, 404 on a wrong path (and whether the server root
    serves ``/v1``), a requested model that is not served, a body that is not
    OpenAI-shaped JSON (an HTML page from a proxy), a 5xx, a stream that stops
    mid-way, or rate limiting. When the connection is refused and the server's
    process runs on this machine (``--pid``, or found by name) and started
    recently, it says the server may still be loading: vLLM opens its port only
    once the engine is ready.

    ## Why it adds latency
    Every other measurement depends on a working request. An endpoint that
    fails or retries costs the application its full timeout on every call.

    ## Example
    ``llmdoctor check --endpoint http://localhost:8000/api`` on a vLLM server
    reports *404 on /api/v1/models — did you mean http://localhost:8000/v1?*

    ## Fix
    Follow the finding's fix: start the server or correct host/port, use the
    right scheme (http vs https), provide the API key (``--api-key-env NAME``),
    correct the base URL or the model name.

    ## Caveats
    Servers without ``/v1/models`` are probed with ``--model`` alone. A 429
    is reported as a warning, since it describes load, not breakage. A 503 is
    "the model loading" only when its answer says so; an HTML error page or an
    instant answer is a gateway in front of the model. Failures after the
    first request are LD002's. A request this client failed itself (``[Errno
    24] Too many open files``, no free local port: the client marks who failed
    each request) says nothing of the endpoint: it is an info finding under the
    client's limits, which LD501 names with its fix and outranks.
    """

    id = "LD001"
    name = "endpoint-reachable"
    title = "Endpoint reachability"
    category = Category.ENDPOINT
    requires = (DISCOVERY,)
    optional = (FIRST_REQUEST, HOST)

    def run(self, ctx: Context) -> Iterator[Finding]:
        info = ctx.get(DISCOVERY)
        models = info.models_timing
        first = ctx.optional(FIRST_REQUEST)
        for t, where in ((models, f"GET {info.base_url}/models"), (first, "the first generation request")):
            if t is not None and not t.ok and t.failed_by == FailedBy.CLIENT:
                yield _client_failure(t, where)
                return
        if not info.reachable:
            finding = _transport_failure(models, info.base_url, ctx.options.request.timeout_s)
            if models.error == ErrorKind.REFUSED:
                finding = _maybe_loading(finding, ctx.optional(HOST))
            yield finding
            return
        if models.status in (401, 403):
            yield _auth_failure(models)
            return
        if models.status == 404 and info.suggested_base_url:
            yield Finding(
                Severity.CRITICAL,
                Confidence.HIGH,
                "Wrong API path: /models not found",
                f"GET {info.base_url}/models answered 404, but {info.suggested_base_url}/models answers. "
                f"Did you mean {info.suggested_base_url}?",
                Fix(f"Use --endpoint {info.suggested_base_url}", ("Point your client's base_url there too.",)),
                evidence=(Evidence("status", 404, source="GET /models"),),
                cause=Cause.ENDPOINT_MISCONFIGURED,
            )
            return
        if info.models and info.model_served is False:
            served = ", ".join(info.models[:10])
            yield Finding(
                Severity.CRITICAL,
                Confidence.HIGH,
                f"Model {info.model_requested!r} is not served",
                f"The endpoint serves: {served}. Requests for {info.model_requested!r} will fail.",
                Fix(f"Use one of the served models, e.g. --model {info.models[0]}", (
                    "Check the model name in your application's config and the server's launch command.",
                )),
                evidence=(Evidence("served models", served, source="GET /models"),),
                cause=Cause.ENDPOINT_MISCONFIGURED,
            )
            return
        if models.ok and not info.models and info.model is None:
            yield Finding(
                Severity.CRITICAL,
                Confidence.HIGH,
                "No model is loaded",
                "GET /models returned an empty list and no --model was given.",
                Fix("Load a model on the server, or pass --model NAME."),
                cause=Cause.ENDPOINT_MISCONFIGURED,
            )
            return
        if first is not None and not first.ok:
            yield _generation_failure(first, info, ctx.options.request.timeout_s)
        elif first is None and not models.ok:
            # No generation request could be sent: what /models answered is all there is to say.
            yield _generation_failure(models, info, ctx.options.request.timeout_s, where=f"GET {info.base_url}/models")


def _client_failure(t: RequestTiming, where: str) -> Finding:
    """This client failed the request itself (open files, ports): nothing is known of the endpoint."""
    detail = t.error_detail.split("this client: ", 1)[-1]
    short = detail.split(" (")[0].split(":")[0]
    return Finding(
        Severity.INFO, Confidence.HIGH,
        f"This client failed 1 request: {short}",
        f"This client failed {where} itself, before the endpoint saw it ({detail[:200]}): this says nothing of "
        "the endpoint, whose reachability is unknown.",
        Fix("Give this client what it ran out of, then check again.", (
            "Open files: raise the limit (`ulimit -n 65536`, systemd `LimitNOFILE=65536`); LD501 reads it.",
            "Ephemeral ports: reuse connections, or widen net.ipv4.ip_local_port_range.",
        )),
        evidence=(Evidence("error", t.error, source=where), Evidence("failed by", t.failed_by, source=where)),
        cause=Cause.CLIENT_LIMITS,
    )


def _transport_failure(t: RequestTiming, base_url: str, timeout_s: float) -> Finding:
    fixes = {
        ErrorKind.REFUSED: ("Connection refused", "Nothing listens at that host and port.",
                            Fix("Start the server or correct host/port in --endpoint.", (
                                "Check the port the server printed at start-up.",
                                "In a container, publish the port and bind the server to 0.0.0.0.",
                            ))),
        ErrorKind.DNS: ("Host name does not resolve", "DNS resolution of the endpoint host failed.",
                        Fix("Correct the host name, or use the IP address.")),
        ErrorKind.TLS: ("TLS handshake failed", "The TLS connection could not be established.",
                        Fix("Use http:// for a plain-HTTP server; for a private CA pass --ca-bundle FILE "
                            "(or --insecure to accept any certificate, for diagnosis only).")),
        ErrorKind.CONNECT_TIMEOUT: ("Connection timed out", "The TCP connection was not accepted in time.",
                                    Fix("Check host, port, firewalls and security groups.")),
        ErrorKind.READ_TIMEOUT: ("No answer in time", f"The server accepted but did not answer within "
                                 f"{timeout_s:g} s.", Fix("The server is hung or overloaded: check its logs "
                                                          "and load; raise --timeout if it is just slow.")),
    }
    title, what, fix = fixes.get(t.error or "", ("Endpoint unreachable", "The request failed.",
                                                Fix("Check the endpoint URL and that the server runs.")))
    return Finding(
        Severity.CRITICAL,
        Confidence.HIGH,
        title,
        f"{what} ({base_url}: {describe_failure(t)})",
        fix,
        evidence=(Evidence("error", t.error, source="GET /models"),),
        # a server that accepts the connection but never answers is hung, not unreachable
        cause=Cause.SERVER_ERRORS if t.error == ErrorKind.READ_TIMEOUT else Cause.ENDPOINT_UNREACHABLE,
    )


def _maybe_loading(finding: Finding, host: HostResult | None) -> Finding:
    """Add what the local server process says to a refused connection: starting, or elsewhere."""
    proc = host.server_process if host is not None else None
    if proc is None or proc.uptime_s is None:
        return finding
    who = f"Process {proc.pid} ({proc.kind or proc.name or 'server'})"
    evidence = (*finding.evidence, Evidence("server process uptime", round(proc.uptime_s), "s", "host"))
    if proc.uptime_s > LOADING_WINDOW_S and host is not None and host.process_source != "pid":
        return dataclasses.replace(
            finding,
            message=finding.message + f" {who} has run on this machine for {proc.uptime_s / 60:.0f} min but "
            "nothing listens at that port: check the --host/--port it was started with.",
            evidence=evidence,
        )
    return dataclasses.replace(
        finding,
        title="Connection refused: the server may still be loading",
        message=finding.message + f" {who} started {proc.uptime_s:.0f} s ago on this machine and does not "
        "accept connections yet: the server may still be loading (vLLM opens its port only once the "
        "model is loaded and the engine is ready).",
        fix=Fix("Wait for the server to finish starting, then retry; if it never does, read its log.", (
            "vLLM is ready when its log says 'Starting vLLM server on' / 'Application startup complete'.",
            "If it exits or hangs, pass its log with --log; check the port it was started with.",
        )),
        evidence=evidence,
    )


def _auth_failure(t: RequestTiming) -> Finding:
    return Finding(
        Severity.CRITICAL,
        Confidence.HIGH,
        f"Authentication failed (HTTP {t.status})",
        f"The endpoint rejected the credentials: {describe_failure(t)}",
        Fix("Provide a valid API key.", (
            "Export it in an environment variable and pass --api-key-env NAME (default OPENAI_API_KEY).",
            "Or pass --header 'Authorization: Bearer ...' for other schemes.",
        )),
        evidence=(Evidence("status", t.status, source="GET /models"),),
        cause=Cause.ENDPOINT_MISCONFIGURED,
    )


def _generation_failure(t: RequestTiming, info: EndpointInfo, timeout_s: float, where: str | None = None) -> Finding:
    where = where or f"POST /chat/completions (model {info.model!r})"
    if t.status is None and t.error not in (ErrorKind.STREAM_CUT, ErrorKind.BAD_BODY, ErrorKind.TOO_LARGE):
        return _transport_failure(t, info.base_url, timeout_s)
    if t.status == 429:
        return Finding(
            Severity.WARNING, Confidence.HIGH, "Rate limited (HTTP 429)",
            f"The endpoint rejected the first request with 429: {describe_failure(t)}",
            Fix("Wait and retry, raise your rate limit, or spread load over time.", (
                "Honour Retry-After in your client.",
            )),
            evidence=(Evidence("status", 429, source=where),),
            cause=Cause.RATE_LIMITING,
        )
    if t.error == ErrorKind.STREAM_CUT:
        title = f"Stream stopped mid-way after {t.content_events + t.reasoning_events} tokens"
        fix = Fix("Check the server and any proxy for crashes or idle timeouts on streamed responses.", (
            "Proxies (nginx: proxy_read_timeout, proxy_buffering off) often cut long SSE streams.",
        ))
    elif t.status is not None and 300 <= t.status < 400:
        title = f"Redirected (HTTP {t.status}), not followed"
        fix = Fix("Use the final URL as --endpoint and in your application.", (
            "The doctor never follows a redirect: the API key would go to another location.",
        ))
    elif t.error == ErrorKind.READ_TIMEOUT:
        title = f"No complete answer within {timeout_s:g} s"
        fix = Fix("The server started answering but did not finish: check it for hangs, endless "
                  "generation or a proxy that holds the body.", ("Raise --timeout if it is just slow.",))
    elif t.error == ErrorKind.TOO_LARGE:
        title = "Response too large"
        fix = Fix("Point --endpoint at the OpenAI-compatible API; the answer exceeded the size limit.")
    elif t.status in (401, 403):
        return _auth_failure(t)
    elif t.status == 404:
        title = "Not found (HTTP 404)"
        fix = Fix("Check the base URL (it usually ends in /v1) and the model name.")
    elif t.status == 503:
        # Decided from the answer's evidence, not assumed to be a model loading (see llmdoctor.analysis.failures).
        who, why = who_answered_503(RequestOutcome.of(t), [RequestOutcome.of(t)])
        if who == "loading":
            title = "Model still loading (HTTP 503)"
            fix = Fix("Wait for the model to load, then retry; gate traffic on readiness.", (
                "Honour Retry-After in your client; see LD305 for the cold start.",
            ))
        elif who == "gateway":
            title = "HTTP 503 from a gateway in front of the model"
            fix = Fix(f"A proxy or balancer answered ({why}): check its rate limit and its backends.", (
                "nginx limit_req / haproxy stick tables: raise the rate or burst; answer 429 with Retry-After.",
                "A balancer with no healthy backend answers 503 too: check the model servers behind it.",
            ))
        else:
            title = "Service unavailable (HTTP 503)"
            fix = Fix("The server is overloaded or restarting (its answer does not say it is loading): "
                      "read its logs (--log) and its load.", ("Honour Retry-After in your client.",))
    elif t.status is not None and t.status >= 500:
        title = f"Generation fails with HTTP {t.status}"
        fix = Fix("Read the server logs around this request (pass them with --log).",
                  ("A 503 right after start usually means the model is still loading.",))
    elif t.error == ErrorKind.BAD_BODY:
        title = "Not an OpenAI-compatible response"
        fix = Fix("Point --endpoint at the OpenAI-compatible API (base URL ending in /v1), "
                  "not at a proxy, login page or web UI.")
    else:
        title = "The first generation request failed"
        fix = Fix("Check the request the server rejected and the server logs.")
    return Finding(
        Severity.CRITICAL, Confidence.HIGH, title, f"{where}: {describe_failure(t)}", fix,
        evidence=(Evidence("error", t.error, source=where), Evidence("status", t.status, source=where)),
        cause=_failure_cause(t),
    )


def _failure_cause(t: RequestTiming) -> Cause:
    """Server errors (5xx, a hung or cut answer) against what the client has to fix (path, model, body)."""
    server_side = t.error in (ErrorKind.STREAM_CUT, ErrorKind.READ_TIMEOUT) or (t.status or 0) >= 500
    return Cause.SERVER_ERRORS if server_side else Cause.ENDPOINT_MISCONFIGURED
