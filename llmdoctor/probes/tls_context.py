"""The TLS context of the probe client, built once per process and settings.

Loading CA certificates takes tens of milliseconds: the context is built before the first
request (so that cost is not billed to its timings) and shared by every client of the process.
"""

from __future__ import annotations

import ssl
import threading
from typing import Any

import httpx

from llmdoctor.target import ClientSetupError

__all__ = ["MAX_CA_BUNDLE_BYTES", "ssl_context"]

#: The largest CA bundle read (Mozilla's whole bundle is ~200 KiB).
MAX_CA_BUNDLE_BYTES = 16 << 20
_ssl_lock = threading.Lock()
_ssl_contexts: dict[tuple[Any, ...], ssl.SSLContext] = {}


def ssl_context(insecure: bool, ca_bundle: str | None) -> ssl.SSLContext:
    """The SSL context for these settings (built once per process: loading certificates takes tens of ms)."""
    key: tuple[Any, ...] = (insecure, ca_bundle)
    if ca_bundle and not insecure:
        import os
        import stat

        try:
            st = os.stat(ca_bundle)
        except OSError as exc:
            raise ClientSetupError(f"--ca-bundle {ca_bundle}: cannot read the CA bundle: "
                                   f"{exc.strerror or exc}") from None
        if not stat.S_ISREG(st.st_mode):
            raise ClientSetupError(f"--ca-bundle {ca_bundle}: not a regular file (a CA bundle is a PEM file of CA "
                                   "certificates)")
        if st.st_size > MAX_CA_BUNDLE_BYTES:
            raise ClientSetupError(f"--ca-bundle {ca_bundle}: larger than {MAX_CA_BUNDLE_BYTES >> 20} MiB: "
                                   "not a CA bundle of PEM certificates")
        key = (insecure, ca_bundle, st.st_ino, st.st_size, st.st_mtime_ns)
    with _ssl_lock:
        cached = _ssl_contexts.get(key)
        if cached is not None:
            return cached
    if insecure:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif ca_bundle:
        try:
            ctx = ssl.create_default_context(cafile=ca_bundle)
        except (OSError, ssl.SSLError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise ClientSetupError(f"--ca-bundle {ca_bundle}: cannot load the CA bundle as PEM certificates "
                                   f"({reason})") from None
    else:
        ctx = httpx.create_ssl_context()
    with _ssl_lock:
        _ssl_contexts[key] = ctx
    return ctx
