"""The route of the probe client's requests: direct, or through the proxy the environment names.

One decision, used twice: the probe client builds its httpx transports from it (so httpx does
exactly what is decided here, not its own reading of the environment), and the report says it
(`ProxySettings`, shown by LD409).

- The proxy variables are read as Python's ``urllib.request.getproxies()`` reads them (and
  httpx with ``trust_env``): ``http_proxy``, ``https_proxy``, ``all_proxy``, upper or lower case,
  the lower-case one winning; the scheme's own variable before ``ALL_PROXY``. A value without a
  scheme is an ``http://`` proxy.
- ``NO_PROXY`` follows curl's documentation (CURLOPT_NOPROXY): a comma- or space-separated
  list; ``*`` alone exempts every host; a name matches the host itself and every host in its
  domain (``example.com`` matches ``www.example.com``, not ``notexample.com``), a leading dot
  (or ``*.``) and a trailing dot are ignored; an IP address matches that address, a CIDR range
  (``10.0.0.0/8``, ``fd00::/8``) every address in it; IPv6 addresses are written without
  brackets. Two additions where curl is silent: ``host:port`` (``[v6]:port``) exempts the host
  on that port only, and ``*`` also counts inside a list.
  httpx on its own differs (it ignores CIDR ranges, and ``.example.com`` does not exempt
  ``example.com`` itself there); the doctor builds the client's transports itself, so what it
  reports is what its requests did.
- A proxy that cannot be used (a SOCKS proxy without the ``socksio`` package, an ``ftp://``
  proxy, an unparsable URL such as ``::::x``) is a `ProxyError` — the CLI's usage error, before
  anything is sent — but only when it is the proxy of a URL the run sends to.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from llmdoctor.target import Target, display_url

__all__ = ["ProxyError", "ProxySettings", "Route", "bypass_entry", "carries_credentials", "environment_proxies",
           "proxy_host", "proxy_settings", "proxy_transport", "route_for", "target_route"]

_SEPARATORS = re.compile(r"[,\s]+")
_SCHEMES = ("http", "https", "socks5", "socks5h")


class ProxyError(ValueError):
    """A proxy from the environment that the client cannot use (one line, credentials masked)."""


@dataclass
class ProxySettings:
    """Proxy variables of the environment and whether the endpoint goes through one.

    `variables` are masked (``http://***@proxy:3128``). `variable` names the one that chose the
    proxy, `bypass_rule` the ``NO_PROXY`` entry that exempted the host; `credentials_exposed`:
    the requests go through the proxy in plain HTTP with an API key or credential headers, so
    the proxy can read them.
    """

    variables: dict[str, str] = field(default_factory=dict)
    proxy_url: str | None = None
    bypassed: bool = False
    variable: str = ""
    bypass_rule: str = ""
    credentials_exposed: bool = False

    @property
    def used(self) -> bool:
        """The endpoint's requests go through a proxy."""
        return self.proxy_url is not None and not self.bypassed


@dataclass(frozen=True)
class Route:
    """Where requests to one origin go: `proxy` (the unmasked URL, for the transport) or direct."""

    proxy: str | None
    settings: ProxySettings


def environment_proxies(environ: Mapping[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """``{scheme: (variable, value)}`` of the proxy variables (``no`` for NO_PROXY), as urllib reads them.

    Like ``urllib.request.getproxies_environment``: any case, the lower-case spelling winning
    (an empty lower-case one unsets), ``HTTP_PROXY`` ignored under CGI (``REQUEST_METHOD`` set).
    """
    env = os.environ if environ is None else environ
    found: dict[str, tuple[str, str]] = {}
    for name, value in env.items():
        if value and name.lower().endswith("_proxy"):
            found[name.lower()[:-6]] = (name, value)
    if "REQUEST_METHOD" in env:
        found.pop("http", None)
    for name, value in env.items():
        if name.endswith("_proxy") and name == name.lower():
            if value:
                found[name[:-6]] = (name, value)
            else:
                found.pop(name[:-6], None)
    return found


def _split_port(token: str) -> tuple[str, int | None] | None:
    """(name, port) of a NO_PROXY entry; None for an entry with a port that is not a number."""
    if token.startswith("["):  # [v6] or [v6]:port
        inside, _, rest = token[1:].partition("]")
        if not rest:
            return inside, None
        return (inside, int(rest[1:])) if rest.startswith(":") and rest[1:].isdigit() else None
    if token.count(":") == 1:  # host:port (a bare IPv6 address has several colons)
        name, _, port = token.partition(":")
        return (name, int(port)) if port.isdigit() else None
    return token, None


def bypass_entry(host: str, port: int, no_proxy: str) -> str | None:
    """The ``NO_PROXY`` entry that exempts `host`:`port` from the proxy (None: none does)."""
    if not no_proxy.strip():
        return None
    host = host.strip("[]").lower()
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        address, host = None, host.removesuffix(".")
    for token in _SEPARATORS.split(no_proxy.strip()):
        if not token:
            continue
        if token == "*":
            return token
        split = _split_port(token)
        if split is None:
            continue
        name, entry_port = split
        if entry_port is not None and entry_port != port:
            continue
        if address is not None:  # an IP host matches IP entries only, as in curl
            try:
                if address in ipaddress.ip_network(name, strict=False):
                    return token
            except ValueError:
                continue
            continue
        name = name.lower().removesuffix(".").removeprefix("*").removeprefix(".")
        if name and (host == name or host.endswith("." + name)):
            return token
    return None


def _proxy_url(value: str) -> str:
    return value if "://" in value else "http://" + value


def route_for(scheme: str, host: str, port: int, *, credentials: bool = False,
              environ: Mapping[str, str] | None = None) -> Route:
    """The route of requests to ``scheme://host:port`` (`credentials`: they carry a key or credential headers)."""
    found = environment_proxies(environ)
    variables = {f"{k}_proxy": display_url(v) for k, (_, v) in sorted(found.items()) if k != "no"}
    if "no" in found:
        variables["no_proxy"] = found["no"][1]
    chosen = found.get(scheme) or found.get("all")
    settings = ProxySettings(variables=variables)
    if chosen is None:
        return Route(None, settings)
    variable, value = chosen
    settings.variable = variable
    settings.proxy_url = display_url(_proxy_url(value))
    rule = bypass_entry(host, port, found["no"][1]) if "no" in found else None
    if rule is not None:
        settings.bypassed, settings.bypass_rule = True, rule
        return Route(None, settings)
    settings.credentials_exposed = credentials and scheme == "http"
    return Route(_proxy_url(value), settings)


def target_route(target: Target, environ: Mapping[str, str] | None = None) -> Route:
    """The route of the endpoint's requests, as the probe client takes it (one decision for every probe).

    The probes that stand for the user's requests (the round trip, the name lookup, the sockets
    counted) read it, so they take the path the requests take, ``NO_PROXY`` included.
    """
    return route_for(target.scheme, target.host, target.port, credentials=carries_credentials(target),
                     environ=environ)


def carries_credentials(target: Target) -> bool:
    """Whether the endpoint's requests carry credentials (an API key or a sensitive header): a proxy may
    be chosen by that (`route_for`)."""
    from llmdoctor.redact import is_sensitive_header

    return bool(target.api_key) or any(is_sensitive_header(n) for n, _ in target.headers)


def proxy_host(route: Route) -> tuple[str, int] | None:
    """(host, port) the client connects to for `route`'s proxy (None: direct, or no usable host)."""
    if route.proxy is None:
        return None
    from urllib.parse import urlsplit

    parts = urlsplit(route.proxy)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 1080 if parts.scheme.startswith("socks") else 80)
    except ValueError:
        return None
    return (parts.hostname, port) if parts.hostname else None


def proxy_settings(scheme: str, host: str, port: int | None = None, *, credentials: bool = False,
                   environ: Mapping[str, str] | None = None) -> ProxySettings:
    """What the report says of the route to ``scheme://host:port`` (masked; port defaults by scheme)."""
    port = port if port is not None else (443 if scheme == "https" else 80)
    return route_for(scheme, host, port, credentials=credentials, environ=environ).settings


def proxy_transport(route: Route, **transport_options: Any) -> Any:
    """The httpx transport of `route` (a proxy transport, or a direct one); `ProxyError` if unusable."""
    import httpx

    if route.proxy is None:
        return httpx.HTTPTransport(**transport_options)
    shown = f"{route.settings.variable}={route.settings.proxy_url}"
    try:
        url = httpx.URL(route.proxy)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise ProxyError(f"{shown}: not a proxy URL the client can use ({exc})") from None
    if url.scheme not in _SCHEMES:
        raise ProxyError(f"{shown}: unsupported proxy scheme {url.scheme!r} (use http://, https://, "
                         "socks5:// or socks5h://)")
    if not url.host:
        raise ProxyError(f"{shown}: the proxy URL has no host")
    try:
        return httpx.HTTPTransport(proxy=httpx.Proxy(url), **transport_options)
    except ImportError:
        raise ProxyError(f"{shown}: a SOCKS proxy needs the socksio package "
                         "(pip install 'httpx[socks]')") from None
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise ProxyError(f"{shown}: not a proxy the client can use ({exc})") from None
