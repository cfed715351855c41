"""Cleaning one log line before it is classified: colours, prefixes, JSON wrapping, secrets.

Pure functions used by the log scanner (`llmdoctor/logs/scan.py`): `clean_line` strips ANSI colour codes
and the prefixes log collectors and servers put before a message (docker-compose, docker
``--timestamps``, journald / syslog, kernel uptime, vLLM and Ray process tags, torch.distributed ranks,
vLLM's level-date-file header), unwraps JSON-per-line records, and returns the message with the first
timestamp it saw. `mask_secrets` masks what looks like a credential in a line that will be shown.
"""

from __future__ import annotations

import json
import re

from llmdoctor.logs.patterns import LazyPattern
from llmdoctor.redact import MASK

__all__ = ["MASK", "clean_line", "mask_secrets"]

_ANSI = LazyPattern(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
_PREFIXES = LazyPattern(
    r"""(?:
        \[?[\w.-]+\]?\s+\|\s?                                          # docker-compose: svc-1  | , [svc] |
      | \d{4}-\d\d-\d\d[T\ ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+  # ISO / docker --timestamps
      | [A-Z][a-z]{2}\s+\d{1,2}\s\d\d:\d\d:\d\d\s\S+\s[^\s:\[]+(?:\[\d+\])?:\s  # syslog / journald short
      | \[\s*\d+\.\d+\]\s                                              # kernel uptime [  518.050606]
      | \([\w.-]+\s+pid=\d+(?:,\s*ip=[\d.]+)?\)\s?                      # vLLM / Ray: (EngineCore pid=1)
      | \[rank\d+\]:\s?                                               # torch.distributed: [rank0]:
      | (?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d\s[\d:.]+\s(?:\[[^\]]+\]|[\w.]+:\d+\])\s?
                                                                      # vLLM: INFO 06-02 00:51:39 [x.py:1]
    )""",
    re.VERBOSE,
)
_TIMESTAMP = LazyPattern(
    r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"  # ISO
    r"|\d{4}/\d\d/\d\d - \d\d:\d\d:\d\d"  # Ollama GIN
    r"|[A-Z][a-z]{2}\s+\d{1,2}\s\d\d:\d\d:\d\d"  # syslog
    r"|(?<![\d-])\d\d-\d\d \d\d:\d\d:\d\d"  # vLLM (no year)
)

# Same mask as everything else llmdoctor prints; log lines carry secrets nobody told us about,
# so they are found by shape (the probe client's `Redactor` masks the known ones).
_SECRETS = (
    (LazyPattern(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}"), rf"\1 {MASK}"),
    (LazyPattern(r"(?i)\b(authorization|x-api-key|api-key|cookie)(\"?\s*[:=]\s*\"?)[^\s\",;}]+"), rf"\1\2{MASK}"),
    (
        LazyPattern(r"(?i)\b(api[_-]?key|access[_-]?token|auth[_-]?token|token|secret|password|passwd)"
                   r"(\"?\s*[:=]\s*['\"]?)[^\s'\",;&}]+"),
        rf"\1\2{MASK}",
    ),
    (LazyPattern(r"\b(sk|rk|pk)-[A-Za-z0-9_-]{8,}"), rf"\1-{MASK}"),
    (LazyPattern(r"\bhf_[A-Za-z0-9]{16,}"), f"hf_{MASK}"),
)


def mask_secrets(text: str) -> str:
    """Mask bearer tokens, ``sk-...`` keys, ``api_key=...`` and ``Authorization:`` values."""
    for pattern, repl in _SECRETS:
        text = pattern.sub(repl, text)
    return text


def clean_line(raw: str) -> tuple[str, str | None]:
    """Return ``(message, timestamp)``: ANSI codes, known prefixes and JSON wrapping removed.

    The message keeps its leading indentation after the prefixes (traceback frames rely on it).
    """
    text = raw.rstrip("\r\n")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    stamp_match = _TIMESTAMP.search(text, 0, 120)
    stamp = stamp_match.group(0) if stamp_match else None
    stripped = text.strip()
    if stripped.startswith("{") and stripped.endswith("}"):
        message, json_stamp = _from_json(stripped)
        if message is not None:
            text = message.rstrip("\r\n")
            stamp = json_stamp or stamp
    for _ in range(6):
        m = _PREFIXES.match(text)
        if not m or m.end() == 0:
            break
        text = text[m.end():]
    return text, stamp


def _from_json(text: str) -> tuple[str | None, str | None]:
    try:
        obj = json.loads(text)
    except ValueError:
        return None, None
    if not isinstance(obj, dict):
        return None, None
    found = obj.get("fields")
    fields = found if isinstance(found, dict) else {}
    for key in ("message", "msg", "log", "MESSAGE"):
        value = obj.get(key, fields.get(key))
        if isinstance(value, str):
            stamp = obj.get("timestamp") or obj.get("time") or obj.get("ts")
            extra = "".join(
                f" {k}={v}" for k, v in obj.items() if k == "load_duration" and isinstance(v, (int, float))
            )
            return value + extra, str(stamp) if stamp is not None else None
    return None, None
