"""The endpoint under examination: its URL, model, key and headers, checked before anything is sent."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "DEFAULT_API_KEY_ENV",
    "Target",
    "TargetError",
    "TargetSpec",
    "ClientSetupError",
    "MAX_URL_CHARS",
    "build_target",
    "check_host",
    "check_url",
    "display_url",
    "normalize_base_url",
    "parse_headers",
]

#: The longest URL accepted (servers refuse longer request lines: nginx's default buffer is 8 KiB).
MAX_URL_CHARS = 8192
# RFC 9110 §5.6.2: a field name is a token.
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
# A host name label (RFC 1123; underscores too, as container and service names use them).
_LABEL = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?$")  # no "-" at either end (RFC 1123)

DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"


class TargetError(ValueError):
    """The endpoint URL or its options cannot be used (one-line message)."""


class ClientSetupError(TargetError):
    """The probe client cannot be built from these inputs (a CA bundle that does not load, a proxy
    the client cannot use, a header it cannot encode): a usage problem, reported before anything
    is sent, never a skipped check."""


def display_url(url: str) -> str:
    """A URL as it may be printed or saved: user:password@ masked, the query (a ?token=) and fragment dropped.

    The one URL scrubber (target, fleets, proxies, recordings). Works on text urlsplit rejects
    too, so an error message can quote it, and on a URL without a scheme (``user:pw@proxy:3128``).
    """
    scheme, sep, rest = url.partition("//")
    if not sep:
        scheme, rest = "", url
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    if "@" in authority:
        authority = "***@" + authority.rpartition("@")[2]
    tail = tail.partition("?")[0].partition("#")[0]
    return scheme + sep + authority + tail


def _odd_character(text: str) -> str | None:
    """The first character no URL or header may carry raw (a control, a space, a byte that was not UTF-8)."""
    for ch in text:
        code = ord(ch)
        if code < 0x20 or code == 0x7F or 0x80 <= code < 0xA0 or 0xD800 <= code <= 0xDFFF or ch.isspace():
            return f"U+{code:04X}"
    return None


def check_host(host: str, what: str = "endpoint URL") -> str:
    """`host` as it goes on the wire (IDNA-encoded), or `TargetError`: not a host name nor an IP literal.

    An IP literal (``10.0.0.5``, ``::1``), or a name of labels of letters, digits, ``-`` and
    ``_``, each at most 63 characters, 253 in all; an international name is encoded as httpx
    encodes it (IDNA 2008), so ``☃.net`` is refused here rather than inside a probe.
    """
    literal = host.partition("%")[0]  # an IPv6 zone (fe80::1%eth0)
    try:
        ipaddress.ip_address(literal)
        return host
    except ValueError:
        if ":" in host:
            raise TargetError(f"{what}: {host!r} is not a valid IPv6 address") from None
    name = host.lower().removesuffix(".")
    if not name.isascii():
        import idna

        try:
            name = idna.encode(name).decode("ascii")
        except (idna.IDNAError, UnicodeError) as exc:
            raise TargetError(f"{what}: {host!r} is not a valid international host name ({exc})") from None
    labels = name.split(".")
    if labels[-1].isdigit() or all(label.isdigit() for label in labels):
        import socket

        try:
            socket.inet_aton(name)  # the shorthands getaddrinfo and curl take too: 127.1, 10.1.2
            return name
        except OSError:
            raise TargetError(f"{what}: {host!r} is not a valid IPv4 address") from None
    if len(name) > 253:
        raise TargetError(f"{what}: the host name is {len(name)} characters long; DNS allows 253")
    for label in labels:
        if len(label) > 63:
            raise TargetError(f"{what}: the host name label {label[:20]!r}… is {len(label)} characters long; "
                              "DNS allows 63")
        if not _LABEL.match(label):
            raise TargetError(f"{what}: {host!r} is not a valid host name (letters, digits, '-', '_' and dots)")
    return name


def check_url(url: str, what: str = "endpoint URL") -> tuple[str, str, int | None, str]:
    """(scheme, host, port, path) of an http(s) URL the client can use, or `TargetError` (one line).

    Checked as httpx will check it, before anything is sent: the scheme, the host (`check_host`),
    the port (1–65535), the length (`MAX_URL_CHARS`) and the characters (no spaces or controls).
    The message never echoes a password or a query (`display_url`).
    """
    raw = url.strip()
    if "://" not in raw:
        raw = "http://" + raw
    shown = display_url(url)  # never echo user:password or a ?token= from the URL
    if len(raw) > MAX_URL_CHARS:
        raise TargetError(f"{what} is {len(raw):,} characters long; the most accepted is {MAX_URL_CHARS:,}")
    odd = _odd_character(raw)
    if odd is not None:
        shown_safe = shown.encode("utf-8", "backslashreplace").decode("utf-8")
        raise TargetError(f"{what} {shown_safe!r} has a character URLs cannot carry ({odd}): "
                          "percent-encode it")
    try:
        parts = urlsplit(raw)
    except ValueError as exc:  # "http://[::1": an unclosed IPv6 bracket
        raise TargetError(f"invalid {what} {shown!r}: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise TargetError(f"unsupported URL scheme {parts.scheme!r}: use http:// or https://")
    try:
        port = parts.port
    except ValueError as exc:
        raise TargetError(f"invalid port in {what}: {exc}") from None
    if not parts.hostname:
        raise TargetError(f"{what} has no host: {shown!r}")
    if port == 0:
        raise TargetError(f"{what} {shown!r}: port 0 is not a port a server listens on")
    host = check_host(parts.hostname, what)
    return parts.scheme, host, port, parts.path


def normalize_base_url(url: str) -> str:
    """Return the OpenAI-compatible base URL ending in ``/v1``.

    Accepts ``http://host:port``, ``http://host:port/v1`` and full paths such as
    ``.../v1/chat/completions`` (trimmed back to ``/v1``); anything the client could not use
    is a `TargetError` (`check_url`).
    """
    check_url(url)
    raw = url.strip()
    if "://" not in raw:
        raw = "http://" + raw
    parts = urlsplit(raw)
    assert parts.hostname is not None
    path = parts.path.rstrip("/")
    for suffix in ("/chat/completions", "/completions", "/models"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break
    if not path.endswith("/v1"):
        path = path + "/v1"
    netloc = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    if ":" in parts.hostname:  # IPv6 literal
        netloc = f"[{parts.hostname}]" + ("" if parts.port is None else f":{parts.port}")
    return urlunsplit((parts.scheme, netloc, path, "", ""))


@dataclass(frozen=True)
class Target:
    """Where to send probes and how to authenticate.

    `headers` may carry secrets; they are never rendered (see `redact`).
    """

    base_url: str
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @property
    def host(self) -> str:
        """Host name or IP of the endpoint."""
        return urlsplit(self.base_url).hostname or ""

    @property
    def port(self) -> int:
        """TCP port, defaulting by scheme."""
        parts = urlsplit(self.base_url)
        return parts.port or (443 if parts.scheme == "https" else 80)

    @property
    def scheme(self) -> str:
        """``http`` or ``https``."""
        return urlsplit(self.base_url).scheme

    @property
    def root_url(self) -> str:
        """Scheme, host and port, without the ``/v1`` path (for native server APIs)."""
        parts = urlsplit(self.base_url)
        root_path = parts.path[: -len("/v1")] if parts.path.endswith("/v1") else parts.path
        return urlunsplit((parts.scheme, parts.netloc, root_path, "", ""))


def _unsendable(value: str) -> str | None:
    """Why `value` cannot be sent in an HTTP header (None: it can): CR, LF, controls, or not Latin-1."""
    for ch in value:
        code = ord(ch)
        if ch in "\r\n":
            return "a line break (CR/LF), which would end the header"
        if (code < 0x20 and ch != "\t") or code == 0x7F:
            return f"a control character (U+{code:04X})"
        if code > 0xFF:
            return f"the character U+{code:04X}, which HTTP headers cannot carry (they are Latin-1)"
    return None


def parse_headers(values: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``--header 'Name: value'`` strings as (name, value) pairs, stripped; `TargetError` when unsendable.

    The name must be an RFC 9110 token (no spaces); the value Latin-1 without line breaks or
    controls. The message names the header, never its value (values may be credentials).
    """
    headers = []
    for raw in values:
        name, sep, value = raw.partition(":")
        if not sep or not name.strip():
            raise TargetError("--header must look like 'Name: value' (got a value without a colon)")
        name = name.strip()
        if not _TOKEN.match(name):
            shown = name.encode("ascii", "backslashreplace").decode("ascii")
            raise TargetError(f"--header {shown!r}: not a valid header name (letters, digits and !#$%&'*+-.^_`|~, "
                              "no spaces)")
        problem = _unsendable(value.strip())
        if problem:
            raise TargetError(f"--header {name!r}: the value has {problem}")
        headers.append((name, value.strip()))
    return tuple(headers)


@dataclass(frozen=True)
class TargetSpec:
    """What the user says about an endpoint (``--endpoint``, ``--model``, ``--api-key-env``,
    ``--header``), before anything is checked; `build` makes the `Target` (`build_target`).

    `url` None: none was given (``check`` then diagnoses its demo simulator). `headers` are parsed
    (`parse_headers`) and may carry secrets.
    """

    url: str | None = None
    model: str | None = None
    api_key_env: str | None = DEFAULT_API_KEY_ENV
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def at(self, url: str, *, model: str | None = None, api_key_env: str | None = None) -> TargetSpec:
        """This spec for another endpoint (a fleet's entry): a model or key variable given here wins."""
        return dataclasses.replace(self, url=url, model=model or self.model,
                                   api_key_env=api_key_env or self.api_key_env)

    def build(self, environ: Mapping[str, str] | None = None) -> Target:
        """The `Target` of this spec (`build_target`; `TargetError` when unusable or without a URL)."""
        if self.url is None:
            raise TargetError("no endpoint URL given")
        return build_target(self.url, model=self.model, api_key_env=self.api_key_env, headers=self.headers,
                            environ=environ)


def build_target(
    url: str,
    *,
    model: str | None = None,
    api_key_env: str | None = DEFAULT_API_KEY_ENV,
    headers: tuple[tuple[str, str], ...] = (),
    environ: Mapping[str, str] | None = None,
) -> Target:
    """The one way a `Target` is made: from a URL, a model, a key's env var, headers.

    The URL is normalised to its ``/v1`` base (`TargetError` when unusable); the API key is read from
    the environment variable `api_key_env` (unset or empty: no key; no variable named: no key). Every
    command (check, fleets and their dry run, watch, compare, the demo, replays of a recording)
    builds its targets here, most through `TargetSpec.build`; ``tests/test_architecture.py``
    holds every other module to it.
    """
    from llmdoctor.redact import register_request_secrets

    env = os.environ if environ is None else environ
    key = (env.get(api_key_env) or None) if api_key_env else None
    register_request_secrets(key, headers)  # masked in everything that leaves the process, from now on
    if key is not None:
        problem = _unsendable(key)
        if problem:
            raise TargetError(f"the API key in ${api_key_env} has {problem}")
    return Target(base_url=normalize_base_url(url), model=model, api_key=key, headers=headers)
