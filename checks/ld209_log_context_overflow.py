"""LD209: the server's logs report prompts over the context window (rejected or truncated)."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Severity
from llmdoctor.logs.scan import CONTEXT_OVERFLOW
from llmdoctor.probes.catalog import LOGS


class LogContextOverflow(Check):
    """Context length exceeded or prompts truncated, as the server logged it.

    ## What it checks
    Counts the log lines where the server rejected a request over its context window
    (vLLM "This model's maximum context length is ...", TGI "Input validation error:
    `inputs` tokens + `max_new_tokens` must be <= ...", llama.cpp "the request exceeds the
    available context size") or silently cut the prompt (Ollama "truncating input prompt",
    llama.cpp "input truncated"), and transformers' "Token indices sequence length is longer
    than the specified maximum". vLLM 0.32 sends its "maximum context length is ..." error to the
    client only; its log keeps just uvicorn's access line ``"POST /v1/chat/completions HTTP/1.1"
    400 Bad Request``, so 400s on the generation routes are counted too, as likely overflows.

    ## Why it adds latency
    A prompt at the limit pays the longest possible prefill before its first token; a rejected
    one costs a full round trip and usually a retry; a truncated one wastes the prefill of
    text the model never sees, and answers worse (so users ask again).

    ## Example
    `ollama.log:1`: `msg="truncating input prompt" limit=512 prompt=617 keep=4 new=512`.

    ## Fix
    Count tokens before sending (the model's tokenizer) and trim history or retrieved chunks.
    Or raise the window where memory allows: vLLM `--max-model-len`, TGI `--max-input-tokens`
    / `--max-total-tokens`, llama.cpp `--ctx-size`, Ollama `num_ctx` / `OLLAMA_CONTEXT_LENGTH`.

    ## Caveats
    The log does not say which client sent the request; LD1xx checks measure your own prompts.
    A 400 access line says only that a request was invalid: a prompt over the window is the usual
    reason with vLLM, but a bad parameter looks the same (low confidence when only those are seen).
    """

    id = "LD209"
    name = "log-context-overflow"
    title = "Context length exceeded in server logs"
    category = Category.SERVER
    requires = (LOGS,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        scan = ctx.get(LOGS)
        count = scan.count(CONTEXT_OVERFLOW)
        hits = scan.hits.get(CONTEXT_OVERFLOW) or []
        if not count or not hits:
            return
        truncated = sum(1 for h in hits if h.kind == "truncated")
        bad_requests = sum(1 for h in hits if h.kind == "http-400")
        rejected = len(hits) - truncated - bad_requests
        kinds = []
        if rejected:
            kinds.append(f"{rejected} rejected")
        if truncated:
            kinds.append(f"{truncated} truncated")
        if bad_requests:
            kinds.append(f"{bad_requests} answered HTTP 400 (vLLM logs an overflow only as its access line; "
                         "another invalid request looks the same)")
        only_400 = bad_requests == len(hits)
        sample = " (among the kept samples)" if len(hits) < count else ""
        last = hits[-1]
        yield Finding(
            severity=Severity.WARNING,
            confidence=Confidence.LOW if only_400 else Confidence.HIGH,
            title=(f"Generation requests rejected with HTTP 400 in server logs ({count}x): likely over the context "
                   "window" if only_400 else f"Prompts over the context window in server logs ({count}x)"),
            message=(
                (f"The server answered {count} generation request(s) with HTTP 400{sample}: with vLLM that is "
                 "usually a prompt over --max-model-len (its log keeps only the access line; another invalid "
                 "request looks the same). " if only_400 else
                 f"The server logged {count} prompt(s) over its context window: {', '.join(kinds)}{sample}. ")
                + f"Last at {last.where}: {last.text[:160]}"
            ),
            impact_ms=None,
            impact_basis="rejected requests fail and are retried; truncated ones pay a full-window prefill",
            evidence=(Evidence("events", count, "", "logs"),)
            + tuple(Evidence(h.kind, h.text, "", h.where) for h in {id(h): h for h in (hits[0], last)}.values()),
            fix=Fix(
                "Keep prompts inside the window, or widen the window",
                (
                    "Count prompt tokens with the model's tokenizer and trim history / retrieved context.",
                    "vLLM --max-model-len; TGI --max-input-tokens/--max-total-tokens; llama.cpp --ctx-size; "
                    "Ollama num_ctx or OLLAMA_CONTEXT_LENGTH.",
                ),
            ),
            cause=Cause.OVERSIZED_PROMPT,
        )
