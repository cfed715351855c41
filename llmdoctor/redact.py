"""Keep secrets (API keys, auth headers, cookies) out of everything llmdoctor prints or saves.

The probe client builds one `Redactor` from the API key and the values of every sensitive
header it sends, and passes all server-provided text (error bodies, headers) through it;
renderers do the same with anything that may carry a secret.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from llmdoctor.patterns import LazyPattern

__all__ = [
    "MASK",
    "SENSITIVE_HEADERS",
    "Redactor",
    "is_sensitive_header",
    "mask_secret",
    "redact_headers",
]

MASK = "***redacted***"

SENSITIVE_HEADERS: frozenset[str] = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "x-api-key",
        "api-key",
        "openai-api-key",
        "x-goog-api-key",
        "anthropic-api-key",
        "x-auth-token",
        "x-access-token",
        "x-amz-security-token",
        "ocp-apim-subscription-key",
        "x-hf-token",
    }
)

# Other names that look like credentials: x-my-api-key, x-csrf-token, x-client-secret, ...
# ("x-ratelimit-remaining-tokens" or "x-prompt-tokens" do not match: "tokens" is not "token").
_SENSITIVE_NAME = LazyPattern(
    r"(?:^|[-_])(?:api[-_]?key|token|secret|password|passwd|credentials?|session|auth)(?:$|[-_])"
)

# A bearer token of any origin (one the redactor was not told about, echoed by a proxy).
_BEARER = LazyPattern(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}")


def mask_secret(value: str) -> str:
    """Return the mask for a secret value; nothing of the value is kept ("" stays "")."""
    return MASK if value else ""


def is_sensitive_header(name: str) -> bool:
    """True when a header of this name may carry a credential."""
    lname = name.strip().lower()
    return lname in SENSITIVE_HEADERS or bool(_SENSITIVE_NAME.search(lname))


def redact_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    """Copy headers with lower-cased names, sensitive values masked, repeated names joined by ", ".

    Accepts a mapping (also ``httpx.Headers``, whose repeated headers are kept) or pairs.
    """
    if hasattr(headers, "multi_items"):
        pairs: Iterable[tuple[str, str]] = headers.multi_items()  # type: ignore[union-attr]
    elif isinstance(headers, Mapping):
        pairs = headers.items()
    else:
        pairs = headers
    out: dict[str, str] = {}
    for name, value in pairs:
        lname = str(name).lower()
        shown = mask_secret(str(value)) if is_sensitive_header(lname) else str(value)
        out[lname] = f"{out[lname]}, {shown}" if lname in out else shown
    return out


class Redactor:
    """Replace known secret strings (and any ``Bearer <token>``) with `MASK`.

    Secrets shorter than `min_length` are ignored: masking every "x" of a text would destroy
    it and protect nothing. Each secret is also matched in its URL-encoded and JSON-escaped
    spellings, in which a server may echo it back.
    """

    def __init__(self, secrets: Iterable[str | None] = (), *, min_length: int = 4) -> None:
        variants: set[str] = set()
        for secret in secrets:
            if not secret or len(secret) < min_length:
                continue
            variants.add(secret)
            variants.add(quote(secret, safe=""))
            variants.add(json.dumps(secret)[1:-1])
            variants.add(json.dumps(secret, ensure_ascii=False)[1:-1])
        self._secrets = frozenset(variants)
        ordered = sorted(variants, key=len, reverse=True)  # longest first: no partial leftovers
        self._pattern = re.compile("|".join(re.escape(s) for s in ordered)) if ordered else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def __repr__(self) -> str:
        return f"Redactor(<{len(self._secrets)} secret spellings>)"

    @classmethod
    def for_request(cls, api_key: str | None, headers: Iterable[tuple[str, str]] = ()) -> Redactor:
        """A redactor for the API key and the values of the sensitive headers among `headers`."""
        secrets: list[str | None] = [api_key]
        for name, value in headers:
            if is_sensitive_header(name):
                secrets.append(value)
                scheme, _, token = value.strip().partition(" ")
                if token and scheme.lower() in ("bearer", "basic", "token"):
                    secrets.append(token.strip())
        return cls(secrets)

    def text(self, s: str) -> str:
        """Return `s` with every secret occurrence and every bearer token masked."""
        if not s:
            return s
        if self._pattern is not None:
            s = self._pattern.sub(MASK, s)
        return _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", s)

    def obj(self, x: Any) -> Any:
        """Redact recursively: strings, dict keys and values, lists and tuples.

        A dict value under a sensitive header name (``"Authorization": ...``) is masked whole.
        """
        if isinstance(x, str):
            return self.text(x)
        if isinstance(x, Mapping):
            out = {}
            for k, v in x.items():
                key = self.text(k) if isinstance(k, str) else k
                if isinstance(k, str) and isinstance(v, str) and is_sensitive_header(k):
                    out[key] = mask_secret(v)
                else:
                    out[key] = self.obj(v)
            return out
        if isinstance(x, list):
            return [self.obj(v) for v in x]
        if isinstance(x, tuple):
            return tuple(self.obj(v) for v in x)
        return x
