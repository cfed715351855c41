"""The embedded simulator on the command line: `demo`, `serve-sim`, and the demo endpoint of `check`."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import NoReturn

import click

from llmdoctor.cli.output import NO_COLOR_OPTION, Presentation, emit, report_text
from llmdoctor.cli.output import progress as show_progress
from llmdoctor.cli.usage import UsageProblem

__all__ = ["SIM_PORT", "demo", "demo_server", "serve_sim"]

#: serve-sim's default port: one no inference backend listens on by default.
SIM_PORT = 8642


@contextlib.contextmanager
def demo_server(profile: str, *, announce: bool) -> Iterator[str]:
    """Run the embedded simulator for the duration of a command; yields its base URL."""
    from llmdoctor.sim.profiles import get_profile
    from llmdoctor.sim.server import SimServer

    try:
        sim_profile = get_profile(profile)
    except KeyError as exc:
        raise UsageProblem(str(exc.args[0]) if exc.args else f"unknown profile {profile!r}") from None
    with SimServer(sim_profile) as server:
        if announce:
            import shutil
            import textwrap

            line = (f"Diagnosing the embedded simulator '{sim_profile.name}' on {server.base_url} "
                    f"({sim_profile.description})")
            click.echo(textwrap.fill(line, width=shutil.get_terminal_size().columns) + "\n", err=True)
        yield server.base_url


@click.command()
@click.option("--profile", default="demo", show_default=True, help="Simulator profile (see serve-sim --list).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@NO_COLOR_OPTION
def demo(profile: str, as_json: bool, no_color: bool) -> NoReturn:
    """Start the built-in simulator and diagnose it: a full run with no LLM server around.

    The default profile has a high fixed cost per request and a cold start;
    try --profile slow-decode, long-prefill, slow-floor or close-connections (queueing only shows
    under concurrent load: `serve-sim --profile queueing` and `check --concurrency 4`).
    Exits with the code the report prints, as `check` does: 1 (WARNING) on the default profile, whose
    floor and cold start are warnings; 0 on a healthy one; 3 when the diagnosis could not run or was
    interrupted.
    """
    from llmdoctor.doctor import diagnose
    from llmdoctor.options import Options
    from llmdoctor.target import build_target

    fmt = "json" if as_json else "text"
    with demo_server(profile, announce=not as_json) as base_url:
        progress = show_progress(not as_json, color=not no_color)
        try:
            report, _ = diagnose(build_target(base_url, api_key_env=None), Options(), progress=progress)
        finally:
            if progress is not None:
                progress.stop()
    emit(report_text(report, fmt, Presentation(no_color=no_color)), None)
    sys.exit(3 if report.interrupted else report.exit_code)  # Ctrl-C/SIGTERM: a partial diagnosis


@click.command(name="serve-sim")
@click.option("--profile", default="healthy", show_default=True, help="Latency/fault profile.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (keep it on loopback).")
@click.option("--port", type=click.IntRange(0, 65535), default=SIM_PORT, show_default=True,
              help="Port (0 = any free). The default is one no inference server uses by default (vLLM 8000, "
                   "TGI and llama-server 8080, Ollama 11434, SGLang 30000, LM Studio 1234), so the simulator "
                   "never shadows a real one.")
@click.option("--list", "list_profiles", is_flag=True, help="List the profiles and exit.")
def serve_sim(profile: str, host: str, port: int, list_profiles: bool) -> None:
    """Serve the OpenAI-compatible simulator (real SSE streaming, injectable latency and faults)."""
    from llmdoctor.sim.profiles import PROFILES, get_profile
    from llmdoctor.sim.server import SimServer, serve_forever
    from llmdoctor.target import TargetError, check_host

    if list_profiles:
        for name, p in PROFILES.items():
            click.echo(f"{name:<20}{p.description}")
        return
    try:
        sim_profile = get_profile(profile)
    except KeyError as exc:
        raise UsageProblem(str(exc.args[0]) if exc.args else f"unknown profile {profile!r}") from None
    try:
        check_host(host, "--host")
    except TargetError as exc:
        raise UsageProblem(str(exc)) from None

    def ready(server: SimServer) -> None:
        click.echo(f"llmdoctor simulator '{profile}' serving {server.base_url} (Ctrl-C to stop)", err=True)

    try:
        serve_forever(sim_profile, host, port, ready_callback=ready)
    except OSError as exc:  # a busy port, an address not of this host, a name that does not resolve
        raise UsageProblem(f"cannot serve on {host}:{port}: {_bind_error(exc)}") from None


def _bind_error(exc: OSError) -> str:
    import errno
    import socket

    if exc.errno == errno.EADDRINUSE:
        return "the port is already in use (pick another --port, or --port 0 for any free one)"
    if exc.errno == errno.EACCES:
        return "permission denied (ports below 1024 need root; pick another --port)"
    if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
        return "no such address on this host (--host takes one of its addresses, e.g. 127.0.0.1)"
    return exc.strerror or str(exc)
