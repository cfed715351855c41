"""The typed settings of a `ProbeClient`: its bounds and its network, made from a run's options once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmdoctor.options import Options

__all__ = ["DEFAULT_MAX_BODY_BYTES", "ClientSettings"]

DEFAULT_MAX_BODY_BYTES = 16 << 20


@dataclass(frozen=True)
class ClientSettings:
    """The bounds and the network of one probe client (what a run's options make of it).

    `deadline_at`: the client's clock instant the whole run must end by (None: no deadline).
    `other_origins`: URLs on other origins the run will GET (a metrics exporter), so their route
    (direct or proxied) is decided up front too. `strict`: a request beyond the sending probe's
    declared plan raises `PlanExceeded` (else it is counted).
    """

    timeout_s: float
    max_requests: int
    insecure: bool = False
    ca_bundle: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    trust_env: bool = True
    deadline_at: float | None = None
    other_origins: tuple[str | None, ...] = ()
    strict: bool = False

    @classmethod
    def of(cls, options: Options, *, max_requests: int | None = None, deadline_at: float | None = None,
           strict: bool = False) -> ClientSettings:
        """The settings of a run with these options: the one place options become client settings
        (`max_requests` overrides the options' budget: the CLI's preflight builds a client of 1)."""
        return cls(
            timeout_s=options.request.timeout_s,
            max_requests=options.request.max_requests if max_requests is None else max_requests,
            insecure=options.network.insecure,
            ca_bundle=options.network.ca_bundle,
            deadline_at=deadline_at,
            other_origins=(options.evidence.metrics_url, options.evidence.gpu_metrics_url),
            strict=strict,
        )
