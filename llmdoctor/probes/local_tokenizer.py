"""A local Hugging Face tokenizer (``--tokenizer PATH``), loaded offline.

`transformers` is imported inside `load_tokenizer` only (it takes a second or
more), and the load never touches the network: ``local_files_only=True`` and
``HF_HUB_OFFLINE=1`` for the duration of the call. A path that is not there, or
a model id not in the local cache, is a plain-words error, never a download.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["TokenizerLoadError", "load_tokenizer", "count_body", "count_text"]

# Template overhead assumed per chat message when the tokenizer has no chat template.
MESSAGE_OVERHEAD_TOKENS = 4


class TokenizerLoadError(RuntimeError):
    """The tokenizer could not be loaded offline (the message says why, in one line)."""


@contextmanager
def _offline() -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TRANSFORMERS_VERBOSITY")}
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_VERBOSITY"] = "error"
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def load_tokenizer(name_or_path: str) -> Any:
    """Load a tokenizer from a local directory or the local Hugging Face cache, offline."""
    with _offline():
        try:
            import transformers
            from transformers.utils import logging as hf_logging
        except ImportError as exc:  # pragma: no cover - transformers is a dependency
            raise TokenizerLoadError(f"transformers is not installed: {exc}") from None
        hf_logging.set_verbosity_error()
        try:
            return transformers.AutoTokenizer.from_pretrained(name_or_path, local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - transformers raises many kinds
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise TokenizerLoadError(
                f"cannot load tokenizer {name_or_path!r} offline (a local directory or a model in the "
                f"Hugging Face cache is needed; nothing is downloaded): {first[:200]}"
            ) from None


def count_text(tokenizer: Any, text: str) -> int:
    """Tokens of plain `text`, without special tokens."""
    return len(tokenizer.encode(text, add_special_tokens=False))


def _plain_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages with content-part arrays flattened to text (templates expect strings)."""
    plain = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(
                p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
        elif not isinstance(content, str):
            content = ""
        item = {"role": str(message.get("role", "user")), "content": content}
        plain.append(item)
    return plain


def count_body(tokenizer: Any, body: dict[str, Any]) -> tuple[int, str]:
    """Prompt tokens of a request body and how they were counted.

    Chat bodies go through the tokenizer's chat template (with the generation
    prompt, and the tools when the template takes them), as the server would;
    without a template, message texts plus a fixed per-message overhead.
    """
    if "messages" not in body:
        prompt = body["prompt"]
        if isinstance(prompt, str):
            return len(tokenizer.encode(prompt)), "tokenizer"
        if prompt and isinstance(prompt[0], str):
            return max(len(tokenizer.encode(p)) for p in prompt), "tokenizer"
        return (len(prompt) if isinstance(prompt[0], int) else max(len(p) for p in prompt)), "token ids"
    messages = _plain_messages(body["messages"])
    if getattr(tokenizer, "chat_template", None):
        kwargs: dict[str, Any] = {"add_generation_prompt": True, "tokenize": True}
        if isinstance(body.get("tools"), list) and body["tools"]:
            kwargs["tools"] = body["tools"]
        try:
            ids = tokenizer.apply_chat_template(messages, **kwargs)
        except Exception:  # noqa: BLE001 - a template may reject roles or orders; fall back
            pass
        else:
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
            return len(ids), "tokenizer + chat template"
    total = sum(count_text(tokenizer, m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in messages)
    return total, "tokenizer, no chat template (+4 tokens a message)"
