"""Debian's tinyproxy (1.11) on loopback, with its own config in a temp dir, as a proxy from the environment.

    with Tinyproxy() as proxy:                       # HTTP_PROXY=proxy.url
        ...

It forwards to any host (``Allow 127.0.0.1`` only lets loopback clients in), opens a new
connection upstream for each request and asks the upstream to close it, and strips hop-by-hop
``Connection`` headers (environment-notes, 2026-12-02). Started in the foreground (``-d``) as a child
process in its own session and stopped with it; `available()` says whether it is installed.
"""

from __future__ import annotations

from tests.gateways import Gateway

__all__ = ["Tinyproxy"]


class Tinyproxy(Gateway):
    """tinyproxy as a forward proxy: no upstream of its own (it connects where each request says)."""

    binary = "tinyproxy"

    def __init__(self) -> None:
        super().__init__([("127.0.0.1", 9)])  # Gateway wants one; a forward proxy takes the request's

    def config(self) -> str:
        d = self.dir
        return f"""Port {self.port}
Listen 127.0.0.1
Timeout 60
MaxClients 64
Allow 127.0.0.1
LogFile "{d}/tinyproxy.log"
LogLevel Info
PidFile "{d}/tinyproxy.pid"
DisableViaHeader Yes
"""

    def command(self, binary: str) -> list[str]:
        return [binary, "-d", "-c", str(self.config_path)]
