"""The embedded simulator on the command line: `demo`, `serve-sim`, and the demo endpoint of `check`."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import click

from llmdoctor.cli.output import emit
from llmdoctor.cli.output import progress as show_progress
from llmdoctor.cli.usage import UsageProblem

__all__ = ["demo", "demo_server", "serve_sim"]


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
            click.echo(f"Diagnosing the embedded simulator '{sim_profile.name}' on "
                       f"{server.base_url} ({sim_profile.description})\n", err=True)
        yield server.base_url


@click.command()
@click.option("--profile", default="demo", show_default=True, help="Simulator profile (see serve-sim --list).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def demo(profile: str, as_json: bool) -> None:
    """Start the built-in simulator and diagnose it: a full run with no LLM server around.

    The default profile has a high fixed cost per request and a cold start;
    try --profile slow-decode, long-prefill, slow-floor or close-connections (queueing only shows
    under concurrent load: `serve-sim --profile queueing` and `check --concurrency 4`).
    Exits 0 when the diagnosis ran (whatever it found), 3 when it could not or was interrupted.
    """
    from llmdoctor.doctor import diagnose
    from llmdoctor.render import render
    from llmdoctor.target import Options, Target

    fmt = "json" if as_json else "text"
    with demo_server(profile, announce=not as_json) as base_url:
        progress = show_progress(not as_json)
        try:
            report, _ = diagnose(Target(base_url=base_url), Options(), progress=progress)
        finally:
            if progress is not None:
                progress.stop()
    emit(render(report, fmt), None)
    sys.exit(3 if report.interrupted else 0)  # Ctrl-C/SIGTERM: a partial diagnosis


@click.command(name="serve-sim")
@click.option("--profile", default="healthy", show_default=True, help="Latency/fault profile.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (keep it on loopback).")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="Port (0 = any free).")
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
    except OSError as exc:  # the bind: a name that does not resolve, an address not ours, a port in use
        raise UsageProblem(f"--host {host} --port {port}: cannot listen there ({exc.strerror or exc})") from None
