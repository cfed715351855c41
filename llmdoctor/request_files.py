"""Reading the application's request bodies (``--request FILE``) into a normalised form.

A request file is one JSON request body (chat ``{"messages": [...]}`` or
completions ``{"prompt": ...}``), a JSON array of bodies, or JSONL with one body
a line (logs exported from a gateway; OpenAI batch-file lines
``{"custom_id", "url", "body": {...}}`` are unwrapped). ``-`` reads standard input
(once per process; the text is kept so a second reader sees the same bodies).

Anything that is not a request raises `RequestFileError` with one line naming
the file, the line and what is wrong; the CLI turns it into exit code 3. Problems
*within* a valid request (unknown roles, empty content, odd characters) are not
errors here: the input checks report them.

The normalised `RequestInfo` keeps sizes, kinds, hashes and parameters, never
the texts, so a file of thousands of logged requests stays small in memory and
in saved measurements.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmdoctor.textscan import OddRun, scan

__all__ = [
    "RequestFileError",
    "MessageInfo",
    "RequestParams",
    "RequestInfo",
    "iter_bodies",
    "normalise",
    "load_requests",
    "body_texts",
    "KNOWN_ROLES",
]

KNOWN_ROLES = ("system", "developer", "user", "assistant", "tool", "function")

# Instructions that ask for a very short answer (for the stop-sequence check).
_SHORT_ANSWER = re.compile(
    r"\b(?:(?:answer|reply|respond)(?: only)?(?: with)? (?:only |just )?(?:yes or no|true or false|"
    r"a single \w+|one word|a number|the number|the label|the letter)|one[- ]word answer|"
    r"single (?:word|number|letter|label|token)|(?:return|output|give) only the|"
    r"classify (?:the|this|as)|just the (?:answer|number|label|letter))\b",
    re.IGNORECASE,
)

_stdin_text: str | None = None


class RequestFileError(ValueError):
    """A request file cannot be used; the message is one line with file:line."""


@dataclass
class MessageInfo:
    """One chat message, without its text: role, content shape, size and a hash."""

    role: str
    content_kind: str  # "text", "parts", "null", "missing", or the JSON type name of anything else
    chars: int = 0
    part_types: list[str] = field(default_factory=list)
    digest: str = ""
    tool_call_ids: list[str] = field(default_factory=list)
    tool_call_id: str | None = None
    has_function_call: bool = False


@dataclass
class RequestParams:
    """The generation parameters of a request that change its latency."""

    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stream: bool | None = None
    include_usage: bool | None = None
    n: int | None = None
    best_of: int | None = None
    logprobs: bool | int | None = None
    top_logprobs: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: list[str] = field(default_factory=list)
    tools: int = 0
    tools_chars: int = 0
    functions: int = 0
    reasoning_effort: str | None = None
    thinking: bool | None = None
    penalties: list[str] = field(default_factory=list)
    response_format: str | None = None

    @property
    def output_cap(self) -> int | None:
        """The effective cap on generated tokens (``max_completion_tokens`` wins)."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    @property
    def choices(self) -> int:
        """Sequences generated per request (the larger of ``n`` and ``best_of``)."""
        return max(self.n or 1, self.best_of or 1)


@dataclass
class RequestInfo:
    """One request body, normalised: kind, messages, sizes, parameters, odd characters."""

    source: str
    kind: str  # "chat" or "completion"
    model: str | None = None
    messages: list[MessageInfo] = field(default_factory=list)
    prompt_chars: int = 0
    prompt_token_ids: int | None = None  # a completions prompt given as token ids: its exact length
    system_chars: int = 0
    user_chars: int = 0
    params: RequestParams = field(default_factory=RequestParams)
    odd: list[OddRun] = field(default_factory=list)
    short_answer_hint: bool = False


# ----------------------------------------------------------------------------------------------
# Reading files
# ----------------------------------------------------------------------------------------------
def _read(path: str) -> tuple[str, str]:
    """Return (display name, text) of `path` (``-`` is standard input, read once)."""
    global _stdin_text
    if path == "-":
        if _stdin_text is None:
            _stdin_text = sys.stdin.read()
        return "<stdin>", _stdin_text
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise RequestFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise RequestFileError(f"{path}: is a directory, not a request file") from None
    except OSError as exc:
        raise RequestFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    # Invalid UTF-8 becomes U+FFFD, which the odd-character check then reports.
    return path, data.decode("utf-8", errors="replace").removeprefix("\ufeff")


def _json_error(name: str, text: str, exc: json.JSONDecodeError, line_offset: int = 0) -> RequestFileError:
    line = exc.lineno + line_offset
    return RequestFileError(f"{name}:{line}: invalid JSON: {exc.msg} (column {exc.colno})")


def _bodies_of(name: str, text: str) -> Iterator[tuple[str, Any]]:
    stripped = text.strip()
    if not stripped:
        raise RequestFileError(f"{name}: empty file: expected a JSON request body or JSONL of bodies")
    jsonl = name.endswith((".jsonl", ".ndjson"))
    if not jsonl:
        try:
            whole = json.loads(stripped)
        except json.JSONDecodeError as exc:
            if exc.msg != "Extra data":
                lead = len(text) - len(text.lstrip())
                raise _json_error(name, text, exc, text[:lead].count("\n")) from None
            jsonl = True  # several JSON values, one a line
        else:
            first_line = text[: len(text) - len(text.lstrip())].count("\n") + 1
            if isinstance(whole, list):
                for i, item in enumerate(whole):
                    yield f"{name}:[{i}]", item
            else:
                yield f"{name}:{first_line}", whole
            return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield f"{name}:{number}", json.loads(line)
        except json.JSONDecodeError as exc:
            raise RequestFileError(
                f"{name}:{number}: invalid JSON on this line: {exc.msg} (column {exc.colno})"
            ) from None


def _validated(source: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RequestFileError(f"{source}: not a request body: expected a JSON object, got {_type(value)}")
    body = value
    inner = body.get("body")
    if isinstance(inner, dict) and ("messages" in inner or "prompt" in inner) and "messages" not in body:
        body = inner  # an OpenAI batch-file line
    if "messages" in body:
        messages = body["messages"]
        if not isinstance(messages, list):
            raise RequestFileError(f"{source}: \"messages\" must be an array, got {_type(messages)}")
        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                raise RequestFileError(
                    f"{source}: messages[{i}] must be an object with \"role\" and \"content\", got {_type(message)}"
                )
        return body
    if "prompt" in body:
        prompt = body["prompt"]
        if not _is_prompt(prompt):
            raise RequestFileError(
                f"{source}: \"prompt\" must be a string, a list of strings or a list of token ids, "
                f"got {_type(prompt)}"
            )
        return body
    keys = ", ".join(sorted(body)[:6]) or "no keys"
    raise RequestFileError(
        f"{source}: not a chat or completions request: no \"messages\" or \"prompt\" (has {keys})"
    )


def _is_prompt(prompt: Any) -> bool:
    if isinstance(prompt, str):
        return True
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return True
        if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            return True
        return all(isinstance(p, list) and all(isinstance(t, int) for t in p) for p in prompt)
    return False


def _type(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
    )


def iter_bodies(paths: Iterable[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(source, body)`` for every request in `paths`, validated, one at a time.

    Raises `RequestFileError` on the first file or line that is not a request.
    """
    for path in paths:
        name, text = _read(path)
        for source, value in _bodies_of(name, text):
            yield source, _validated(source, value)


def load_requests(paths: Iterable[str]) -> list[RequestInfo]:
    """Read and normalise every request in `paths` (the CLI calls this to validate early)."""
    return [normalise(body, source) for source, body in iter_bodies(paths)]


# ----------------------------------------------------------------------------------------------
# Normalising one body
# ----------------------------------------------------------------------------------------------
def body_texts(body: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """Every prompt text of a body with where it is (``messages[2].content[0]``, ``prompt``)."""
    if "messages" in body:
        for i, message in enumerate(body["messages"]):
            content = message.get("content")
            if isinstance(content, str):
                yield f"messages[{i}].content", content
            elif isinstance(content, list):
                for j, part in enumerate(content):
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        yield f"messages[{i}].content[{j}]", part["text"]
                    elif isinstance(part, str):
                        yield f"messages[{i}].content[{j}]", part
    else:
        prompt = body["prompt"]
        if isinstance(prompt, str):
            yield "prompt", prompt
        elif isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
            for i, p in enumerate(prompt):
                yield f"prompt[{i}]", p


def _message_info(message: dict[str, Any]) -> MessageInfo:
    role = message.get("role")
    info = MessageInfo(role=role if isinstance(role, str) else repr(role), content_kind="missing")
    content = message.get("content", ...)
    text = ""
    if content is ...:
        info.content_kind = "missing"
    elif content is None:
        info.content_kind = "null"
    elif isinstance(content, str):
        info.content_kind, text = "text", content
    elif isinstance(content, list):
        info.content_kind = "parts"
        texts = []
        for part in content:
            if isinstance(part, dict):
                info.part_types.append(str(part.get("type", "?")))
                if isinstance(part.get("text"), str):
                    texts.append(part["text"])
            else:
                info.part_types.append(_type(part))
        text = "".join(texts)
    else:
        info.content_kind = type(content).__name__
    info.chars = len(text)
    if text:
        import hashlib  # here, not at the top: OpenSSL's hashlib costs start-up time

        info.digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        info.tool_call_ids = [str(c.get("id")) for c in calls if isinstance(c, dict)]
    if message.get("tool_call_id") is not None:
        info.tool_call_id = str(message.get("tool_call_id"))
    info.has_function_call = isinstance(message.get("function_call"), dict)
    return info


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _params(body: dict[str, Any]) -> RequestParams:
    p = RequestParams(
        max_tokens=_int(body.get("max_tokens", body.get("max_new_tokens"))),
        max_completion_tokens=_int(body.get("max_completion_tokens")),
        stream=body["stream"] if isinstance(body.get("stream"), bool) else None,
        n=_int(body.get("n")),
        best_of=_int(body.get("best_of")),
        top_logprobs=_int(body.get("top_logprobs")),
        temperature=_num(body.get("temperature")),
        top_p=_num(body.get("top_p")),
        top_k=_int(body.get("top_k")),
    )
    options = body.get("stream_options")
    if isinstance(options, dict) and isinstance(options.get("include_usage"), bool):
        p.include_usage = options["include_usage"]
    logprobs = body.get("logprobs")
    if isinstance(logprobs, (bool, int)):
        p.logprobs = logprobs
    stop = body.get("stop")
    if isinstance(stop, str):
        p.stop = [stop]
    elif isinstance(stop, list):
        p.stop = [s for s in stop if isinstance(s, str)]
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        p.tools = len(tools)
        p.tools_chars = len(json.dumps(tools, ensure_ascii=False))
    functions = body.get("functions")
    if isinstance(functions, list) and functions:
        p.functions = len(functions)
        p.tools_chars += len(json.dumps(functions, ensure_ascii=False))
    effort = body.get("reasoning_effort")
    reasoning = body.get("reasoning")
    if effort is None and isinstance(reasoning, dict):
        effort = reasoning.get("effort")
    p.reasoning_effort = effort if isinstance(effort, str) else None
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, dict):
        for key in ("enable_thinking", "thinking"):
            if isinstance(kwargs.get(key), bool):
                p.thinking = kwargs[key]
        if p.reasoning_effort is None and isinstance(kwargs.get("reasoning_effort"), str):
            p.reasoning_effort = kwargs["reasoning_effort"]
    thinking = body.get("thinking")
    if isinstance(thinking, dict):  # Anthropic-style {"type": "enabled", "budget_tokens": N}
        p.thinking = thinking.get("type") == "enabled"
    for key in ("frequency_penalty", "presence_penalty", "repetition_penalty"):
        value = _num(body.get(key))
        if value is not None and value != (1.0 if key == "repetition_penalty" else 0.0):
            p.penalties.append(key)
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and isinstance(fmt.get("type"), str):
        p.response_format = fmt["type"]
    return p


def normalise(body: dict[str, Any], source: str) -> RequestInfo:
    """The `RequestInfo` of a validated body (texts are scanned, then dropped)."""
    chat = "messages" in body
    info = RequestInfo(source=source, kind="chat" if chat else "completion")
    info.model = body.get("model") if isinstance(body.get("model"), str) else None
    info.params = _params(body)
    for where, text in body_texts(body):
        info.prompt_chars += len(text)
        info.odd.extend(scan(text, where))
    last_user = ""
    if chat:
        info.messages = [_message_info(m) for m in body["messages"]]
        for message, raw in zip(info.messages, body["messages"]):
            if message.role in ("system", "developer"):
                info.system_chars += message.chars
            elif message.role == "user":
                info.user_chars += message.chars
                content = raw.get("content")
                last_user = content if isinstance(content, str) else ""
        system = [raw.get("content") for raw in body["messages"] if raw.get("role") in ("system", "developer")]
        hint_text = " ".join(s for s in system if isinstance(s, str))[-1000:] + " " + last_user[-600:]
    else:
        prompt = body["prompt"]
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
            info.prompt_token_ids = len(prompt)
        elif isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
            info.prompt_token_ids = max(len(p) for p in prompt)
        info.user_chars = info.prompt_chars
        hint_text = prompt[-600:] if isinstance(prompt, str) else ""
    info.short_answer_hint = bool(_SHORT_ANSWER.search(hint_text))
    return info
