"""Build a `ProbeClient` from one set of keyword arguments, as the tests' helpers take them."""

from __future__ import annotations

import dataclasses
from typing import Any

from llmdoctor.probes.client import ClientSettings, ProbeClient
from llmdoctor.target import Target

_SETTINGS = frozenset(f.name for f in dataclasses.fields(ClientSettings))


def probe_client(target: Target, **kwargs: Any) -> ProbeClient:
    """The keyword arguments that name a `ClientSettings` field make the settings; the others
    (``clock``, ``transport``, ``on_request``, ``plan`` ...) go to the constructor as they are."""
    settings = ClientSettings(**{k: v for k, v in kwargs.items() if k in _SETTINGS})
    return ProbeClient(target, settings, **{k: v for k, v in kwargs.items() if k not in _SETTINGS})
