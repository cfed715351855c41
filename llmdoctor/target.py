"""The endpoint under examination and the options of one run."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "DEFAULT_API_KEY_ENV",
    "DiagnosisOptions",
    "GateOptions",
    "NetworkOptions",
    "OPTION_GROUPS",
    "OPTION_GROUP_OF",
    "Options",
    "RequestPolicy",
    "ServerEvidence",
    "Workload",
    "Target",
    "TargetError",
    "build_target",
    "display_url",
    "host_problem",
    "normalize_base_url",
    "parse_headers",
]

DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"


class TargetError(ValueError):
    """The endpoint URL or its options cannot be used (one-line message)."""


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


_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?", re.IGNORECASE)


def host_problem(host: str) -> str | None:
    """Why `host` cannot be an endpoint's host, or None: an IP literal or a DNS name (RFC 1123 labels).

    Underscores are accepted (Docker and Compose service names resolve with them); a name made of
    digits and dots must be an IPv4 address; non-ASCII names must encode to IDNA. What this lets
    through is then for DNS to answer: an unknown name is a finding of the run, a malformed one
    (``ht!tp``, ``a..b``, ``-x-``) a usage error before anything is sent.
    """
    try:
        ipaddress.ip_address(host.partition("%")[0])  # an IPv6 literal may carry a zone (%eth0)
        return None
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host  # a fully qualified name may end with its root dot
    labels = name.split(".")
    if any(not label for label in labels):
        return f"{host!r} has an empty label (two dots in a row, or a leading dot)"
    try:
        ascii_labels = [label if label.isascii() else label.encode("idna").decode("ascii") for label in labels]
    except UnicodeError:
        return f"{host!r} is not a valid internationalized domain name"
    if len(".".join(ascii_labels)) > 253:
        return "a host name has at most 253 characters"
    bad = next((label for label in ascii_labels if not _LABEL.fullmatch(label)), None)
    if bad is not None:
        what = repr(host) if bad == host else f"{bad!r} in {host!r}"
        return (f"{what} is not a host name (labels of letters, digits and '-', not at either end, "
                "at most 63 characters; or an IP address)")
    if all(label.isdigit() for label in ascii_labels):
        try:
            socket.inet_aton(name)
        except OSError:
            return f"{host!r} is not an IPv4 address"
    return None


def normalize_base_url(url: str) -> str:
    """Return the OpenAI-compatible base URL ending in ``/v1``.

    Accepts ``http://host:port``, ``http://host:port/v1`` and full paths such as
    ``.../v1/chat/completions`` (trimmed back to ``/v1``).
    """
    raw = url.strip()
    if "://" not in raw:
        raw = "http://" + raw
    shown = display_url(url)  # never echo user:password or a ?token= from the URL
    try:
        parts = urlsplit(raw)
    except ValueError as exc:  # "http://[::1": an unclosed IPv6 bracket
        raise TargetError(f"invalid endpoint URL {shown!r}: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise TargetError(f"unsupported URL scheme {parts.scheme!r}: use http:// or https://")
    try:
        port = parts.port
    except ValueError as exc:
        raise TargetError(f"invalid port in endpoint URL: {exc}") from None
    if not parts.hostname:
        raise TargetError(f"endpoint URL has no host: {shown!r}")
    del port
    problem = host_problem(parts.hostname)
    if problem:
        raise TargetError(f"invalid host in endpoint URL {shown!r}: {problem}")
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


def parse_headers(values: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``--header 'Name: value'`` strings as (name, value) pairs, stripped."""
    headers = []
    for raw in values:
        name, sep, value = raw.partition(":")
        if not sep or not name.strip():
            raise TargetError("--header must look like 'Name: value' (got a value without a colon)")
        headers.append((name.strip(), value.strip()))
    return tuple(headers)


def build_target(
    url: str,
    *,
    model: str | None = None,
    api_key_env: str | None = DEFAULT_API_KEY_ENV,
    headers: tuple[tuple[str, str], ...] = (),
    environ: Mapping[str, str] | None = None,
) -> Target:
    """The one way a `Target` is made from what a user gives: a URL, a model, a key's env var, headers.

    The URL is normalised to its ``/v1`` base (`TargetError` when unusable); the API key is read from
    the environment variable `api_key_env` (unset or empty: no key; no variable named: no key). Every
    command (check, fleets, watch, compare) builds its targets here.
    """
    env = os.environ if environ is None else environ
    key = (env.get(api_key_env) or None) if api_key_env else None
    return Target(base_url=normalize_base_url(url), model=model, api_key=key, headers=headers)


@dataclass(frozen=True)
class RequestPolicy:
    """What the doctor may send and how: timeouts, the request budget, samples, warm-up, the sweep."""

    timeout_s: float = 30.0
    max_requests: int = 30
    samples: int = 5
    warmup: int = 1
    sweep_max_tokens: tuple[int, ...] = (1, 16, 64)
    sweep_repeats: int = 2
    # Opt-in after-idle test: wait this long idle, then send one request (0: off).
    idle_test_s: float = 0.0
    # A wall-clock bound for the whole run (None: none), per-request log on stderr.
    deadline_s: float | None = None
    verbose: bool = False


@dataclass(frozen=True)
class ServerEvidence:
    """Server-side evidence: local log files, the journal, backend and DCGM metrics, the server process."""

    logs: tuple[str, ...] = ()
    journal_unit: str | None = None
    since: str | None = None
    metrics_url: str | None = None
    gpu_metrics_url: str | None = None
    pid: int | None = None


@dataclass(frozen=True)
class Workload:
    """The application's own requests: request files, how to count their tokens, a typical answer."""

    request_files: tuple[str, ...] = ()
    tokenizer: str | None = None
    context_window: int | None = None
    # Length of a typical answer, for the fixed-cost share (LD702) and the parameter checks.
    typical_output_tokens: int = 64


@dataclass(frozen=True)
class NetworkOptions:
    """The network and the client: DNS server to time, TLS verification, the concurrency probe."""

    dns_server: str | None = None
    insecure: bool = False
    ca_bundle: str | None = None
    concurrency: int = 0


@dataclass(frozen=True)
class GateOptions:
    """The pre-deploy gate: SLOs as canonical "metric=LIMITms" specs, and a baseline file to compare with."""

    slos: tuple[str, ...] = ()
    compare_file: str | None = None


@dataclass(frozen=True)
class DiagnosisOptions:
    """The differential diagnosis (probe ``diagnosis``, check LD720): follow-up tests within this budget."""

    followup: bool = True
    followup_requests: int = 10
    followup_seconds: float = 30.0


@dataclass(frozen=True)
class Options:
    """Knobs of one `check` run, by concern, with the defaults the CLI documents.

    Read them by group (``options.request.timeout_s``, ``options.evidence.logs``). Field names are
    unique across the groups, so `Options.of` and `with_fields` can take them flat
    (``Options.of(samples=3, logs=("vllm.log",))``), which tests and old recordings use.
    """

    request: RequestPolicy = field(default_factory=RequestPolicy)
    evidence: ServerEvidence = field(default_factory=ServerEvidence)
    workload: Workload = field(default_factory=Workload)
    network: NetworkOptions = field(default_factory=NetworkOptions)
    gate: GateOptions = field(default_factory=GateOptions)
    diagnosis: DiagnosisOptions = field(default_factory=DiagnosisOptions)

    @classmethod
    def of(cls, **fields: Any) -> Options:
        """Options with these fields (flat names, each put in its group) and defaults elsewhere."""
        return cls().with_fields(**fields)

    def with_fields(self, **fields: Any) -> Options:
        """A copy with these fields changed (flat names, each put in its group); TypeError for an unknown one."""
        by_group: dict[str, dict[str, Any]] = {}
        for name, value in fields.items():
            group = OPTION_GROUP_OF.get(name)
            if group is None:
                raise TypeError(f"Options has no field {name!r}")
            by_group.setdefault(group, {})[name] = value
        changes = {g: dataclasses.replace(getattr(self, g), **values) for g, values in by_group.items()}
        return dataclasses.replace(self, **changes)


#: The groups of `Options`: field name -> its dataclass.
OPTION_GROUPS: dict[str, type[Any]] = {
    "request": RequestPolicy,
    "evidence": ServerEvidence,
    "workload": Workload,
    "network": NetworkOptions,
    "gate": GateOptions,
    "diagnosis": DiagnosisOptions,
}
#: The group of every option, by the option's (unique) name.
OPTION_GROUP_OF: dict[str, str] = {
    f.name: group for group, kind in OPTION_GROUPS.items() for f in dataclasses.fields(kind)
}
