"""Name resolution of the endpoint host (probe ``dns``).

Measures what a new connection pays to find the endpoint:

- the system resolver (``getaddrinfo``, what most HTTP clients call per new connection);
- each configured DNS server (``/etc/resolv.conf``, or ``Options.network.dns_server``: ``IP[:PORT]``,
  several separated by commas, tried in order like resolv.conf), for A and AAAA: time, answers,
  TTL, response code, or a timeout;
- ``/etc/hosts`` overrides of the name.

Whether the resolved addresses connect (and what a dead one costs) is the transport probe's
job: it tries them in Happy-Eyeballs order and times each failure. Connecting here too would
disturb that measurement (a neighbour-discovery stall already under way ends sooner).

Every query has a timeout. An IP-literal endpoint skips resolution.

The user's path: when the endpoint's requests go through a proxy from the environment (as
`llmdoctor.proxies.target_route` decides it for the probe client, ``NO_PROXY`` included), this
machine never resolves the endpoint's name (the proxy does); each new connection resolves the
proxy's. The probe then times that lookup (``host`` is the proxy's name, ``proxy`` says which
proxy, ``endpoint_host`` the endpoint's name), and a proxy given as an IP address skips it.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmdoctor.context import Context

__all__ = [
    "DnsQuery",
    "DnsResult",
    "ResolverTiming",
    "is_ip_literal",
    "parse_dns_servers",
    "parse_resolv_conf",
    "hosts_file_addresses",
    "resolve",
    "system_lookup",
]

RESOLV_CONF = "/etc/resolv.conf"
HOSTS_FILE = "/etc/hosts"
# glibc's defaults when resolv.conf sets no "options timeout:/attempts:".
GLIBC_TIMEOUT_S = 5.0
GLIBC_ATTEMPTS = 2
# The probe's own limit: never wait longer than this for one query.
QUERY_TIMEOUT_S = 2.0


@dataclass
class DnsQuery:
    """One A or AAAA query sent to one DNS server."""

    rdtype: str
    ms: float | None = None
    answers: list[str] = field(default_factory=list)
    ttl: int | None = None
    rcode: str = ""
    error: str = ""

    @property
    def answered(self) -> bool:
        """The server answered (any rcode but SERVFAIL/REFUSED), without timing out."""
        return not self.error and self.rcode not in ("SERVFAIL", "REFUSED", "")


@dataclass
class ResolverTiming:
    """A and AAAA lookups of the endpoint host on one DNS server."""

    server: str
    source: str
    queries: list[DnsQuery] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """At least one query got a usable answer."""
        return any(q.answered for q in self.queries)

    @property
    def timed_out(self) -> bool:
        """Every query timed out: a dead or unreachable server."""
        return bool(self.queries) and all(q.error == "timeout" for q in self.queries)

    @property
    def lookup_ms(self) -> float | None:
        """What one lookup costs: the slower of A and AAAA (resolvers send both in parallel)."""
        times = [q.ms for q in self.queries if q.answered and q.ms is not None]
        return max(times) if times else None


@dataclass
class DnsResult:
    """How the endpoint's host name resolves, and how long it takes."""

    host: str
    is_ip_literal: bool
    system_ms: float | None = None
    system_addresses: list[str] = field(default_factory=list)
    system_error: str = ""
    note: str = ""
    hosts_file_addresses: list[str] = field(default_factory=list)
    resolvers: list[ResolverTiming] = field(default_factory=list)
    explicit_servers: bool = False
    resolver_timeout_s: float = GLIBC_TIMEOUT_S
    resolver_attempts: int = GLIBC_ATTEMPTS
    query_timeout_s: float = QUERY_TIMEOUT_S
    queries_sent: int = 0
    #: The proxy the requests go through (masked URL; "" when direct): `host` is then its name.
    proxy: str = ""
    #: The endpoint's own name when `host` is the proxy's ("" when direct).
    endpoint_host: str = ""

    @property
    def whose(self) -> str:
        """What `host` names, for a message: "" for the endpoint, or which proxy it is."""
        if not self.proxy:
            return ""
        return (f" (the proxy {self.proxy}: the requests to {self.endpoint_host} go through it, "
                "and it resolves that name)")

    @property
    def working_resolver(self) -> ResolverTiming | None:
        """The first resolver, in order, that answered."""
        return next((r for r in self.resolvers if r.ok), None)

    @property
    def failing_resolvers(self) -> list[ResolverTiming]:
        """Resolvers tried before the first working one that did not answer."""
        out = []
        for r in self.resolvers:
            if r.ok:
                break
            out.append(r)
        return out

    @property
    def fallback_penalty_ms(self) -> float:
        """Time a client waits on failing resolvers before one answers (per lookup)."""
        total = 0.0
        for r in self.failing_resolvers:
            if r.timed_out:
                total += self.resolver_timeout_s * 1000
            else:
                total += max((q.ms or 0.0) for q in r.queries) if r.queries else 0.0
        return total

    @property
    def lookup_ms(self) -> float | None:
        """What resolving the host costs a new connection, in ms (None if unknown or no lookup).

        The system resolver's time, unless DNS servers were given explicitly (or the system
        lookup failed): then the first working server's time plus the fallback penalty.
        """
        if self.is_ip_literal:
            return None
        if self.hosts_file_addresses and self.system_ms is not None:
            return self.system_ms
        working = self.working_resolver
        resolver_ms = None if working is None else (working.lookup_ms or 0.0) + self.fallback_penalty_ms
        if self.explicit_servers or self.system_ms is None or self.system_error:
            return resolver_ms
        return self.system_ms

    @property
    def min_ttl(self) -> int | None:
        """Shortest TTL among the answers (a short TTL means repeated lookups)."""
        ttls = [q.ttl for r in self.resolvers for q in r.queries if q.ttl is not None]
        return min(ttls) if ttls else None


def is_ip_literal(host: str) -> bool:
    """True when `host` is an IPv4 or IPv6 address rather than a name."""
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def parse_dns_servers(value: str) -> list[tuple[str, int]]:
    """Parse ``IP[:PORT]`` (``[v6]:PORT`` for IPv6), several separated by commas.

    Raises ValueError on anything that is not an IP address and port.
    """
    servers = []
    for item in (v.strip() for v in value.split(",")):
        if not item:
            continue
        host, port = item, 53
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            if rest:
                port = int(rest.lstrip(":"))
        elif item.count(":") == 1:
            host, _, p = item.partition(":")
            port = int(p)
        ipaddress.ip_address(host)
        if not 0 < port < 65536:
            raise ValueError(f"DNS server port out of range: {item!r}")
        servers.append((host, port))
    if not servers:
        raise ValueError("no DNS server given")
    return servers


def parse_resolv_conf(text: str) -> tuple[list[str], float, int]:
    """Nameservers, ``options timeout:`` (s) and ``attempts:`` of a resolv.conf text."""
    servers: list[str] = []
    timeout, attempts = GLIBC_TIMEOUT_S, GLIBC_ATTEMPTS
    for line in text.splitlines():
        words = line.split("#", 1)[0].split(";", 1)[0].split()
        if len(words) >= 2 and words[0] == "nameserver":
            servers.append(words[1].split("%", 1)[0])
        elif words and words[0] == "options":
            for opt in words[1:]:
                key, _, val = opt.partition(":")
                try:
                    if key == "timeout":
                        timeout = float(val)
                    elif key == "attempts":
                        attempts = int(val)
                except ValueError:
                    continue
    return servers, timeout, attempts


def hosts_file_addresses(host: str, text: str) -> list[str]:
    """Addresses that a hosts-file text gives `host` (an override of DNS)."""
    wanted = host.lower().rstrip(".")
    out: list[str] = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) >= 2 and wanted in (w.lower() for w in words[1:]) and words[0] not in out:
            out.append(words[0])
    return out


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def system_lookup(host: str, port: int, timeout_s: float) -> tuple[float | None, list[str], str]:
    """``getaddrinfo`` on a helper thread, so a hung resolver cannot hang the probe."""
    box: dict[str, object] = {}

    def work() -> None:
        started = time.perf_counter()
        try:
            box["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            box["error"] = f"{type(exc).__name__}: {exc}"
        box["ms"] = (time.perf_counter() - started) * 1000

    thread = threading.Thread(target=work, name="llmdoctor-getaddrinfo", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        return None, [], f"timeout: no answer within {timeout_s:g} s"
    if "error" in box:
        return box.get("ms"), [], str(box["error"])  # type: ignore[return-value]
    infos = box["infos"]
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))  # type: ignore[attr-defined]
    return box["ms"], addresses, ""  # type: ignore[return-value]


def _query(host: str, rdtype: str, server: str, port: int, timeout_s: float) -> DnsQuery:
    import dns.exception
    import dns.flags
    import dns.message
    import dns.query
    import dns.rcode
    import dns.rdatatype

    result = DnsQuery(rdtype=rdtype)
    request = dns.message.make_query(host.rstrip(".") + ".", rdtype)
    started = time.perf_counter()
    try:
        response = dns.query.udp(request, server, port=port, timeout=timeout_s)
        if response.flags & dns.flags.TC:
            remaining = max(0.1, timeout_s - (time.perf_counter() - started))
            response = dns.query.tcp(request, server, port=port, timeout=remaining)
    except dns.exception.Timeout:
        result.error = "timeout"
        return result
    except (OSError, dns.exception.DNSException) as exc:
        result.ms = (time.perf_counter() - started) * 1000
        result.error = f"{type(exc).__name__}: {exc}"
        return result
    result.ms = (time.perf_counter() - started) * 1000
    result.rcode = dns.rcode.to_text(response.rcode())
    wanted = dns.rdatatype.from_text(rdtype)
    for rrset in response.answer:
        if rrset.rdtype == wanted:
            result.answers.extend(r.to_text() for r in rrset)
        result.ttl = rrset.ttl if result.ttl is None else min(result.ttl, rrset.ttl)
    return result


def _servers(ctx: Context, result: DnsResult) -> list[tuple[str, int, str]]:
    if ctx.options.network.dns_server:
        result.explicit_servers = True
        try:
            parsed = parse_dns_servers(ctx.options.network.dns_server)
        except ValueError as exc:
            from llmdoctor.context import ProbeUnavailable

            raise ProbeUnavailable(f"bad --dns-server {ctx.options.network.dns_server!r}: {exc}") from None
        return [(h, p, "--dns-server") for h, p in parsed]
    names, timeout, attempts = parse_resolv_conf(_read(RESOLV_CONF))
    result.resolver_timeout_s, result.resolver_attempts = timeout, attempts
    return [(n, 53, RESOLV_CONF) for n in names]


def resolve(ctx: Context) -> DnsResult:
    """Time the system resolver and each DNS server on the endpoint's host."""
    from concurrent.futures import ThreadPoolExecutor  # here: it costs start-up time

    from llmdoctor.context import ProbeUnavailable
    from llmdoctor.proxies import proxy_host, target_route

    if ctx.target is None:
        raise ProbeUnavailable("no endpoint given")
    host, port = ctx.target.host, ctx.target.port
    route = target_route(ctx.target)
    proxied = proxy_host(route)
    proxy, endpoint_host = "", ""
    if proxied is not None:  # the user's path: this machine resolves the proxy's name, not the endpoint's
        proxy, endpoint_host = route.settings.proxy_url or "", host
        host, port = proxied
    if is_ip_literal(host):
        note = (f"the requests go through the proxy {proxy}, an IP address: no DNS lookup on this machine "
                f"(the proxy resolves {endpoint_host})" if proxy else "the endpoint is an IP address: no DNS lookup")
        return DnsResult(host=host, is_ip_literal=True, note=note, proxy=proxy, endpoint_host=endpoint_host)
    timeout_s = min(QUERY_TIMEOUT_S, ctx.options.request.timeout_s)
    result = DnsResult(host=host, is_ip_literal=False, query_timeout_s=timeout_s, proxy=proxy,
                       endpoint_host=endpoint_host)
    result.hosts_file_addresses = hosts_file_addresses(host, _read(HOSTS_FILE))
    if result.hosts_file_addresses:
        result.note = f"{HOSTS_FILE} overrides DNS for {host}"
    result.system_ms, result.system_addresses, result.system_error = system_lookup(
        host, port, ctx.cap_timeout(timeout_s)
    )

    servers = _servers(ctx, result)
    for server, server_port, source in servers:
        label = f"[{server}]:{server_port}" if ":" in server else f"{server}:{server_port}"
        timing = ResolverTiming(server=label, source=source)
        # A and AAAA go out together, as glibc and most stub resolvers send them.
        with ThreadPoolExecutor(max_workers=2) as pool:
            query_timeout = ctx.cap_timeout(timeout_s)  # within --deadline
            futures = [pool.submit(_query, host, t, server, server_port, query_timeout) for t in ("A", "AAAA")]
            timing.queries = [f.result() for f in futures]
        result.queries_sent += len(timing.queries)
        result.resolvers.append(timing)
        if timing.ok and not result.explicit_servers:
            break  # a client stops at the first server that answers

    return result

