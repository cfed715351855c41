"""LD102: the chat message array — roles, order, content, tool calls, duplicates, system prompt."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from llmdoctor.analysis.costs import TOKEN_COSTS, token_costs
from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check, CheckSkipped
from llmdoctor.context import Context
from llmdoctor.findings import Confidence, Evidence, Finding, Fix, Frequency, Severity
from llmdoctor.inputs.request_files import KNOWN_ROLES, RequestInfo
from llmdoctor.probes.catalog import REQUESTS

DUPLICATE_MIN_CHARS = 200
LONG_SYSTEM_CHARS = 8000  # about 2,000 tokens, sent with every request
CHARS_PER_TOKEN = 4.0

# kind: (severity, title, fix)
PROBLEMS: dict[str, tuple[Severity, str, str]] = {
    "no_messages": (Severity.CRITICAL, "Empty message array", "Send at least one user message."),
    "unknown_role": (Severity.WARNING, "Unknown message role", "Use system, user, assistant or tool roles."),
    "bad_content": (Severity.WARNING, "Message content is not a string or parts array",
                    "Send content as a string (or an array of content parts)."),
    "empty_content": (Severity.WARNING, "Empty message content", "Drop empty messages or give them text."),
    "tool_mismatch": (Severity.WARNING, "Tool messages do not match the assistant's tool calls",
                      "Answer every tool call with one tool message whose tool_call_id matches its id."),
    "duplicate": (Severity.WARNING, "Duplicated history: the same long message sent more than once",
                  "Deduplicate the history before sending; keep each turn once."),
    "system_position": (Severity.INFO, "System message not at the start",
                        "Put one system message first; many chat templates drop or reject later ones."),
    "order": (Severity.INFO, "Unusual role order", "Alternate user and assistant turns after the system message."),
    "text_parts": (Severity.INFO, "Text sent as content-part arrays",
                   "Send plain strings for text-only content; some servers and templates reject part arrays."),
    "long_system": (Severity.INFO, "Very long system prompt", "Shorten the system prompt; keep it stable and first "
                    "so the prefix cache can reuse it."),
}
# kind: the cause it reports. Arrays a server rejects are malformed requests; tokens sent for nothing
# lengthen the prefill; an unusual order or part arrays are hygiene (no cause).
CAUSE_OF: dict[str, Cause] = {
    "no_messages": Cause.MALFORMED_REQUEST, "unknown_role": Cause.MALFORMED_REQUEST,
    "bad_content": Cause.MALFORMED_REQUEST, "empty_content": Cause.MALFORMED_REQUEST,
    "tool_mismatch": Cause.MALFORMED_REQUEST, "duplicate": Cause.LONG_PREFILL, "long_system": Cause.LONG_PREFILL,
}


def problems_of(req: RequestInfo) -> dict[str, tuple[int, str]]:
    """The problems of one chat request: kind → (tokens they waste, a detail)."""
    found: dict[str, tuple[int, str]] = {}
    msgs = req.messages
    if not msgs:
        return {"no_messages": (0, "messages is []")}
    for i, m in enumerate(msgs):
        if m.role not in KNOWN_ROLES:
            found.setdefault("unknown_role", (0, f"messages[{i}].role = {m.role}"))
        if m.content_kind not in ("text", "parts", "null", "missing"):
            found.setdefault("bad_content", (0, f"messages[{i}].content is {m.content_kind}"))
        empty = m.chars == 0 and not (m.role == "assistant" and (m.tool_call_ids or m.has_function_call))
        if empty and not (m.part_types and any(t != "text" for t in m.part_types)):
            found.setdefault("empty_content", (0, f"messages[{i}] ({m.role}) has no text"))
        if m.role in ("system", "developer") and any(p.role not in ("system", "developer") for p in msgs[:i]):
            found.setdefault("system_position", (0, f"messages[{i}] is {m.role} after a conversation turn"))
        if m.part_types and all(t == "text" for t in m.part_types):
            found.setdefault("text_parts", (0, f"messages[{i}].content is an array of text parts"))
    turns = [m.role for m in msgs if m.role not in ("system", "developer")]
    if turns and turns[0] == "assistant" or any(a == b == "user" for a, b in zip(turns, turns[1:])):
        found["order"] = (0, " → ".join(turns[:8]) + (" …" if len(turns) > 8 else ""))
    calls = [c for m in msgs for c in m.tool_call_ids]
    answers = [m.tool_call_id for m in msgs if m.role == "tool"]
    if Counter(calls) != Counter(a for a in answers if a is not None) or None in answers:
        missing = sorted(set(calls) - set(answers))[:3]
        stray = sorted({str(a) for a in answers} - set(calls))[:3]
        found["tool_mismatch"] = (0, f"unanswered calls {missing}, tool messages without a call {stray}")
    long_digests = Counter(m.digest for m in msgs if m.chars >= DUPLICATE_MIN_CHARS)
    repeated = {d: n for d, n in long_digests.items() if n > 1}
    if repeated:
        wasted = sum(m.chars for m in msgs if m.digest in repeated) - sum(
            next(m.chars for m in msgs if m.digest == d) for d in repeated
        )
        found["duplicate"] = (round(wasted / CHARS_PER_TOKEN), f"{sum(repeated.values())} copies of "
                              f"{len(repeated)} message(s), {wasted:,} repeated characters")
    if req.system_chars >= LONG_SYSTEM_CHARS:
        found["long_system"] = (round(req.system_chars / CHARS_PER_TOKEN), f"{req.system_chars:,} characters")
    return found


class MessageFormat(Check):
    """Message format: roles, order, content types, tool calls, duplicated history, system prompt size.

    ## What it checks
    Every chat request of the ``--request`` files: roles are known (system,
    developer, user, assistant, tool, function); the system message comes
    first; turns alternate; content is a non-empty string or content-part
    array; every tool call is answered by a tool message with its
    ``tool_call_id``; no long message (200+ characters) appears twice; the
    system prompt is not huge (8,000+ characters, ~2,000 tokens).

    ## Why it adds latency
    Malformed arrays are rejected (a wasted round trip and a retry) or rendered
    oddly by the chat template, so the model rambles. Duplicated history and
    huge system prompts are prompt tokens the server prefills on every request.

    ## Example
    A client bug appends the whole retrieved document to the history on every
    turn: the third request carries three copies, 6,000 tokens of prefill.

    ## Fix
    Build the message array in one place, validate it before sending, keep each
    turn once, and keep the system prompt short, stable and first.

    ## Caveats
    Some servers accept unusual orders (several system messages, consecutive
    user turns); those findings are informational. Wasted tokens are estimated
    at four characters a token.
    """

    id = "LD102"
    name = "message-format"
    title = "Message array format"
    category = Category.INPUT
    requires = (REQUESTS,)
    optional = TOKEN_COSTS

    def run(self, ctx: Context) -> Iterator[Finding]:
        requests = ctx.get(REQUESTS)
        chats = requests.chat
        if not chats:
            raise CheckSkipped("no chat requests (only completions prompts)")
        costs = token_costs(ctx)
        by_kind: dict[str, list[tuple[RequestInfo, int, str]]] = {}
        for req in chats:
            for kind, (tokens, detail) in problems_of(req).items():
                by_kind.setdefault(kind, []).append((req, tokens, detail))
        for kind, (severity, title, fix) in PROBLEMS.items():
            hits = by_kind.get(kind)
            if not hits:
                continue
            tokens = max(t for _, t, _ in hits)
            impact = costs.prefill(tokens) if tokens else None
            where = requests.describe([r for r, _, _ in hits])
            message = f"{where}: {hits[0][2]}."
            if tokens:
                message += f" About {tokens:,} prompt tokens per request" + (
                    f", {impact:,.0f} ms of prefill." if impact is not None else " (prefill cost not measured)."
                )
            yield Finding(
                severity, Confidence.HIGH if kind not in ("order", "long_system") else Confidence.MEDIUM,
                title, message, Fix(fix),
                impact_ms=impact,
                frequency=Frequency.EVERY_REQUEST,
                impact_basis=f"{tokens:,} tokens (chars/4) × {costs.prefill_basis}" if tokens else "",
                evidence=(Evidence("requests affected", len(hits), "", "--request"),
                          Evidence("first", hits[0][0].source, "", hits[0][2])),
                cause=CAUSE_OF.get(kind),
            )
