"""An OpenAI-compatible simulator with a latency model and fault profiles (demo and tests)."""

from __future__ import annotations

from llmdoctor.sim.profiles import PROFILES, LatencyProfile, get_profile
from llmdoctor.sim.server import SimServer, serve_forever

__all__ = ["LatencyProfile", "PROFILES", "get_profile", "SimServer", "serve_forever"]
