"""Reading the application's request bodies (``--request FILE``) into a normalised form.

A request file is one JSON request body (chat ``{"messages": [...]}`` or
completions ``{"prompt": ...}``), a JSON array of bodies, or JSONL with one body
a line (logs exported from a gateway; OpenAI batch-file lines
``{"custom_id", "url", "body": {...}}`` are unwrapped). ``-`` reads standard input
(once per process, into a temporary file, so a second reader sees the same bodies; a
FIFO likewise).

The files are streamed: one body at a time is decoded and normalised, so memory follows
what is kept (`RequestInfo`), not the file. Reading is bounded (`llmdoctor.inputs.bounded`): a
file up to `MAX_FILE_BYTES`, a body up to `MAX_BODY_CHARS`, JSON nested up to
``MAX_JSON_DEPTH`` levels, a pipe that goes silent, and the run's ``--deadline``.

Anything that is not a request raises `RequestFileError` with one line naming
the file, the line and what is wrong; the CLI turns it into exit code 3. Problems
*within* a valid request (unknown roles, empty content, odd characters) are not
errors here: the input checks report them.

The normalised `RequestInfo` keeps sizes, kinds, hashes and parameters, never
the texts, so a file of thousands of logged requests stays small in memory and
in saved measurements.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import itertools
import json
import os
import re
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from llmdoctor.deadline import Deadline
from llmdoctor.inputs.bounded import MAX_JSON_DEPTH, MIB, InputError, json_too_deep, load_json, open_input, size_text
from llmdoctor.inputs.textscan import OddRun, scan

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
#: The largest request file read (a month of gateway logs is smaller; a device never ends).
MAX_FILE_BYTES = 1 << 30
#: The largest single request body (a line of JSONL, or one value): multimodal payloads included.
MAX_BODY_CHARS = 64 * MIB
_CHUNK_CHARS = 1 << 16
_DECODER = json.JSONDecoder()
_spool_lock = threading.Lock()
_spooled: dict[str, str] = {}
_cache_lock = threading.Lock()
_cache: tuple[tuple[Any, ...], list[RequestInfo]] | None = None


def _spool(path: str, deadline: Deadline | None) -> str:
    """A file holding what standard input or a pipe sent: read once (bounded), then read like a file.

    Standard input and a FIFO can be read once only, and the requests are read more than once
    (checked first, then measured, then counted), so their bytes go to a temporary file.
    """
    with _spool_lock:
        if path in _spooled:
            return _spooled[path]
        fd, spool = tempfile.mkstemp(prefix="llmdoctor-request-", suffix=".json")
        atexit.register(_remove, spool)
        try:
            with open_input(path, "--request", limit=MAX_FILE_BYTES, deadline=deadline) as source, \
                    os.fdopen(fd, "wb") as sink:
                shutil.copyfileobj(source, sink, 1 << 16)
        except BaseException:
            _remove(spool)
            raise
        _spooled[path] = spool
        return spool


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _read_once(path: str) -> bool:
    """Whether `path` can be read only once: standard input, a pipe or a FIFO."""
    if path == "-":
        return True
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


@contextlib.contextmanager
def _open_text(path: str, deadline: Deadline | None) -> Iterator[tuple[str, TextIO]]:
    """(display name, text stream) of a request file, bounded (`llmdoctor.inputs.bounded.open_input`)."""
    name = "<stdin>" if path == "-" else path
    try:
        source = _spool(path, deadline) if _read_once(path) else path
        stream = open_input(source, "--request", limit=MAX_FILE_BYTES, deadline=deadline)
    except InputError as exc:
        raise RequestFileError(str(exc)) from None
    # Invalid UTF-8 becomes U+FFFD, which the odd-character check then reports.
    text = io.TextIOWrapper(io.BufferedReader(stream, 1 << 16), encoding="utf-8", errors="replace")
    try:
        yield name, text
    except InputError as exc:
        raise RequestFileError(str(exc)) from None
    finally:
        text.close()


class _Values:
    """The JSON values of a text stream, one after the other, decoded from a sliding buffer.

    Memory holds one value at a time (and its text), never the whole file; a value that does
    not fit in the buffer yet makes it grow (doubling), up to `MAX_BODY_CHARS`.
    """

    def __init__(self, name: str, text: TextIO) -> None:
        self.name = name
        self._text = text
        self._buf = ""
        self._pos = 0
        self.line = 1  # the line of self._buf[self._pos]
        self._eof = False
        self._first = True

    def _fill(self, size: int = _CHUNK_CHARS) -> None:
        data = self._text.read(size)
        if self._first:
            data, self._first = data.removeprefix("\ufeff"), False
        if not data:
            self._eof = True
            return
        self._buf = self._buf[self._pos:] + data
        self._pos = 0

    def peek(self) -> str | None:
        """The next character that is not whitespace (None at the end), skipping to it."""
        while True:
            buf, pos = self._buf, self._pos
            while pos < len(buf) and buf[pos] in " \t\r\n":
                pos += 1
            self.line += buf.count("\n", self._pos, pos)
            self._pos = pos
            if pos < len(buf):
                return buf[pos]
            if self._eof:
                return None
            self._fill()

    def take(self, char: str) -> None:
        """Step over `char`, which `peek` returned."""
        self._pos += len(char)

    def value(self) -> Any:
        """Decode the value that starts at the next character (`peek` first)."""
        size = _CHUNK_CHARS
        while True:
            try:
                value, end = _DECODER.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as exc:
                if self._eof:
                    line = self.line + self._buf.count("\n", self._pos, exc.pos)
                    raise RequestFileError(f"{self.name}:{line}: invalid JSON: {exc.msg} (column {exc.colno})") \
                        from None
                if len(self._buf) - self._pos > MAX_BODY_CHARS:
                    raise RequestFileError(f"{self.name}:{self.line}: a request larger than "
                                           f"{size_text(MAX_BODY_CHARS)}, the most llmdoctor reads") from None
                self._fill(size)
                size *= 2
                continue
            except RecursionError:
                raise RequestFileError(f"{self.name}:{self.line}: JSON nested deeper than {MAX_JSON_DEPTH} levels") \
                    from None
            except ValueError as exc:  # an integer of more than 4,300 digits
                raise RequestFileError(f"{self.name}:{self.line}: {str(exc).split(':')[0]}") from None
            if json_too_deep(value):
                raise RequestFileError(f"{self.name}:{self.line}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
            self.line += self._buf.count("\n", self._pos, end)
            self._pos = end
            if self._pos > (1 << 20):  # drop what was decoded, now and then (not after every small value)
                self._buf, self._pos = self._buf[self._pos:], 0
            return value


def _json_values(name: str, text: TextIO) -> Iterator[tuple[str, Any]]:
    """One JSON body, a JSON array of bodies, or several bodies one after the other (JSONL)."""
    values = _Values(name, text)
    first = values.peek()
    if first is None:
        raise RequestFileError(f"{name}: empty file: expected a JSON request body or JSONL of bodies")
    if first == "[":
        values.take("[")
        index = 0
        while True:
            char = values.peek()
            if char == "]" and index == 0:
                values.take("]")
                break
            if index > 0:
                if char == "]":
                    values.take("]")
                    break
                if char != ",":
                    raise RequestFileError(f"{name}:{values.line}: invalid JSON: Expecting ',' delimiter")
                values.take(",")
                values.peek()
            yield f"{name}:[{index}]", values.value()
            index += 1
        if values.peek() is not None:
            raise RequestFileError(f"{name}:{values.line}: invalid JSON: Extra data after the array")
        return
    while values.peek() is not None:
        line = values.line
        yield f"{name}:{line}", values.value()


def _json_lines(name: str, text: TextIO) -> Iterator[tuple[str, Any]]:
    """JSONL: one body a line (``.jsonl``, ``.ndjson``)."""
    seen = False
    for number in itertools.count(1):
        line = text.readline(MAX_BODY_CHARS + 1)
        if not line:
            break
        if number == 1:
            line = line.removeprefix("\ufeff")
        if len(line) > MAX_BODY_CHARS:
            raise RequestFileError(f"{name}:{number}: a line longer than {size_text(MAX_BODY_CHARS)}, "
                                   "the most llmdoctor reads")
        if not line.strip():
            continue
        seen = True
        try:
            yield f"{name}:{number}", load_json(line, f"{name}:{number}")
        except json.JSONDecodeError as exc:
            raise RequestFileError(
                f"{name}:{number}: invalid JSON on this line: {exc.msg} (column {exc.colno})"
            ) from None
        except InputError as exc:
            raise RequestFileError(str(exc)) from None
    if not seen:
        raise RequestFileError(f"{name}: empty file: expected a JSON request body or JSONL of bodies")


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


def iter_bodies(paths: Iterable[str], *, deadline: Deadline | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(source, body)`` for every request in `paths`, validated, one at a time (streamed).

    Raises `RequestFileError` on the first file or line that is not a request (or that crosses a
    size or depth bound), `DeadlineExceeded` when `deadline` passes while reading.
    """
    for path in paths:
        with _open_text(path, deadline) as (name, text):
            jsonl = name.endswith((".jsonl", ".ndjson"))
            for source, value in (_json_lines if jsonl else _json_values)(name, text):
                yield source, _validated(source, value)


def _signature(paths: Iterable[str]) -> tuple[Any, ...]:
    """What identifies the content of `paths` for the cache: each file's identity, size and time."""
    out: list[Any] = []
    for path in paths:
        try:
            st = os.stat(_spooled.get(path, path))
        except OSError:
            return ()
        out.append((path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def load_requests(paths: Iterable[str], *, deadline: Deadline | None = None) -> list[RequestInfo]:
    """Read and normalise every request in `paths` (the CLI calls this to validate early).

    The last result is kept: the run reads the same files again (checked first, then measured)
    and gets the same list without reading them twice.
    """
    global _cache
    paths = list(paths)
    key = _signature(paths)
    with _cache_lock:
        if key and _cache is not None and _cache[0] == key:
            return _cache[1]
    requests = [normalise(body, source) for source, body in iter_bodies(paths, deadline=deadline)]
    key = _signature(paths)  # after reading: standard input is spooled by now
    with _cache_lock:
        _cache = (key, requests) if key else None
    return requests


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
