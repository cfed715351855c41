"""Endpoint discovery: can we reach it, which models does it serve.

One ``GET /v1/models``. When it answers 404, one more request checks whether
the server root serves ``/v1/models`` (a base URL with a wrong path prefix),
so the reachability check can say "did you mean …".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from llmdoctor.context import Context, ProbeUnavailable
from llmdoctor.measurements.timing import RequestTiming

__all__ = ["EndpointInfo", "discover"]


@dataclass
class EndpointInfo:
    """What ``/v1/models`` told us about the endpoint."""

    base_url: str
    models_timing: RequestTiming
    models: list[str] = field(default_factory=list)
    model: str | None = None
    model_requested: str | None = None
    context_window: int | None = None
    owned_by: str | None = None
    suggested_base_url: str | None = None

    @property
    def reachable(self) -> bool:
        """True when the server answered HTTP at all (any status)."""
        return self.models_timing.status is not None

    @property
    def model_served(self) -> bool | None:
        """Whether the requested model is listed; None when the list is unknown."""
        if self.model_requested is None or not self.models:
            return None
        return self.model_requested in self.models


def _first_int(entry: dict, keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = entry.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    meta = entry.get("meta")
    if isinstance(meta, dict):
        return _first_int(meta, keys)
    return None


def _server_root_v1(base_url: str) -> str | None:
    parts = urlsplit(base_url)
    if parts.path in ("/v1", ""):
        return None
    return urlunsplit((parts.scheme, parts.netloc, "/v1", "", ""))


def discover(ctx: Context) -> EndpointInfo:
    """List the served models and pick the one to probe."""
    if ctx.target is None:
        raise ProbeUnavailable("no endpoint given")
    timing, body = ctx.client.get_json("/models")
    info = EndpointInfo(base_url=ctx.target.base_url, models_timing=timing, model_requested=ctx.target.model)
    if timing.ok and isinstance(body, dict) and isinstance(body.get("data"), list):
        entries = [e for e in body["data"] if isinstance(e, dict) and isinstance(e.get("id"), str)]
        info.models = [e["id"] for e in entries]
        chosen = ctx.target.model or (info.models[0] if info.models else None)
        info.model = chosen
        entry = next((e for e in entries if e["id"] == chosen), None)
        if entry is not None:
            info.context_window = _first_int(entry, ("max_model_len", "context_length", "context_window", "n_ctx"))
            owned = entry.get("owned_by")
            info.owned_by = owned if isinstance(owned, str) else None
    else:
        info.model = ctx.target.model
        if timing.status == 404:
            alternative = _server_root_v1(ctx.target.base_url)
            if alternative is not None:
                alt_timing, alt_body = ctx.client.get_json_url(alternative + "/models")
                if alt_timing.ok and isinstance(alt_body, dict) and "data" in alt_body:
                    info.suggested_base_url = alternative
    return info
