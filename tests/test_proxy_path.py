"""The transport probe takes the user's path: through a proxy from the environment, and around it to price it.

On the simulator, with the delaying relay (tests/delayproxy.py) standing in for a proxy: it relays
every byte to the simulator whatever the request line says, so the raw ``HEAD http://host:port/`` the
probe sends a proxy gets the simulator's answer, one injected round trip (plus one of set-up on a new
connection) later. The real proxy (tinyproxy) is in tests/integration/test_proxy_in_path.py.
"""

from __future__ import annotations

import pytest
from llmdoctor.checks.ld409_proxy_in_path import ProxyInPath

from llmdoctor.analysis.waterfall import PROXY, with_proxy_hop
from llmdoctor.context import Context
from llmdoctor.options import Options
from llmdoctor.plan import render_plan
from llmdoctor.probes.catalog import TRANSPORT
from llmdoctor.reporting.report import Phase
from llmdoctor.runner import run_one
from llmdoctor.sim.profiles import get_profile
from llmdoctor.sim.server import SimServer
from llmdoctor.target import Target
from tests.delayproxy import DelayProxy

ONE_WAY_S = 0.02
FRESH_MS = 4 * ONE_WAY_S * 1000  # set-up round trip + one exchange
REUSED_MS = 2 * ONE_WAY_S * 1000  # one exchange on a connection the relay keeps open


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
                 "no_proxy", "REQUEST_METHOD"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_round_trip_goes_through_the_proxy_and_its_cost_is_measured_around_it(clean_env) -> None:
    with SimServer(get_profile("healthy")) as sim, DelayProxy(("127.0.0.1", sim.port), ONE_WAY_S) as relay:
        clean_env.setenv("HTTP_PROXY", f"http://127.0.0.1:{relay.port}")
        ctx = Context(Target(base_url=sim.base_url), Options())
        tr = ctx.get(TRANSPORT)
        finding = next(iter(run_one(ProxyInPath, ctx).findings))
    path = tr.proxy_path
    assert path is not None and path.method == "HEAD" and not path.not_measured and not path.direct_error
    assert tr.address == f"127.0.0.1:{relay.port}" and tr.resolved == [tr.address]  # the first hop is the proxy
    assert relay.connections >= len(path.through_ms) >= 3  # (the probe client's own requests go through it too)
    assert tr.tcp_connections == ctx.raw_connections == path.connections
    # Through the relay each fresh connection pays its injected set-up and exchange; noise only adds to it.
    assert min(path.through_ms) >= 0.9 * FRESH_MS
    # The relay keeps connections open (the simulator does): a client pays one exchange a request through it.
    assert path.proxy_closes is False and path.through_reused_ms
    assert path.cost_ms is not None and path.cost_ms >= 0.9 * REUSED_MS - (path.direct_typical_ms or 0.0)
    assert finding.impact_ms == path.cost_ms and finding.cause is not None
    assert "around it" in finding.message and finding.paid.value == "every_request"


def test_no_proxy_covering_the_endpoint_sends_nothing_through_it(clean_env) -> None:
    with SimServer(get_profile("healthy")) as sim, DelayProxy(("127.0.0.1", sim.port), ONE_WAY_S) as relay:
        clean_env.setenv("HTTP_PROXY", f"http://127.0.0.1:{relay.port}")
        clean_env.setenv("NO_PROXY", "127.0.0.0/8")
        ctx = Context(Target(base_url=sim.base_url), Options())
        tr = ctx.get(TRANSPORT)
        outcome = run_one(ProxyInPath, ctx)
    assert tr.proxy_path is None and relay.connections == 0 and tr.address == "127.0.0.1"
    assert outcome.status == "passed"


def test_an_endpoint_reached_only_through_the_proxy_is_not_priced_but_said(clean_env) -> None:
    # The relay forwards to the simulator whatever host the request names; this machine cannot resolve it.
    with SimServer(get_profile("healthy")) as sim, DelayProxy(("127.0.0.1", sim.port), ONE_WAY_S) as relay:
        clean_env.setenv("HTTP_PROXY", f"http://127.0.0.1:{relay.port}")
        ctx = Context(Target(base_url=f"http://llm.invalid:{sim.port}/v1"), Options())
        tr = ctx.get(TRANSPORT)
        (finding,) = run_one(ProxyInPath, ctx).findings
    path = tr.proxy_path
    assert path is not None and path.through_ms and not path.direct_ms and "does not resolve" in path.direct_error
    assert path.cost_ms is None and finding.impact_ms is None
    assert "cannot be reached without the proxy" in finding.message


def test_an_https_proxy_is_named_not_measured(clean_env) -> None:
    with SimServer(get_profile("healthy")) as sim:
        clean_env.setenv("HTTP_PROXY", "https://127.0.0.1:9")
        ctx = Context(Target(base_url=sim.base_url), Options())
        tr = ctx.get(TRANSPORT)
    assert tr.proxy_path is not None and "https:// proxy is not measured" in tr.proxy_path.not_measured
    assert any("not measured" in e for e in tr.errors) and tr.connect_ms


def test_the_proxy_hop_comes_out_of_the_time_in_front_and_the_phases_still_add_up() -> None:
    phases = [Phase("connection set-up", 0.4), Phase("send request", 0.5),
              Phase("in front of the model server", 150.0), Phase("wait for headers", 100.0), Phase("decode", 30.0)]
    out = with_proxy_hop(phases, 207.0, "http://proxy:3128")
    assert sum(p.ms for p in out) == pytest.approx(sum(p.ms for p in phases))
    names = [p.name for p in out]
    assert names.index(PROXY) < names.index("in front of the model server")
    assert next(p.ms for p in out if p.name == PROXY) == pytest.approx(207.0)
    assert all(p.ms >= 0 for p in out)
    # paid per new connection (an https tunnel): only the set-up can hold it
    per_conn = with_proxy_hop(phases, 50.0, "http://proxy:3128", per="connection")
    assert next(p.ms for p in per_conn if p.name == PROXY) == pytest.approx(0.4)


def test_the_dry_run_lists_the_raw_requests_through_and_around_the_proxy(clean_env) -> None:
    clean_env.setenv("HTTP_PROXY", "http://127.0.0.1:3128")
    text = render_plan(Target(base_url="http://127.0.0.1:8000/v1"), Options(), [ProxyInPath])
    assert "through the proxy http://127.0.0.1:3128 (from HTTP_PROXY)" in text
    assert "HEAD http://127.0.0.1:8000/" in text and "around it" in text
    clean_env.setenv("NO_PROXY", "127.0.0.1")
    assert "through the proxy" not in render_plan(Target(base_url="http://127.0.0.1:8000/v1"), Options(),
                                                  [ProxyInPath])


def test_a_measured_proxy_path_survives_a_recording() -> None:
    from llmdoctor.probes.proxy_path import ProxyPath
    from llmdoctor.probes.transport import TransportResult
    from llmdoctor.serde import from_data, to_data

    result = TransportResult(host="llm.internal", port=8000, scheme="http",
                             proxy_path=ProxyPath(proxy="http://proxy:3128", method="HEAD", through_ms=[207.0],
                                                  direct_ms=[1.0], direct_reused_ms=[0.3], proxy_closes=True))
    back = from_data(TransportResult, to_data(result))
    assert back.proxy_path == result.proxy_path and back.proxy_path is not None
    assert back.proxy_path.cost_ms == pytest.approx(206.7)
    older = {k: v for k, v in to_data(result).items() if k != "proxy_path"}  # a recording from before it
    assert from_data(TransportResult, older).proxy_path is None


def test_a_proxy_that_refuses_the_tunnel_is_not_priced_and_says_why(clean_env) -> None:
    # The relay hands the CONNECT to the simulator, which is no proxy: it refuses it.
    with SimServer(get_profile("healthy")) as sim, DelayProxy(("127.0.0.1", sim.port), ONE_WAY_S) as relay:
        clean_env.setenv("HTTPS_PROXY", f"http://127.0.0.1:{relay.port}")
        ctx = Context(Target(base_url=f"https://127.0.0.1:{sim.port}/v1"), Options.of(insecure=True))
        tr = ctx.get(TRANSPORT)
        (finding,) = run_one(ProxyInPath, ctx).findings
    path = tr.proxy_path
    assert path is not None and path.method == "CONNECT" and not path.through_ms and path.statuses
    assert 200 not in path.statuses and any("answered CONNECT" in e for e in path.errors)
    assert path.cost_ms is None and finding.impact_ms is None
    assert "not measured (the proxy answered CONNECT" in finding.message
