"""Real network paths for tests, where ``tc netem`` cannot run: a delayed link and dead addresses.

Both need root and ``ip`` (iproute2); `available()` says whether they can run here, and why not.

``DelayedPath(one_way_s)`` — a real IP path with a one-way delay, so the kernel's own TCP
handshake, TLS and every packet pay the round trip (a user-space proxy can only delay bytes
after the kernel has completed the handshake)::

    with DelayedPath(0.025) as path:                 # RTT 50 ms
        port = path.forward(("127.0.0.1", sim.port))  # listens on path.address inside the far end
        httpx.get(f"http://{path.address}:{port}/v1/models")

It creates a network namespace and two TUN devices: ``tunA`` here (``10.x.y.1``, peer
``10.x.y.2``) and ``tunB`` in the namespace (``10.x.y.2``). A thread pair reads each IP
packet from one device and writes it into the other `one_way_s` later, in order — a delay
line (a process of its own) between two real network stacks. `forward` listens inside the namespace and relays each
connection, without delay, to a loopback server of this namespace.

``DeadAddresses(stall_s)`` — addresses on a real link where nobody answers ARP or NDP: a
``connect()`` to them stalls, then fails with ``EHOSTUNREACH`` ("No route to host") once
neighbour discovery gives up, after ``mcast_solicit`` probes of ``retrans_time_ms`` each (set
on this link only, so the stall is `stall_s`). That is what a client meets when a DNS name
points at a host that is gone from its LAN (an IPv6 address left in DNS, a dead replica). A
veth pair whose far end sits, address-less, in a namespace of its own. `silent_ipv4` and
`silent_ipv6` have a permanent neighbour entry with a MAC nobody owns: their packets leave and
are dropped without a word, so ``connect()`` waits until the caller's timeout (a firewall that
drops, a black-holed route).

Names carry the test process's id; `stop()` (or leaving the ``with``) deletes the namespace
and devices, and `start()` first removes leftovers of test processes that no longer exist.
"""

from __future__ import annotations

import ctypes
import fcntl
import itertools
import os
import random
import re
import shutil
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

from tests.tiers import require_slow

__all__ = ["DeadAddresses", "DelayedPath", "available"]

T = TypeVar("T")

_TUNSETIFF = 0x400454CA
_IFF_TUN, _IFF_NO_PI = 0x0001, 0x1000
_CLONE_NEWNET = 0x40000000
_NOBODY_MAC = "02:00:5e:00:53:99"  # locally administered: no real card has it
_PREFIX = "ldp"  # every namespace and device made here starts with it
_counter = itertools.count()


def available() -> str:
    """Empty when real paths can be built here, else why not (a skip reason)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces and TUN/veth devices)"
    if shutil.which("ip") is None:
        return "needs iproute2's `ip`"
    if not os.path.exists("/dev/net/tun"):
        return "needs /dev/net/tun"
    return ""


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True, timeout=10)


def _name(kind: str) -> str:
    return f"{_PREFIX}{kind}{os.getpid() % 100000}x{next(_counter)}"  # at most 15 chars


def _clean_leftovers() -> None:
    """Remove namespaces and devices of earlier test processes that died before their clean-up."""
    pattern = re.compile(rf"^{_PREFIX}[a-z](\d+)x\d+$")
    listed = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    devices = [m.split(":")[1].strip().split("@")[0] for m in listed.splitlines() if ":" in m]
    spaces = [line.split()[0] for line in
              subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines() if line]
    for name in devices + spaces:
        match = pattern.match(name)
        if match is None or _pid_alive(int(match.group(1))):
            continue
        if name in spaces:
            _ip("netns", "del", name, check=False)
        else:
            _ip("link", "del", name, check=False)


def _pid_alive(pid_mod: int) -> bool:
    return any(int(p) % 100000 == pid_mod for p in os.listdir("/proc") if p.isdigit())


def _subnet() -> tuple[int, int]:
    """A random 10.a.b.0 network for this path (10.200-249.x: away from usual LAN and cloud ranges)."""
    return random.randint(200, 249), random.randint(1, 254)


def in_namespace(namespace: str, work: Callable[[], T]) -> T:
    """Run `work` on a thread that has entered `namespace`: sockets and devices it opens live there."""
    libc = ctypes.CDLL(None, use_errno=True)
    box: dict[str, object] = {}

    def run() -> None:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
        try:
            if libc.setns(target, _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns failed")
            try:
                box["value"] = work()
            finally:
                libc.setns(own, _CLONE_NEWNET)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc
        finally:
            os.close(own)
            os.close(target)

    thread = threading.Thread(target=run, name=f"in-{namespace}")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


def _open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", name.encode(), _IFF_TUN | _IFF_NO_PI))
    return fd


class DelayedPath:
    """A real routed path to a network namespace with `one_way_s` of delay in each direction."""

    def __init__(self, one_way_s: float) -> None:
        self.one_way_s = one_way_s
        self.namespace = _name("n")
        self._tun_here, self._tun_there = _name("a"), _name("b")
        a, b = _subnet()
        self.local_address, self.address = f"10.{a}.{b}.1", f"10.{a}.{b}.2"
        self._fds: list[int] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._line: subprocess.Popen[bytes] | None = None

    def start(self) -> DelayedPath:
        require_slow("a real network path (namespaces)")
        _clean_leftovers()
        try:
            _ip("netns", "add", self.namespace)
            _ip("tuntap", "add", "dev", self._tun_here, "mode", "tun")
            _ip("tuntap", "add", "dev", self._tun_there, "mode", "tun")
            _ip("link", "set", self._tun_there, "netns", self.namespace)
            _ip("addr", "add", self.local_address, "peer", self.address, "dev", self._tun_here)
            _ip("link", "set", self._tun_here, "up")
            there = ("netns", "exec", self.namespace, "ip")
            _ip(*there, "addr", "add", self.address, "peer", self.local_address, "dev", self._tun_there)
            _ip(*there, "link", "set", self._tun_there, "up")
            _ip(*there, "link", "set", "lo", "up")
            here_fd = _open_tun(self._tun_here)
            self._fds.append(here_fd)
            there_fd = in_namespace(self.namespace, lambda: _open_tun(self._tun_there))
            self._fds.append(there_fd)
        except BaseException:
            self.stop()
            raise
        # The delay line runs in a process of its own: this one's threads (the servers, the client
        # under test) must not hold it back from the GIL.
        self._line = subprocess.Popen(
            [sys.executable, "-c", _DELAY_LINE, str(self.one_way_s), str(here_fd), str(there_fd)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=(here_fd, there_fd))
        assert self._line.stdout is not None
        if self._line.stdout.readline() != b"ready\n":  # a packet sent before would wait for its start-up
            self.stop()
            raise RuntimeError("the delay line did not start")
        for fd in self._fds:
            os.close(fd)  # the delay line holds them now
        self._fds.clear()
        return self

    def forward(self, upstream: tuple[str, int]) -> int:
        """Listen inside the namespace on `address`; relay each connection to `upstream` (here, no delay)."""

        def listen() -> socket.socket:
            sock = socket.socket()
            sock.bind((self.address, 0))
            sock.listen(64)
            return sock

        listener = in_namespace(self.namespace, listen)
        listener.settimeout(0.05)
        self._sockets.append(listener)
        self._spawn(self._accept, listener, upstream)
        return int(listener.getsockname()[1])

    def stop(self) -> None:
        self._stop.set()
        if self._line is not None:
            assert self._line.stdin is not None
            self._line.stdin.close()  # its end of the pipe closes: it exits
            try:
                self._line.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._line.kill()
                self._line.wait()
        for thread in self._threads:
            thread.join(timeout=2)
        for sock in self._sockets:
            _close(sock)
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()
        _ip("netns", "del", self.namespace, check=False)  # takes tunB with it
        _ip("link", "del", self._tun_here, check=False)

    def __enter__(self) -> DelayedPath:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self, listener: socket.socket, upstream: tuple[str, int]) -> None:
        while not self._stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(upstream, timeout=5)
            except OSError:
                _close(client)
                continue
            for sock in (client, server):
                sock.settimeout(None)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._sockets.append(sock)
            self._spawn(_pump, client, server)
            self._spawn(_pump, server, client)


# Packets read from one TUN device are written to the other `one_way_s` later, in arrival order;
# both directions; says "ready" once it reads, exits when its stdin closes (the test ended, or died).
_DELAY_LINE = r"""
import collections, os, select, sys, threading, time

one_way, a, b = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])

def line(src, dst):
    pending, ready = collections.deque(), threading.Condition()

    def deliver():
        while True:
            with ready:
                while not pending:
                    ready.wait()
                due, packet = pending[0]
                if due > time.monotonic():
                    ready.wait(due - time.monotonic())
                    continue
                pending.popleft()
            try:
                os.write(dst, packet)
            except OSError:
                pass

    threading.Thread(target=deliver, daemon=True).start()
    while True:
        select.select([src], [], [])
        packet = os.read(src, 65536)
        with ready:
            pending.append((time.monotonic() + one_way, packet))
            ready.notify()

for src, dst in ((a, b), (b, a)):
    threading.Thread(target=line, args=(src, dst), daemon=True).start()
sys.stdout.write("ready\n")
sys.stdout.flush()
sys.stdin.buffer.read()
"""


def _pump(src: socket.socket, dst: socket.socket) -> None:
    while True:
        try:
            data = src.recv(65536)
        except OSError:
            data = b""
        if not data:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            return
        try:
            dst.sendall(data)
        except OSError:
            return


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class DeadAddresses:
    """Addresses on a real link where nobody answers: connect() stalls `stall_s`, or until its timeout."""

    PROBES = 3  # the kernel's default mcast_solicit

    def __init__(self, stall_s: float = 1.5) -> None:
        self.stall_s = stall_s
        self.namespace = _name("n")
        self._here, self._there = _name("v"), _name("w")
        a, b = _subnet()
        self.ipv4 = f"10.{a}.{b}.2"
        self.ipv6 = f"fd{a:02x}:{b:x}::2"
        self.silent_ipv4, self.silent_ipv6 = f"10.{a}.{b}.3", f"fd{a:02x}:{b:x}::3"
        self._local4, self._local6 = f"10.{a}.{b}.1/24", f"fd{a:02x}:{b:x}::1/64"

    def start(self) -> DeadAddresses:
        require_slow("a real network path (namespaces)")
        _clean_leftovers()
        try:
            _ip("netns", "add", self.namespace)
            _ip("link", "add", self._here, "type", "veth", "peer", "name", self._there, "netns", self.namespace)
            _ip("addr", "add", self._local4, "dev", self._here)
            _ip("-6", "addr", "add", self._local6, "dev", self._here, "nodad")
            retrans_ms = str(max(1, round(self.stall_s * 1000 / self.PROBES)))
            for family in ("ipv4", "ipv6"):
                base = f"/proc/sys/net/{family}/neigh/{self._here}"
                with open(f"{base}/mcast_solicit", "w") as f:
                    f.write(str(self.PROBES))
                with open(f"{base}/retrans_time_ms", "w") as f:
                    f.write(retrans_ms)
            _ip("link", "set", self._here, "up")
            _ip("netns", "exec", self.namespace, "ip", "link", "set", self._there, "up")
            for address in (self.silent_ipv4, self.silent_ipv6):
                _ip("neigh", "add", address, "lladdr", _NOBODY_MAC, "dev", self._here, "nud", "permanent")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        _ip("netns", "del", self.namespace, check=False)  # takes the veth pair with it
        _ip("link", "del", self._here, check=False)

    def __enter__(self) -> DeadAddresses:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
