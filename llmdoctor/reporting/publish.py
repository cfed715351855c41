"""Delivering the Prometheus metrics: a push to a Pushgateway, a node-exporter textfile.

Both take finished results (`EndpointResult`) and never probe. Each endpoint is pushed to its own
group (``job``, ``instance`` = the endpoint label) with an HTTP PUT, which replaces the group, so a
finding that went away disappears from Prometheus. The textfile is written atomically: to a
temporary file in the same directory, then renamed over the old one.

Failures are an `ExportError` with a one-line message that never quotes a credential; the CLI
prints the report first, then the line, and makes the exit code at least UNKNOWN (see
`exit_code_after_export`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from urllib.parse import unquote, urlsplit, urlunsplit

from llmdoctor.render.prometheus import EndpointResult, registry_for
from llmdoctor.reporting.report import ExitCode
from llmdoctor.target import TargetError, check_url, display_url

__all__ = [
    "PUSH_TIMEOUT_S",
    "DEFAULT_JOB",
    "ExportError",
    "ExportSettings",
    "check_job",
    "check_push_gateway",
    "check_textfile_dir",
    "textfile_path",
    "push",
    "write_textfile",
    "export",
    "exit_code_after_export",
]

#: Each push waits at most this long (connect + send + answer).
PUSH_TIMEOUT_S = 10.0
DEFAULT_JOB = "llmdoctor"


class ExportError(Exception):
    """The metrics could not be delivered (one-line message, no secret)."""


@dataclass(frozen=True)
class ExportSettings:
    """Where the metrics go: a Pushgateway URL, a textfile directory, or neither."""

    push_gateway: str | None = None
    job: str = DEFAULT_JOB
    textfile_dir: str | None = None
    timeout_s: float = PUSH_TIMEOUT_S

    @property
    def wanted(self) -> bool:
        """True when the metrics go somewhere."""
        return bool(self.push_gateway or self.textfile_dir)


def _credentials(url: str) -> tuple[str, str | None, str | None]:
    """The URL without ``user:password@``, and the user and password (None when absent)."""
    raw = url if "://" in url else "http://" + url
    parts = urlsplit(raw)
    if parts.username is None:
        return raw, None, None
    netloc = parts.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    if parts.port is not None:
        netloc += f":{parts.port}"
    plain = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return plain, unquote(parts.username), unquote(parts.password or "")


def check_push_gateway(url: str) -> None:
    """Refuse a Pushgateway URL that cannot work, before anything is measured."""
    shown = display_url(url)
    try:
        raw, _, _ = _credentials(url)
        parts = urlsplit(raw)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise ExportError(f"--push-gateway {shown}: invalid URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise ExportError(f"--push-gateway {shown}: use an http:// or https:// URL")
    if not parts.hostname:
        raise ExportError(f"--push-gateway {shown}: the URL has no host")
    try:  # the host, port and characters as for the endpoint (an IDN that cannot encode, port 0, spaces)
        check_url(url, "--push-gateway")
    except TargetError as exc:
        raise ExportError(str(exc)) from None


def check_job(job: str) -> None:
    """A job name is also the textfile's name: letters, digits, ``_``, ``-`` and ``.`` only."""
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", job):
        raise ExportError(f"--push-job {job!r}: use letters, digits, '_', '-' and '.' only")


def check_textfile_dir(directory: str) -> None:
    """Refuse a textfile directory that does not exist or cannot be written, before anything is measured."""
    if not os.path.isdir(directory):
        raise ExportError(f"--textfile {directory}: no such directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ExportError(f"--textfile {directory}: not writable")


def textfile_path(directory: str, job: str = DEFAULT_JOB) -> str:
    """``DIR/JOB.prom``: node-exporter's textfile collector reads only ``*.prom``."""
    return os.path.join(directory, f"{job}.prom")


Handler = Callable[..., Callable[[], None]]


def push(result: EndpointResult, gateway: str, *, job: str = DEFAULT_JOB,
         timeout_s: float = PUSH_TIMEOUT_S) -> None:
    """Replace the group ``job``/``instance=<endpoint label>`` on the Pushgateway with this result."""
    from prometheus_client.exposition import basic_auth_handler, default_handler, push_to_gateway

    url, user, password = _credentials(gateway)
    handler: Handler = default_handler
    if user is not None:
        handler = partial(basic_auth_handler, username=user, password=password)
    try:
        push_to_gateway(url, job=job, registry=registry_for([result]), grouping_key={"instance": result.endpoint},
                        timeout=timeout_s, handler=handler)
    except OSError as exc:  # URLError, HTTPError, timeouts and refused connections are all OSErrors
        raise ExportError(f"push to the Pushgateway {display_url(gateway)} failed: {_reason(exc)}") from None


def _reason(exc: OSError) -> str:
    """Why a push failed, in one line: the HTTP status and the first line of the answer, or the socket error."""
    from urllib.error import HTTPError

    if isinstance(exc, HTTPError):
        try:
            said = exc.read(300).decode("utf-8", "replace").strip().splitlines()
        except OSError:
            said = []
        return f"HTTP {exc.code} {exc.reason}" + (f": {said[0]}" if said else "")
    reason = getattr(exc, "reason", None) or exc.strerror or exc
    return " ".join(str(reason).split())


def write_textfile(results: Sequence[EndpointResult], directory: str, *, job: str = DEFAULT_JOB) -> str:
    """Write all results to ``DIR/JOB.prom`` atomically (temporary file in DIR, then rename); returns the path."""
    from prometheus_client import write_to_textfile

    path = textfile_path(directory, job)
    try:
        write_to_textfile(path, registry_for(results))
    except OSError as exc:
        raise ExportError(f"cannot write --textfile {path}: {exc.strerror or exc}") from None
    return path


def export(results: Sequence[EndpointResult], settings: ExportSettings) -> list[str]:
    """Deliver `results` as `settings` say; returns the one-line errors (empty when all went through).

    The textfile is written even when a push failed; the pushes stop at the first failure (a
    Pushgateway that is down would otherwise cost a timeout per endpoint).
    """
    errors: list[str] = []
    if settings.textfile_dir:
        try:
            write_textfile(results, settings.textfile_dir, job=settings.job)
        except ExportError as exc:
            errors.append(str(exc))
    if settings.push_gateway:
        for i, result in enumerate(results):
            try:
                push(result, settings.push_gateway, job=settings.job, timeout_s=settings.timeout_s)
            except ExportError as exc:
                left = len(results) - i - 1
                errors.append(str(exc) + (f" ({left} more endpoint{'s' if left != 1 else ''} not pushed)"
                                          if left else ""))
                break
    return errors


def exit_code_after_export(code: int, errors: Sequence[str]) -> int:
    """The exit code once the export is done: at least UNKNOWN when it failed; CRITICAL stays CRITICAL."""
    if errors and code != ExitCode.CRITICAL:
        return ExitCode.UNKNOWN
    return code
