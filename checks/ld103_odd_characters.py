"""LD103: odd characters and pasted data in prompts, and the tokens they waste."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.analysis.costs import TOKEN_COSTS, token_costs
from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check, Reads
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.inputs.textscan import ODD_KINDS
from llmdoctor.options import Options
from llmdoctor.probes.catalog import PROMPT_TOKENS, REQUESTS

# Pasted data: many tokens, little meaning. Invisible or broken characters: garbage the model reads.
BULK_KINDS = ("data_uri", "base64", "json_blob", "whitespace_run", "repeated_run")
BULK_WARN_CHARS = 2000


class OddCharacters(Check):
    """Odd characters: control and invisible characters, broken Unicode, pasted blobs in prompts.

    ## What it checks
    Scans every prompt text of the ``--request`` files for control characters,
    zero-width and bidirectional marks, lone UTF-16 surrogates, U+FFFD
    replacement characters, mojibake (UTF-8 decoded as Latin-1, such as ``Ã©``
    or ``â€™``), runs of 32+ spaces or 8+ blank lines, runs of one repeated
    character, embedded ``data:`` URIs and base64 blobs (200+ characters), and
    large JSON blobs pasted into the text. With a tokenizer (``--tokenizer``) it
    counts the tokens they cost: the text before minus the text cleaned.

    ## Why it adds latency
    Tokenizers split unusual characters into many tokens: a base64 image pasted
    as text costs one token per 2–3 characters, whitespace runs and invisible
    marks add tokens that carry nothing. Every token is prefill time, and
    garbage in the prompt makes answers longer and worse.

    ## Example
    A screenshot pasted into a support ticket as a 60 KB data URI: about
    25,000 prompt tokens of noise in front of a one-line question.

    ## Fix
    Normalise text before sending (NFC, strip control and zero-width
    characters, collapse whitespace), fix the encoding at its source (read
    files as UTF-8), and send images as image content parts, not text.

    ## Caveats
    Zero-width joiners are legitimate inside emoji sequences and some scripts;
    JSON can be the task itself. Without a tokenizer the token cost is not
    given, only the characters.
    """

    id = "LD103"
    name = "odd-characters"
    title = "Odd characters and pasted blobs in prompts"
    category = Category.INPUT
    requires = (REQUESTS,)
    optional = (PROMPT_TOKENS, *TOKEN_COSTS)

    @classmethod
    def reads(cls, options: Options) -> Reads:
        """The token counts only with a local tokenizer (``--tokenizer``): estimates say nothing here."""
        if options.workload.tokenizer:
            return Reads(cls.requires, cls.optional)
        optional = tuple(p for p in cls.optional if p is not PROMPT_TOKENS)
        return Reads(cls.requires, optional)

    def run(self, ctx: Context) -> Iterator[Finding]:
        requests = ctx.get(REQUESTS)
        affected = [(i, r) for i, r in enumerate(requests.requests) if r.odd]
        if not affected:
            return
        counted = ctx.optional(PROMPT_TOKENS) if ctx.options.workload.tokenizer else None
        costs = token_costs(ctx)
        kinds: dict[str, list[int]] = {}  # kind -> [count, chars, requests]
        samples: dict[str, str] = {}
        for _, req in affected:
            for run in req.odd:
                agg = kinds.setdefault(run.kind, [0, 0, 0])
                agg[0] += run.count
                agg[1] += run.chars
                samples.setdefault(run.kind, f"{req.source} {run.where}: {run.sample}")
            for kind in {run.kind for run in req.odd}:
                kinds[kind][2] += 1
        odd_tokens = None
        if counted is not None:
            per_request = [c.odd_tokens for c in counted.counts if c.odd_tokens is not None]
            odd_tokens = max(per_request) if per_request else None
        bulk_chars = max(sum(run.chars for run in r.odd if run.kind in BULK_KINDS) for _, r in affected)
        broken = [k for k in kinds if k not in BULK_KINDS]
        severity = Severity.WARNING if bulk_chars >= BULK_WARN_CHARS or (odd_tokens or 0) >= 500 else Severity.INFO
        order = [k for k in ODD_KINDS if k in kinds]
        summary = "; ".join(f"{ODD_KINDS[k]}: {kinds[k][0]} in {kinds[k][2]} request(s)" for k in order)
        impact = costs.prefill(odd_tokens) if odd_tokens else None
        if odd_tokens is not None:
            cost = f" They cost up to {odd_tokens:,} prompt tokens in one request (tokenizer, before vs cleaned)"
            cost += f", about {impact:,.0f} ms of prefill." if impact is not None else "."
            basis = f"{odd_tokens:,} tokens × {costs.prefill_basis}"
        else:
            cost = " Token cost not counted (give --tokenizer to count it)."
            basis = "not estimated: no tokenizer to count the tokens these characters take"
        evidence = [Evidence(ODD_KINDS[k], kinds[k][1], "chars", samples[k], sensitive=True) for k in order]
        if odd_tokens is not None:
            evidence.append(Evidence("tokens spent on them (worst request)", odd_tokens, "tokens", "--tokenizer"))
        yield Finding(
            severity,
            Confidence.HIGH if broken and not set(kinds) & {"json_blob"} else Confidence.MEDIUM,
            f"Odd characters in {len(affected)} of {len(requests.requests)} prompts: "
            + ", ".join(ODD_KINDS[k].split(" (")[0] for k in order[:3]) + ("…" if len(order) > 3 else ""),
            f"{summary}.{cost}",
            Fix(
                "Clean prompt text before sending it.",
                (
                    "Normalise Unicode (NFC) and strip control, zero-width and bidi characters.",
                    "Decode input files as UTF-8 at the source to stop mojibake.",
                    "Collapse whitespace runs; send images as image parts, not base64 text; "
                    "summarise pasted JSON instead of including it whole.",
                ),
            ),
            impact_ms=impact,
            frequency=Frequency.EVERY_REQUEST,
            impact_basis=basis,
            evidence=tuple(evidence),
            cause=Cause.LONG_PREFILL,
        )
