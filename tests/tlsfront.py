"""A TLS-terminating front on loopback: real https (trustme certificates) before a plain-http server.

    ca = trustme.CA()
    with TlsFront(("127.0.0.1", sim.port), ca.issue_cert("127.0.0.1")) as front:
        httpx.get(f"https://127.0.0.1:{front.port}/v1/models", verify=ca_file)

Each accepted connection is handshaken with the given certificate (ALPN ``http/1.1``, as
the simulator speaks only HTTP/1.1) and its bytes relayed both ways to `upstream`; one
asyncio loop on a thread of its own does all of it, so TLS reads and writes never race.
`handshakes` counts completed handshakes. Listens on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from typing import Any

__all__ = ["TlsFront"]


class TlsFront:
    """TLS terminator relaying to a loopback TCP server."""

    def __init__(self, upstream: tuple[str, int], cert: Any, alpn: tuple[str, ...] = ("http/1.1",)) -> None:
        self.upstream = upstream
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(self.context)
        self.context.set_alpn_protocols(list(alpn))
        self.handshakes = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(lambda _loop, _context: None)  # clients that hang up mid-handshake
        self._thread = threading.Thread(target=self._loop.run_forever, name="tls-front", daemon=True)
        self._server: asyncio.base_events.Server | None = None

    def start(self) -> TlsFront:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.context), self._loop)
        self._server = future.result(timeout=10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)  # reaped: no "never retrieved" noise

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> TlsFront:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.handshakes += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer), return_exceptions=True)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (OSError, ssl.SSLError):
        pass
    finally:
        try:
            writer.close()
        except (OSError, RuntimeError):
            pass
