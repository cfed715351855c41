"""Keep secrets (API keys, auth headers, cookies) out of everything llmdoctor prints or saves.

The probe client builds one `Redactor` from the API key and the values of every sensitive
header it sends, and passes all server-provided text (error bodies, headers) through it;
renderers do the same with anything that may carry a secret.

On top of that, one process-wide pass (`redact_output`) runs over every string that leaves
the process — the report in any format, the NDJSON of fleets and watches, saved recordings,
error lines, the verbose log, skip reasons, plugin errors. It masks every secret registered so
far (the keys and credential headers of every target built, the passwords and query values of
the URL options, the proxies' passwords, the values of credential-like environment variables
such as ``*_API_KEY``, ``*_TOKEN``, ``*_PASSWORD``) and, in messages, a URL's
``user:password@`` and the values of credential-like query parameters (``?token=``,
``&api_key=``, ``&sig=``). A whole rendered document gets the exact-secret part only
(`redact_document`): a pattern must not rewrite an HTML report's scripts.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from llmdoctor.logs.patterns import LazyPattern

__all__ = [
    "MASK",
    "SENSITIVE_HEADERS",
    "Redactor",
    "is_sensitive_header",
    "mask_secret",
    "redact_document",
    "redact_headers",
    "redact_output",
    "redact_output_obj",
    "register_environment_secrets",
    "register_request_secrets",
    "register_secrets",
    "register_url_secrets",
    "secrets_of_request",
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


def secrets_of_request(api_key: str | None, headers: Iterable[tuple[str, str]] = ()) -> list[str | None]:
    """The API key and the values of the sensitive headers among `headers` (and the token inside
    ``Bearer …``/``Basic …``)."""
    secrets: list[str | None] = [api_key]
    for name, value in headers:
        if is_sensitive_header(name):
            secrets.append(value)
            scheme, _, token = value.strip().partition(" ")
            if token and scheme.lower() in ("bearer", "basic", "token"):
                secrets.append(token.strip())
    return secrets


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
        return cls(secrets_of_request(api_key, headers))

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


# ---------------------------------------------------------------------------------------------
# The process-wide pass over everything that leaves the process.

# Secrets shorter than this are not masked in free text: "1234" or "true" would be masked all
# over a report (and inside JSON numbers); a credential is longer.
_OUTPUT_MIN_LENGTH = 6
# A URL's user:password@ (or a bare token@), in any text.
_URL_USERINFO = LazyPattern(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#@\s]+@")
# The value of a query parameter whose name ends like a credential's (?token=, &api_key=, &X-Amz-Signature=),
# in any text ("max_tokens=" is not one).
_QUERY_SECRET = LazyPattern(
    r"(?i)([?&;][\w.-]*(?:token|key|secret|password|passwd|pwd|auth|sig|signature|credential|credentials)=)"
    r"[^&#\s\"'<>]+")
# Environment variables whose value is a credential: the name ends like one (OPENAI_API_KEY, HF_TOKEN,
# AWS_SECRET_ACCESS_KEY, DB_PASSWORD), so TOKEN_TTL_SECONDS or SESSION_NAME are not.
_CREDENTIAL_VARIABLE = LazyPattern(r"(?i)(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?|PAT)$")


class _ProcessSecrets:
    """The secrets registered so far in this process, and the redactor over them (rebuilt on change)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: set[str] = set()
        self._redactor = Redactor()

    def add(self, values: Iterable[str | None]) -> None:
        fresh = {v for v in values if v and len(v) >= _OUTPUT_MIN_LENGTH} - self._values
        if not fresh:
            return
        with self._lock:
            self._values |= fresh
            self._redactor = Redactor(self._values, min_length=_OUTPUT_MIN_LENGTH)

    @property
    def redactor(self) -> Redactor:
        return self._redactor

    def mask(self, text: str) -> str:
        """`text` with the registered secrets (exact strings, and their escaped spellings) masked."""
        pattern = self._redactor._pattern  # noqa: SLF001 - the same class's own state
        return pattern.sub(MASK, text) if pattern is not None else text


_PROCESS = _ProcessSecrets()


def register_secrets(values: Iterable[str | None]) -> None:
    """Mask these values in everything that leaves the process from now on (`redact_output`)."""
    _PROCESS.add(values)


def register_request_secrets(api_key: str | None, headers: Iterable[tuple[str, str]] = ()) -> None:
    """Register the API key and the sensitive header values of a target (`secrets_of_request`)."""
    register_secrets(secrets_of_request(api_key, headers))


def register_url_secrets(url: str | None) -> None:
    """Register the password (and ``user:password``) and the query values of a URL option."""
    if not url:
        return
    try:
        parts = urlsplit(url if "://" in url else "http://" + url)
        password = parts.password
        userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
        query = [v for _, v in parse_qsl(parts.query)]
    except ValueError:
        return
    register_secrets([password, unquote(password) if password else None, userinfo, *query])


def register_environment_secrets(environ: Mapping[str, str] | None = None) -> None:
    """Register the values of credential-like environment variables (``*_API_KEY``, ``*_TOKEN``,
    ``*_SECRET``, ``*PASSWORD*`` …) and the passwords of the proxy variables.

    A plugin's or a library's error that quotes one of them is then masked like the key itself.
    """
    env = os.environ if environ is None else environ
    values: list[str | None] = []
    for name, value in env.items():
        if name.lower().endswith("_proxy"):
            register_url_secrets(value)
        elif _CREDENTIAL_VARIABLE.search(name) and len(value) >= 8 and not value.isdigit():
            values.append(value)
    register_secrets(values)


def redact_document(text: str) -> str:
    """A whole rendered document (a report in any format) as it may leave the process: the
    registered secrets masked, nothing else touched (an HTML report's scripts stay intact)."""
    return _PROCESS.mask(text) if text else text


def redact_output(text: str) -> str:
    """A message (an error line, a reason, a string of the JSON report) as it may leave the process:
    registered secrets, bearer tokens, URL passwords and credential query values masked."""
    if not text:
        return text
    text = _PROCESS.redactor.text(text)
    if "://" in text:
        text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}***@", text)
    if "=" in text:
        text = _QUERY_SECRET.sub(lambda m: f"{m.group(1)}{MASK}", text)
    return text


def redact_output_obj(x: Any) -> Any:
    """`redact_output` over every string of a JSON-like value (keys too)."""
    if isinstance(x, str):
        return redact_output(x)
    if isinstance(x, Mapping):
        return {redact_output(k) if isinstance(k, str) else k: redact_output_obj(v) for k, v in x.items()}
    if isinstance(x, list):
        return [redact_output_obj(v) for v in x]
    if isinstance(x, tuple):
        return tuple(redact_output_obj(v) for v in x)
    return x
