"""A real DNS responder on loopback (UDP and TCP), built with dnspython, for probe tests.

    with DnsResponder({"llm.test": {"A": ["127.0.0.1"], "AAAA": ["::1"]}}, delay_s=0.15) as dns_srv:
        Options.of(dns_server=dns_srv.address)

Each query is answered on its own thread after `delay_s` (so delays do not queue up), with
the records of the name (case-insensitive, trailing dot optional) and `ttl`. Unknown names get
NXDOMAIN. `mode="silent"` never answers (a dead resolver); `mode="servfail"` answers SERVFAIL.
`queries` counts the queries received. Only ever binds 127.0.0.1.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any

import dns.flags
import dns.message
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

__all__ = ["DnsResponder"]


class DnsResponder:
    """UDP+TCP DNS server on 127.0.0.1 with injectable delay, answers, TTL and failure modes."""

    def __init__(
        self,
        records: dict[str, dict[str, list[str]]] | None = None,
        *,
        delay_s: float = 0.0,
        ttl: int = 300,
        mode: str = "answer",
    ) -> None:
        if mode not in ("answer", "silent", "servfail"):
            raise ValueError(f"unknown mode {mode!r}")
        self.records = {k.lower().rstrip("."): v for k, v in (records or {}).items()}
        self.delay_s = delay_s
        self.ttl = ttl
        self.mode = mode
        self.queries = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._udp: socket.socket | None = None
        self._tcp: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self.port = 0

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``, the form `Options.dns_server` takes."""
        return f"127.0.0.1:{self.port}"

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> DnsResponder:
        for _ in range(20):
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            udp.bind(("127.0.0.1", 0))
            port = udp.getsockname()[1]
            tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                tcp.bind(("127.0.0.1", port))
            except OSError:
                udp.close()
                tcp.close()
                continue
            tcp.listen(16)
            udp.settimeout(0.05)  # so the serving threads notice stop() promptly
            tcp.settimeout(0.05)
            self._udp, self._tcp, self.port = udp, tcp, port
            break
        else:
            raise RuntimeError("could not bind UDP and TCP on the same loopback port")
        for target in (self._serve_udp, self._serve_tcp):
            t = threading.Thread(target=target, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=2)
        for sock in (self._udp, self._tcp):
            if sock is not None:
                sock.close()

    def __enter__(self) -> DnsResponder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- answering ------------------------------------------------------------------------------
    def _answer(self, wire: bytes) -> bytes | None:
        with self._lock:
            self.queries += 1
        if self.mode == "silent":
            return None
        query = dns.message.from_wire(wire)
        response = dns.message.make_response(query)
        response.flags |= dns.flags.RA
        if self.mode == "servfail":
            response.set_rcode(dns.rcode.SERVFAIL)
        else:
            question = query.question[0]
            name = question.name.to_text().lower().rstrip(".")
            rdtype = dns.rdatatype.to_text(question.rdtype)
            entry = self.records.get(name)
            if entry is None:
                response.set_rcode(dns.rcode.NXDOMAIN)
            elif entry.get(rdtype):
                rrset = dns.rrset.from_text_list(
                    question.name, self.ttl, dns.rdataclass.IN, rdtype, entry[rdtype]
                )
                response.answer.append(rrset)
        if self.delay_s:
            self._stop.wait(self.delay_s)
        return response.to_wire()

    def _serve_udp(self) -> None:
        assert self._udp is not None
        while not self._stop.is_set():
            try:
                wire, peer = self._udp.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._reply_udp, args=(wire, peer), daemon=True).start()

    def _reply_udp(self, wire: bytes, peer: Any) -> None:
        answer = self._answer(wire)
        if answer is not None and self._udp is not None:
            try:
                self._udp.sendto(answer, peer)
            except OSError:
                pass

    def _serve_tcp(self) -> None:
        assert self._tcp is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._tcp.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._reply_tcp, args=(conn,), daemon=True).start()

    def _reply_tcp(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5.0)
            try:
                head = conn.recv(2)
                if len(head) < 2:
                    return
                (length,) = struct.unpack("!H", head)
                wire = b""
                while len(wire) < length:
                    part = conn.recv(length - len(wire))
                    if not part:
                        return
                    wire += part
                answer = self._answer(wire)
                if answer is None:
                    self._stop.wait(30)
                    return
                conn.sendall(struct.pack("!H", len(answer)) + answer)
                time.sleep(0.01)
            except OSError:
                return
