"""LD305: the endpoint answers 503 "loading" while it is up."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check, CheckSkipped
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Severity
from llmdoctor.measurements.timing import RequestTiming
from llmdoctor.probes.catalog import BASELINE, FIRST_REQUEST


def _loading(t: RequestTiming) -> bool:
    text = f"{t.error_detail} {t.text}".lower()
    return t.status == 503 and ("loading" in text or "not ready" in text or "starting" in text)


class LoadingResponses(Check):
    """503 "loading": the server is up but the model is not ready.

    ## What it checks
    Looks at the first generation request and the baseline's requests for HTTP 503
    answers that say the model is loading (llama.cpp "Loading model", TGI/vLLM
    start-up, gateways waiting for a replica).

    ## Why it adds latency
    The process accepts connections (and /health may say ready) before the weights
    are in memory: clients get errors or retry until the load finishes - seconds to
    minutes of cold start per restart or scale-out.

    ## Example
    `POST /v1/chat/completions` -> 503 `{"error": {"message": "Loading model"}}`.

    ## Fix
    Gate traffic on real readiness (a readiness probe that sends a tiny generation,
    or llama.cpp's `/health` returning 200 only when loaded); warm up after start;
    keep instances warm (min replicas) so users never meet a loading one.

    ## Caveats
    A 503 can also mean overload; only answers that mention loading count here.
    """

    id = "LD305"
    name = "loading-responses"
    title = "Loading responses while up"
    category = Category.COLD_START
    optional = (FIRST_REQUEST, BASELINE)

    def run(self, ctx: Context) -> Iterator[Finding]:
        seen: list[RequestTiming] = []
        first = ctx.optional(FIRST_REQUEST)
        if first is not None:
            seen.append(first)
        baseline = ctx.optional(BASELINE)
        if baseline is not None:
            seen += list(baseline.warmup[1:]) + list(baseline.samples)
        if not seen:
            raise CheckSkipped("no generation request was sent")
        loading = [t for t in seen if _loading(t)]
        if not loading:
            return
        detail = (loading[0].error_detail or loading[0].text)[:120]
        yield Finding(
            severity=Severity.CRITICAL if len(loading) == len(seen) else Severity.WARNING,
            confidence=Confidence.HIGH,
            title=f"{len(loading)} of {len(seen)} generation requests got 503 'loading'",
            message=(
                f"The endpoint accepted connections but answered HTTP 503 ({detail!r}): the model was "
                "still loading, a cold start that clients meet as errors or retries."
            ),
            impact_ms=None,
            impact_basis="requests fail until the model is loaded",
            evidence=(
                Evidence("503 loading answers", len(loading), "", "first_request/baseline"),
                Evidence("response", detail, "", loading[0].path),
            ),
            fix=Fix(
                "Send traffic only to a loaded model",
                (
                    "Readiness probe that requires the model loaded (a tiny generation, or /health == 200).",
                    "Warm up after start and keep minimum replicas warm.",
                ),
            ),
            cause=Cause.COLD_START,
        )
