"""Conclusions that survive a loaded host (issues 15 and 27's noise acceptance, one round per level;
bench/noise.py repeats it).

At each load level of tests/busyhost.py (``busy``: one bounded busy loop per core; ``oversubscribed``:
four per core; stopped afterwards), the default check of each case, each served by a process of its
own: on ``healthy`` no cause is confirmed and nothing but the (true) host-pressure warning is
raised, the ``slow-floor`` floor is still named within 25% of the simulator's model, the
``slow-decode`` per-token cost too, the stream held by a real nginx and a real haproxy is named,
no report shows a negative fixed cost, and every report says the client host was saturated. The
conclusions are listed in tests/busyhost.py. One round per case and level (the gateways at
``oversubscribed`` only): the rounds are bench/noise.py's.
"""

from __future__ import annotations

import json

import pytest

from tests.busyhost import CASES, GATEWAYS, one_round
from tests.gateways import require

pytestmark = pytest.mark.slow  # busy loops saturate the host for each round


#: Each profile at both loaded levels; the gateways (whose busy level tests/integration/test_gateway_attribution.py
#: covers) oversubscribed only.
ROUNDS = [(case, level) for case in CASES for level in ("busy", "oversubscribed")
          if case not in GATEWAYS or level == "oversubscribed"]


@pytest.mark.parametrize(("case", "level"), ROUNDS, ids=[f"{c}-{lv}" for c, lv in ROUNDS])
def test_conclusions_hold_on_a_loaded_host(case: str, level: str) -> None:
    if case in GATEWAYS:
        require(case.split("-")[0])
    held, report = one_round(case, level)
    missed = [name for name, ok in held.items() if not ok]
    summary = {"findings": [(f["check_id"], f["severity"], f["title"]) for f in report["findings"]],
               "confirmed": [c["id"] for c in (report.get("diagnosis") or {}).get("confirmed", [])],
               "client_host": (report.get("client_host") or {}).get("line"),
               "fixed_ms": (report.get("breakdown") or {}).get("fixed_ms")}
    assert not missed, f"{missed}: {json.dumps(summary, indent=1)}"
