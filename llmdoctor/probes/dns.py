"""Name resolution of the endpoint host (probe ``dns``).

Measures how long the system resolver (``getaddrinfo``) takes to resolve the
endpoint's host name. An IP-literal endpoint skips resolution entirely.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmdoctor.context import Context

__all__ = ["DnsResult", "resolve", "is_ip_literal"]


@dataclass
class DnsResult:
    """How the endpoint's host name resolves, and how long it takes."""

    host: str
    is_ip_literal: bool
    system_ms: float | None = None
    system_addresses: list[str] = field(default_factory=list)
    system_error: str = ""
    note: str = ""


def is_ip_literal(host: str) -> bool:
    """True when `host` is an IPv4 or IPv6 address rather than a name."""
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _system_lookup(host: str, port: int) -> tuple[float, list[str], str]:
    started = time.perf_counter()
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return (time.perf_counter() - started) * 1000, [], f"{type(exc).__name__}: {exc}"
    elapsed = (time.perf_counter() - started) * 1000
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    return elapsed, addresses, ""


def resolve(ctx: Context) -> DnsResult:
    """Time the system resolver on the endpoint's host."""
    from llmdoctor.context import ProbeUnavailable

    if ctx.target is None:
        raise ProbeUnavailable("no endpoint given")
    host = ctx.target.host
    if is_ip_literal(host):
        return DnsResult(host=host, is_ip_literal=True, note="the endpoint is an IP address: no DNS lookup")
    ms, addresses, error = _system_lookup(host, ctx.target.port)
    return DnsResult(
        host=host, is_ip_literal=False, system_ms=ms, system_addresses=addresses, system_error=error
    )
