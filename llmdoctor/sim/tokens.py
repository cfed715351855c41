"""A deterministic toy tokenizer and text generator for the simulator.

Not a real BPE tokenizer: a token is a run of word characters or one punctuation
character (`re.findall(r"\\w+|[^\\w\\s]", text)`). It is stable, cheap, and good
enough for the simulator to charge prefill time in proportion to prompt size and
to answer `/tokenize` consistently with the `usage` it reports.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "MESSAGE_OVERHEAD_TOKENS",
    "tokenize",
    "count_tokens",
    "message_text",
    "count_chat_tokens",
    "token_id",
    "token_ids",
    "chat_token_ids",
    "prompt_text",
    "generated_tokens",
    "reasoning_tokens",
]

#: Template overhead charged per chat message (role markers, separators).
MESSAGE_OVERHEAD_TOKENS = 4

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")

# Ids of the per-message template tokens (think <|im_start|>, role, <|im_sep|>, <|im_end|>).
_TEMPLATE_IDS = (1, 2, 3, 4)
_FIRST_REGULAR_ID = 256
_VOCAB_SIZE = 32000

# The simulated model's vocabulary: every entry is exactly one token.
_ANSWER_WORDS = (
    "the",
    "answer",
    "is",
    "short",
    "and",
    "the",
    "model",
    "is",
    "warm",
    "so",
    "each",
    "token",
    "costs",
    "a",
    "few",
    "milliseconds",
    "while",
    "the",
    "floor",
    "stays",
)
_REASONING_WORDS = ("let", "me", "think", "about", "this", "carefully", "first")


def tokenize(text: str) -> list[str]:
    """Split `text` into tokens: runs of word characters, or single punctuation marks."""
    return _TOKEN_RE.findall(text)


def count_tokens(text: str) -> int:
    """Number of tokens in `text`."""
    return len(tokenize(text))


def message_text(content: Any) -> str:
    """Text of a chat message `content`: a string, or a list of OpenAI content parts.

    Only `{"type": "text", "text": ...}` parts carry text; other parts (images, audio)
    count as nothing. `None` (assistant tool-call messages) is the empty string.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") == "text"]
        return " ".join(t for t in texts if isinstance(t, str))
    return str(content)


def count_chat_tokens(messages: Iterable[Mapping[str, Any]]) -> int:
    """Prompt tokens of a chat: the tokens of every message plus the template overhead."""
    return sum(count_tokens(message_text(m.get("content"))) + MESSAGE_OVERHEAD_TOKENS for m in messages)


def token_id(token: str) -> int:
    """A stable integer id for one token string (a hash into a 32k vocabulary)."""
    return _FIRST_REGULAR_ID + zlib.crc32(token.encode("utf-8")) % (_VOCAB_SIZE - _FIRST_REGULAR_ID)


def token_ids(text: str) -> list[int]:
    """Token ids of a plain text prompt."""
    return [token_id(t) for t in tokenize(text)]


def chat_token_ids(messages: Iterable[Mapping[str, Any]]) -> list[int]:
    """Token ids of a chat prompt, template tokens included (length = `count_chat_tokens`)."""
    ids: list[int] = []
    for message in messages:
        start, role, sep, end = _TEMPLATE_IDS
        ids.extend((start, role, sep))
        ids.extend(token_ids(message_text(message.get("content"))))
        ids.append(end)
    return ids


def prompt_text(prompt: Any) -> tuple[str, int | None]:
    """Normalize a completions `prompt` to text, or to a token count for token-id prompts.

    Returns `(text, None)` for a string or a list of strings (joined), and
    `("", n)` for a list of token ids (one prompt) or a list of such lists.
    """
    if isinstance(prompt, str):
        return prompt, None
    if isinstance(prompt, list):
        if all(isinstance(p, str) for p in prompt):
            return "\n".join(prompt), None
        if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            return "", len(prompt)
        if all(isinstance(p, list) for p in prompt):
            return "", sum(len(p) for p in prompt)
    raise ValueError("prompt must be a string, a list of strings, or a list of token ids")


def generated_tokens(n: int) -> list[str]:
    """The `n` answer tokens, as they are streamed: "ok", then " word" pieces from a fixed list."""
    words = ["ok"] + [" " + _ANSWER_WORDS[i % len(_ANSWER_WORDS)] for i in range(max(n - 1, 0))]
    return words[:n]


def reasoning_tokens(n: int) -> list[str]:
    """The `n` reasoning tokens streamed as `delta.reasoning_content` before the answer."""
    return [("" if i == 0 else " ") + _REASONING_WORDS[i % len(_REASONING_WORDS)] for i in range(n)]
