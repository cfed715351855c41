"""Prompt token counts of the application's requests, and the model's context window.

Three probes, best source first:

``server_tokens`` asks the server's own tokenizer for a small sample of the
requests (never more than `SAMPLE` requests, whatever the file holds). Shapes,
looked up in each server's source:

- vLLM ``POST /tokenize`` with ``{"model", "messages", "add_generation_prompt"}``
  (chat template applied) or ``{"model", "prompt"}`` → ``{"count", "max_model_len", "tokens"}``
  (vllm-project/vllm ``vllm/entrypoints/serve/tokenize/protocol.py``: TokenizeChatRequest,
  TokenizeCompletionRequest, TokenizeResponse).
- llama.cpp server ``POST /tokenize`` with ``{"content"}`` → ``{"tokens": [...]}``, and
  ``POST /apply-template`` with ``{"messages"}`` → ``{"prompt"}`` for the chat template
  (ggerganov/llama.cpp ``examples/server/README.md``, "POST /tokenize", "POST /apply-template").
- llama-cpp-python ``POST /extras/tokenize`` with ``{"input"}`` → ``{"tokens"}``
  (abetlen/llama-cpp-python ``llama_cpp/server/types.py``: TokenizeInputRequest/Response).
- TGI ``POST /tokenize`` with ``{"inputs"}`` → ``[{"id", "text", "start", "stop"}, ...]``
  (huggingface/text-generation-inference ``router/src/server.rs``: tokenize, SimpleToken).

``context_window`` reads the window from ``/v1/models`` (``max_model_len``, via the
discovery probe) or llama.cpp's ``GET /props`` (``default_generation_settings.n_ctx``).

``prompt_tokens`` (local) counts every request: the server's counts for the sampled
ones, a local Hugging Face tokenizer (``--tokenizer``) for the rest, or an estimate
(characters / 4, or the server sample's characters-per-token ratio) with its band.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from llmdoctor.context import Context, ProbeUnavailable
from llmdoctor.inputs.request_files import RequestFileError, body_texts, iter_bodies
from llmdoctor.inputs.textscan import clean
from llmdoctor.probes.catalog import CONTEXT_WINDOW, DISCOVERY, PREFILL, REQUESTS, SERVER_TOKENS
from llmdoctor.probes.sizes import SERVER_TOKENS_SAMPLE

__all__ = [
    "TokenSample",
    "ServerTokens",
    "ContextWindow",
    "RequestTokens",
    "PromptTokens",
    "server_tokens",
    "context_window",
    "prompt_tokens",
    "estimate_tokens",
    "count_messages",
    "count_with",
    "known_window",
]

SAMPLE = SERVER_TOKENS_SAMPLE
CHARS_PER_TOKEN = 4.0
# The band of the chars/4 estimate: English prose runs ~4-5 characters a token, code and
# non-English text 2-3; CJK text about one character a token (counted separately).
BAND_LOW, BAND_HIGH = 0.8, 1.6
MESSAGE_OVERHEAD = 4
# Compiled on first use (through re's cache): compiling it costs ~4 ms of every start-up.
_CJK = "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]"


@dataclass
class TokenSample:
    """One request counted by the server."""

    index: int
    source: str
    tokens: int
    chars: int
    templated: bool


@dataclass
class ServerTokens:
    """Token counts from the server's own tokenizer, for a sample of the requests."""

    api: str  # "vllm", "llama.cpp", "llama-cpp-python", "tgi"
    path: str
    samples: list[TokenSample] = field(default_factory=list)
    max_model_len: int | None = None

    @property
    def chars_per_token(self) -> float | None:
        """Characters per token over the sample (for extrapolating the rest)."""
        tokens = sum(s.tokens for s in self.samples)
        chars = sum(s.chars for s in self.samples)
        return chars / tokens if tokens and chars else None


@dataclass
class ContextWindow:
    """The model's context window in tokens and where the number came from."""

    tokens: int
    source: str


@dataclass
class RequestTokens:
    """Prompt tokens of one request: the count, its band, and how it was counted."""

    source: str
    tokens: int
    low: int
    high: int
    method: str
    odd_tokens: int | None = None  # tokens spent on odd characters (local tokenizer only)
    tools_tokens: int = 0


@dataclass
class PromptTokens:
    """Prompt tokens of every request, the window, and the best source that was used."""

    method: str  # "server", "tokenizer", "estimate"
    detail: str
    counts: list[RequestTokens] = field(default_factory=list)
    window: int | None = None
    window_source: str = ""
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------------------------
# Estimates
# ----------------------------------------------------------------------------------------------
def estimate_tokens(text_chars: int, cjk_chars: int = 0) -> tuple[int, int, int]:
    """(estimate, low, high) tokens of text with `text_chars` characters, `cjk_chars` of them CJK."""
    other = max(0, text_chars - cjk_chars)
    mid = other / CHARS_PER_TOKEN + cjk_chars
    return round(mid), math.floor(other / CHARS_PER_TOKEN * BAND_LOW + cjk_chars * 0.7), math.ceil(
        other / CHARS_PER_TOKEN * BAND_HIGH + cjk_chars * 1.5
    )


def _body_chars(body: dict[str, Any]) -> tuple[int, int]:
    chars = cjk = 0
    for _, text in body_texts(body):
        chars += len(text)
        if not text.isascii():
            cjk += len(re.findall(_CJK, text))
    return chars, cjk


# ----------------------------------------------------------------------------------------------
# server_tokens
# ----------------------------------------------------------------------------------------------
def _sample_indexes(sizes: list[int]) -> list[int]:
    """The largest request, the median one and the first one (at most SAMPLE, distinct)."""
    order = sorted(range(len(sizes)), key=lambda i: sizes[i])
    picks = [order[-1], order[len(order) // 2], 0]
    out: list[int] = []
    for i in picks:
        if i not in out:
            out.append(i)
    return out[:SAMPLE]


def _plain_text(body: dict[str, Any]) -> str:
    return "\n".join(text for _, text in body_texts(body))


def _count_of(answer: Any) -> tuple[int | None, int | None]:
    """(token count, max_model_len) from any of the known /tokenize answers."""
    if isinstance(answer, dict):
        limit = answer.get("max_model_len")
        limit = limit if isinstance(limit, int) and limit > 0 else None
        if isinstance(answer.get("count"), int):
            return answer["count"], limit
        if isinstance(answer.get("tokens"), list):
            return len(answer["tokens"]), limit
    if isinstance(answer, list) and all(isinstance(t, dict) and "id" in t for t in answer):
        return len(answer), None  # TGI
    return None, None


#: The body key of each tokenizer API's plain-text count.
_TEXT_KEYS = {"vllm": "prompt", "llama.cpp": "content", "tgi": "inputs", "llama-cpp-python": "input"}


class _Api:
    """One server tokenizer API: how to ask it for the count of a body."""

    def __init__(self, name: str, path: str, model: str | None) -> None:
        self.name, self.path, self.key, self.model = name, path, _TEXT_KEYS[name], model

    def counted_by(self, templated: bool) -> str:
        """The API's name and path, as the counts' source says it."""
        return f"{self.name} {self.path}" + (" (chat template)" if templated else "")

    def text_body(self, text: str) -> dict[str, Any]:
        body: dict[str, Any] = {self.key: text}
        if self.name == "vllm" and self.model:
            body["model"] = self.model
        return body


def _try(ctx: Context, path: str, body: dict[str, Any]) -> tuple[int | None, int | None, int | None]:
    timing, answer = ctx.client.post_json(path, body, root=True)
    if not timing.ok:
        return None, None, timing.status
    count, limit = _count_of(answer)
    return count, limit, timing.status


def server_tokens(ctx: Context) -> ServerTokens:
    """Count a sample of the requests with the server's own tokenizer."""
    requests = ctx.get(REQUESTS)
    discovery = ctx.optional(DISCOVERY)
    model = getattr(discovery, "model", None) or (ctx.target.model if ctx.target else None)
    paths = ctx.options.workload.request_files
    sizes = [r.prompt_chars for r in requests.requests]
    wanted = _sample_indexes(sizes)
    bodies: dict[int, tuple[str, dict[str, Any]]] = {}
    try:
        for i, (source, body) in enumerate(iter_bodies(paths)):
            if i in wanted:
                bodies[i] = (source, body)
            if len(bodies) == len(wanted):
                break
    except RequestFileError as exc:
        raise ProbeUnavailable(f"bad request file: {exc}") from None

    first_source, first_body = bodies[wanted[0]]
    api, result = _detect(ctx, model, first_body)
    if api is None or result is None:
        raise ProbeUnavailable(
            "the server offers no tokenizer endpoint (tried vLLM/TGI/llama.cpp POST /tokenize, "
            "llama-cpp-python POST /extras/tokenize)"
        )
    out = ServerTokens(api=api.name, path=api.path, max_model_len=result[1])
    for n, i in enumerate(wanted):
        source, body = bodies[i]
        if n == 0:
            count, templated = result[0], result[2]
        else:
            counted = _count_body(ctx, api, body)
            if counted is None:
                continue
            count, templated = counted
        out.samples.append(TokenSample(i, source, count, sizes[i], templated))
    return out


def _count_body(ctx: Context, api: _Api, body: dict[str, Any]) -> tuple[int, bool] | None:
    if api.name == "vllm" and "messages" in body:
        req: dict[str, Any] = {"messages": body["messages"], "add_generation_prompt": True}
        if api.model:
            req["model"] = api.model
        if body.get("tools"):
            req["tools"] = body["tools"]
        count, _, _ = _try(ctx, api.path, req)
        return None if count is None else (count, True)
    if api.name == "llama.cpp" and "messages" in body:
        timing, answer = ctx.client.post_json("/apply-template", {"messages": body["messages"]}, root=True)
        if timing.ok and isinstance(answer, dict) and isinstance(answer.get("prompt"), str):
            count, _, _ = _try(ctx, api.path, api.text_body(answer["prompt"]))
            return None if count is None else (count, True)
    text = _plain_text(body)
    count, _, _ = _try(ctx, api.path, api.text_body(text))
    if count is None:
        return None
    if "messages" in body:
        count += MESSAGE_OVERHEAD * len(body["messages"])
    return count, False


def _detect(ctx: Context, model: str | None, body: dict[str, Any]) -> tuple[_Api | None, Any]:
    """Find the tokenizer API by asking it to count `body`; ((api), (count, limit, templated))."""
    vllm = _Api("vllm", "/tokenize", model)
    if "messages" in body:
        req: dict[str, Any] = {"messages": body["messages"], "add_generation_prompt": True}
        if model:
            req["model"] = model
        if body.get("tools"):
            req["tools"] = body["tools"]
    else:
        req = vllm.text_body(_plain_text(body))
    timing, answer = ctx.client.post_json("/tokenize", req, root=True)
    if timing.ok and isinstance(answer, dict) and isinstance(answer.get("count"), int):
        _, limit = _count_of(answer)
        return vllm, (answer["count"], limit, "messages" in body)
    if timing.status == 404 or timing.status is None:
        # No /tokenize at all: llama-cpp-python's extras.
        api = _Api("llama-cpp-python", "/extras/tokenize", model)
        counted = _count_body(ctx, api, body) if timing.status == 404 else None
        return (api, (counted[0], None, counted[1])) if counted else (None, None)
    # /tokenize exists but not in vLLM's shape: llama.cpp ({"content"}), then TGI ({"inputs"}).
    for api in (_Api("llama.cpp", "/tokenize", model), _Api("tgi", "/tokenize", model)):
        counted = _count_body(ctx, api, body)
        if counted is not None:
            return api, (counted[0], None, counted[1])
    return None, None


def count_messages(ctx: Context, chats: list[list[dict[str, Any]]], model: str | None) -> tuple[list[int], str] | None:
    """Tokens of each chat request's messages by the server's own tokenizer, and the API that counted them.

    The same detection as `server_tokens` (vLLM first, then llama-cpp-python, llama.cpp, TGI: at most
    4 requests for the first chat, 2 for each further one); None when the server offers none.
    """
    api, result = _detect(ctx, model, {"messages": chats[0]})
    if api is None or result is None or result[0] is None:
        return None
    rest = _count_chats(ctx, api, chats[1:])
    if rest is None:
        return None
    return [int(result[0]), *(count for count, _ in rest)], api.counted_by(result[2])


def count_with(ctx: Context, found: ServerTokens, chats: list[list[dict[str, Any]]], model: str | None,
               ) -> tuple[list[int], str] | None:
    """Tokens of each chat request by the tokenizer API that `server_tokens` found (no detection: one
    request a chat, two for llama.cpp's /apply-template first); None when one count fails."""
    if found.api not in _TEXT_KEYS:
        return None
    api = _Api(found.api, found.path, model)
    counted = _count_chats(ctx, api, chats)
    if counted is None:
        return None
    return [count for count, _ in counted], api.counted_by(all(templated for _, templated in counted))


def _count_chats(ctx: Context, api: _Api, chats: list[list[dict[str, Any]]]) -> list[tuple[int, bool]] | None:
    """(tokens, chat template applied) of each chat by `api`; None when one count fails."""
    counted = []
    for messages in chats:
        one = _count_body(ctx, api, {"messages": messages})
        if one is None:
            return None
        counted.append(one)
    return counted


# ----------------------------------------------------------------------------------------------
# context_window
# ----------------------------------------------------------------------------------------------
def context_window(ctx: Context) -> ContextWindow:
    """The served model's context window: ``/v1/models`` first, then llama.cpp ``/props``."""
    discovery = ctx.optional(DISCOVERY)
    window = getattr(discovery, "context_window", None)
    if isinstance(window, int) and window > 0:
        return ContextWindow(window, "/v1/models max_model_len")
    timing, props = ctx.client.get_json("/props", root=True)
    if timing.ok and isinstance(props, dict):
        settings = props.get("default_generation_settings")
        for where, value in (
            ("/props default_generation_settings.n_ctx", settings.get("n_ctx") if isinstance(settings, dict) else None),
            ("/props n_ctx", props.get("n_ctx")),
        ):
            if isinstance(value, int) and value > 0:
                return ContextWindow(value, where)
    raise ProbeUnavailable("the server does not state its context window (no max_model_len in /v1/models, "
                           "no /props); pass --context-window")


# ----------------------------------------------------------------------------------------------
# prompt_tokens
# ----------------------------------------------------------------------------------------------
def _window(ctx: Context, server: ServerTokens | None) -> tuple[int | None, str]:
    if ctx.options.workload.context_window:
        return ctx.options.workload.context_window, "--context-window"
    if server is not None and server.max_model_len:
        return server.max_model_len, f"{server.path} max_model_len"
    found = ctx.optional(CONTEXT_WINDOW)
    if found is not None:
        return found.tokens, found.source
    return None, ""


def known_window(ctx: Context, counted: PromptTokens | None) -> tuple[int | None, str]:
    """The window the application's requests are judged against, and its source: ``--context-window`` or
    the server's statement (`prompt_tokens`), else the window the server's refusal of our own prefill
    prompt taught (a check calling this declares ``PREFILL``, as `llmdoctor.analysis.costs.TOKEN_COSTS` does)."""
    if ctx.options.workload.context_window:
        return ctx.options.workload.context_window, "--context-window"
    if counted is not None and counted.window:
        return counted.window, counted.window_source
    prefill = ctx.optional(PREFILL)
    if prefill is not None and prefill.window:
        return prefill.window, f"learned from {prefill.window_source}"
    return None, ""


def prompt_tokens(ctx: Context) -> PromptTokens:
    """Count the prompt tokens of every request with the best source available."""
    requests = ctx.get(REQUESTS)
    server = ctx.optional(SERVER_TOKENS)
    window, window_source = _window(ctx, server)
    notes: list[str] = []
    tokenizer = None
    if ctx.options.workload.tokenizer:
        from llmdoctor.probes.local_tokenizer import TokenizerLoadError, load_tokenizer

        try:
            tokenizer = load_tokenizer(ctx.options.workload.tokenizer)
        except TokenizerLoadError as exc:
            notes.append(str(exc))
    sampled = {s.index: s for s in server.samples} if server is not None else {}
    ratio = server.chars_per_token if server is not None else None

    counts: list[RequestTokens] = []
    for i, (source, body) in enumerate(_bodies(ctx)):
        info = requests.requests[i]
        tools_tokens = round(info.params.tools_chars / CHARS_PER_TOKEN)
        if server is not None and i in sampled:
            s = sampled[i]
            how = f"server {server.api} {server.path}" + (" (chat template)" if s.templated else "")
            counts.append(RequestTokens(source, s.tokens, s.tokens, s.tokens, how, tools_tokens=tools_tokens))
            continue
        if tokenizer is not None:
            from llmdoctor.probes.local_tokenizer import count_body, count_text

            n, how = count_body(tokenizer, body)
            odd = None
            if info.odd:
                odd = sum(
                    count_text(tokenizer, text) - count_text(tokenizer, clean(text))
                    for where, text in body_texts(body)
                    if any(r.where == where for r in info.odd)
                )
            counts.append(RequestTokens(source, n, n, n, how, odd_tokens=odd, tools_tokens=tools_tokens))
            continue
        if info.prompt_token_ids is not None:
            n = info.prompt_token_ids
            counts.append(RequestTokens(source, n, n, n, "prompt given as token ids"))
            continue
        chars, cjk = _body_chars(body)
        overhead = MESSAGE_OVERHEAD * len(info.messages) + tools_tokens
        if ratio:
            mid = chars / ratio
            counts.append(
                RequestTokens(source, round(mid) + overhead, math.floor(mid * 0.85) + overhead,
                              math.ceil(mid * 1.15) + overhead,
                              f"server sample ratio ({ratio:.2f} chars/token, ±15%)", tools_tokens=tools_tokens)
            )
        else:
            mid, low, high = estimate_tokens(chars, cjk)
            counts.append(
                RequestTokens(source, mid + overhead, low + overhead, high + overhead,
                              "estimate (chars/4)", tools_tokens=tools_tokens)
            )
    if server is not None and server.samples:
        method = "server"
        detail = f"{server.api} {server.path} for {len(server.samples)} of {len(counts)} requests"
        if len(server.samples) < len(counts):
            rest = "by the local tokenizer" if tokenizer is not None else "by its chars/token ratio"
            detail += f", the rest {rest}"
    elif tokenizer is not None:
        method, detail = "tokenizer", f"local tokenizer {ctx.options.workload.tokenizer}"
    else:
        method, detail = "estimate", "characters / 4 (band ×0.8–×1.6); give --tokenizer or a server with /tokenize"
    return PromptTokens(method, detail, counts, window, window_source, notes)


def _bodies(ctx: Context) -> Iterator[tuple[str, dict[str, Any]]]:
    try:
        yield from iter_bodies(ctx.options.workload.request_files)
    except RequestFileError as exc:
        raise ProbeUnavailable(f"bad request file: {exc}") from None
