"""Real gateways on loopback for the tests: Debian's nginx and haproxy, each with its own config.

    with Nginx(upstreams=[("127.0.0.1", sim.port)]) as gw:            # nginx defaults: proxy_buffering on
        check(gw.url)
    with Nginx(upstreams=[...], directives=["proxy_buffering off;"]) as gw: ...
    with Nginx(upstreams=[fast, slow]) as gw: ...                      # round-robin balancer
    with Nginx(upstreams=[...], http_directives=["limit_req_zone $binary_remote_addr zone=gen:1m rate=1r/s;"],
               locations={"/v1/chat/completions": ["limit_req zone=gen;"]}) as gw: ...   # a rate limit in front
    with Haproxy(upstreams=[("127.0.0.1", sim.port)]) as gw: ...

Each gateway listens on a free port of 127.0.0.1 with its configuration, pid file, logs and
temporary files in its own directory (nothing of the system's nginx or haproxy is used or
touched), is started as a child process and stopped (SIGTERM, then SIGKILL) on exit. The
config is kept as the gateway's documentation: `config_text`, written to `config_path`.

nginx (1.22, package ``nginx-light``): ``location /`` proxies to an ``upstream`` block with
``proxy_http_version 1.1`` and ``Connection ""`` (nginx speaks HTTP/1.0 to upstreams
otherwise, and closes each upstream connection); ``Nginx(..., http11=False)`` keeps nginx's own
defaults (HTTP/1.0 to the upstream, no keep-alive): what a bare ``proxy_pass`` gives.
``directives`` go inside each proxied location (``proxy_buffering off;``, ``proxy_buffer_size 64k;`` …),
``server_directives`` in each upstream server line (``weight=2``), ``http_directives`` in the ``http``
block (``limit_req_zone …``), ``locations`` adds proxied locations with directives of their own
(``limit_req zone=gen;`` on the generation path only), ``blocks`` adds whole location blocks (an
``internal`` auth endpoint for ``auth_request`` …), and ``modules`` are loaded with ``load_module``
(``Nginx.ECHO``: Debian's ``libnginx-mod-http-echo``).

Measured with nginx 1.22 and its default ``proxy_buffering on``: a *chunked* upstream stream
is passed on chunk by chunk, but a stream delimited by closing the connection — what an HTTP/1.0
request gets from uvicorn or the simulator — is held until it ends (or a buffer fills), unless
the upstream sends ``X-Accel-Buffering: no`` (as llama-cpp-python's sse-starlette does) and nginx
does not ``proxy_ignore_headers X-Accel-Buffering``. haproxy (2.6): ``mode http``, round-robin over the
upstreams, ``http-reuse`` default; ``directives`` go into the backend section.

`available()` says whether the binary is installed (tests skip with that reason, or fail in CI
when ``LLMDOCTOR_REQUIRE_GATEWAYS=1``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import pytest

from tests.tiers import require_slow

__all__ = ["Gateway", "Haproxy", "Nginx", "require"]

READY_TIMEOUT_S = 15.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _missing(reason: str) -> None:
    """Skip with `reason`, or fail when ``LLMDOCTOR_REQUIRE_GATEWAYS=1`` (CI) requires the gateways."""
    if os.environ.get("LLMDOCTOR_REQUIRE_GATEWAYS") == "1":
        pytest.fail(reason + "; LLMDOCTOR_REQUIRE_GATEWAYS=1 requires it")
    pytest.skip(reason)


def require(binary: str) -> str:
    """The path of `binary`, or skip (fail under ``LLMDOCTOR_REQUIRE_GATEWAYS=1``) with the reason."""
    path = shutil.which(binary) or next((p for p in (f"/usr/sbin/{binary}", f"/sbin/{binary}")
                                         if os.access(p, os.X_OK)), None)
    if path is None:
        package = "nginx-light" if binary == "nginx" else binary
        _missing(f"{binary} is not installed (Debian: apt-get install {package})")
    assert path is not None
    return path


class Gateway:
    """A gateway process on a free loopback port, configured from a text file in its own directory."""

    binary = ""

    def __init__(self, upstreams: Sequence[tuple[str, int]], *, directives: Sequence[str] = (),
                 server_directives: str = "", http_directives: Sequence[str] = (),
                 locations: Mapping[str, Sequence[str]] | None = None, http11: bool = True,
                 modules: Sequence[str] = (), blocks: Sequence[str] = ()) -> None:
        if not upstreams:
            raise ValueError("a gateway needs at least one upstream")
        self.upstreams = list(upstreams)
        self.directives = list(directives)
        self.server_directives = server_directives
        self.http_directives = list(http_directives)
        self.locations = {path: list(d) for path, d in (locations or {}).items()}
        self.http11 = http11
        self.modules = list(modules)
        self.blocks = list(blocks)
        self.port = _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"llmdoctor-{self.binary}-"))
        self.config_path = self.dir / f"{self.binary}.conf"
        self.config_text = ""
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL through the gateway."""
        return self.url + "/v1"

    def config(self) -> str:
        raise NotImplementedError

    def command(self, binary: str) -> list[str]:
        raise NotImplementedError

    def log_tail(self, lines: int = 20) -> str:
        """The end of the gateway's error log (for failure messages)."""
        out = []
        for path in sorted(self.dir.glob("*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(out)

    def start(self) -> Gateway:
        require_slow(f"a real {self.binary}")
        binary = require(self.binary)
        for module in self.modules:
            if not os.path.exists(module):
                _missing(f"nginx module {module} is not installed (Debian: apt-get install libnginx-mod-http-echo)")
        self.config_text = self.config()
        self.config_path.write_text(self.config_text)
        log = open(self.dir / "stderr.log", "wb")  # noqa: SIM115 - owned by the process
        self._proc = subprocess.Popen(self.command(binary), stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True, cwd=self.dir)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"{self.binary} exited with {self._proc.returncode}:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.binary} did not listen on {self.port} within {READY_TIMEOUT_S:g} s:\n"
                           f"{self.log_tail()}")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=5)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Gateway:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


class Nginx(Gateway):
    """nginx as a reverse proxy (its defaults unless `directives` change them)."""

    binary = "nginx"
    #: Debian's echo module (package libnginx-mod-http-echo): ``echo_sleep`` gives a real nginx delay.
    ECHO = "/usr/lib/nginx/modules/ngx_http_echo_module.so"

    def _location(self, path: str, directives: Sequence[str]) -> str:
        http11 = ('proxy_http_version 1.1;', 'proxy_set_header Connection "";') if self.http11 else ()
        extra = "".join(f"\n            {d}" for d in (*http11, *self.directives, *directives))
        return f"""        location {path} {{
            proxy_pass http://model;{extra}
        }}"""

    def config(self) -> str:
        servers = "\n".join(f"        server {h}:{p} {self.server_directives};" for h, p in self.upstreams)
        http_extra = "".join(f"\n    {d}" for d in self.http_directives)
        keepalive = "        keepalive 16;\n" if self.http11 else ""
        modules = "".join(f"load_module {m};\n" for m in self.modules)
        blocks = "".join(f"        {block}\n" for block in self.blocks)
        locations = blocks + "\n".join(self._location(path, d) for path, d in [("/", []), *self.locations.items()])
        d = self.dir
        return f"""{modules}daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;{http_extra}
    upstream model {{
{servers}
{keepalive}    }}
    server {{
        listen 127.0.0.1:{self.port};
{locations}
    }}
}}
"""

    def command(self, binary: str) -> list[str]:
        return [binary, "-p", str(self.dir), "-c", str(self.config_path)]


class Haproxy(Gateway):
    """haproxy in HTTP mode, round robin over the upstreams."""

    binary = "haproxy"

    def config(self) -> str:
        servers = "\n".join(f"    server s{i} {h}:{p} {self.server_directives}"
                            for i, (h, p) in enumerate(self.upstreams))
        extra = "\n".join(f"    {d}" for d in self.directives)
        return f"""global
    maxconn 256
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend fe
    bind 127.0.0.1:{self.port}
    default_backend model
backend model
    balance roundrobin
{extra}
{servers}
"""

    def command(self, binary: str) -> list[str]:
        return [binary, "-db", "-f", str(self.config_path)]
