"""The target is built in one place (`build_target`): URL normalised, key from the environment, headers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmdoctor.target import TargetError, build_target, parse_headers

ROOT = Path(__file__).resolve().parent.parent


def test_build_target_normalises_the_url_and_reads_the_key_from_the_named_variable() -> None:
    env = {"MY_KEY": "sk-123", "OPENAI_API_KEY": "sk-default"}
    t = build_target("localhost:8000/v1/chat/completions", model="m", api_key_env="MY_KEY",
                     headers=(("X-Team", "a"),), environ=env)
    assert (t.base_url, t.model, t.api_key) == ("http://localhost:8000/v1", "m", "sk-123")
    assert t.headers == (("X-Team", "a"),)
    assert build_target("http://h", environ=env).api_key == "sk-default"  # the default variable


@pytest.mark.parametrize("env", [{}, {"MY_KEY": ""}])
def test_an_unset_or_empty_variable_is_no_key(env: dict[str, str]) -> None:
    assert build_target("http://h:1", api_key_env="MY_KEY", environ=env).api_key is None


def test_no_variable_named_is_no_key() -> None:
    assert build_target("http://h:1", api_key_env=None, environ={"OPENAI_API_KEY": "sk"}).api_key is None


def test_a_bad_url_is_a_target_error_that_does_not_echo_the_password() -> None:
    with pytest.raises(TargetError) as exc:
        build_target("ftp://user:hunter2@h", environ={})
    assert "hunter2" not in str(exc.value)
    with pytest.raises(TargetError, match="no host"):
        build_target("http://user:hunter2@/v1", environ={})


@pytest.mark.parametrize(("url", "problem"), [
    ("ht!tp:/nope", "'ht!tp' is not a valid host name"),  # the example: was sent to DNS, exit 2
    ("http://exa mple.com", "a character URLs cannot carry (U+0020)"),
    ("http://-gpu-.example:8000", "'-gpu-.example' is not a valid host name"),
    ("http://gpu-.example:8000", "'gpu-.example' is not a valid host name"),  # no '-' at a label's end
    ("http://a..b", "'a..b' is not a valid host name"),
    ("http://999.1.1.1", "not a valid IPv4 address"),
    ("http://" + "a" * 64 + ".com", "DNS allows 63"),
    ("http://" + "a." * 127 + "com", "DNS allows 253"),
])
def test_a_malformed_host_is_a_target_error(url: str, problem: str) -> None:
    with pytest.raises(TargetError, match="endpoint URL") as exc:
        build_target(url, environ={})
    assert problem in str(exc.value)


@pytest.mark.parametrize("url", [
    "http://localhost:8000", "http://my_service:8000",  # Compose service names resolve with underscores
    "http://gpu-box.internal.", "http://10.0.0.1", "http://127.1", "http://[::1]:8000",
    "http://[fe80::1%25eth0]:8000", "http://bücher.example", "https://xn--bcher-kva.example",
])
def test_hosts_that_may_resolve_are_accepted(url: str) -> None:
    assert build_target(url, environ={}).base_url.endswith("/v1")


def test_parse_headers_strips_and_rejects_a_value_without_a_colon() -> None:
    assert parse_headers(["X-A:  1 ", "X-B:b:c"]) == (("X-A", "1"), ("X-B", "b:c"))
    with pytest.raises(TargetError, match="Name: value"):
        parse_headers(["no colon"])
    with pytest.raises(TargetError):
        parse_headers([": value"])


def test_display_url_is_the_one_scrubber() -> None:
    from llmdoctor.target import display_url

    assert display_url("http://user:pw@h:1/v1?token=x") == "http://***@h:1/v1"
    assert display_url("https://a@b@c/x#key=1") == "https://***@c/x"  # every userinfo, the fragment too
    assert display_url("user:pw@proxy:3128") == "***@proxy:3128"  # a proxy variable without a scheme
    assert display_url("http://[::1") == "http://[::1"  # text urlsplit rejects is quoted as it is
    assert display_url("http://h:8000/v1") == "http://h:8000/v1"


def test_options_are_grouped_by_concern_and_take_flat_names_where_asked() -> None:
    from llmdoctor.options import OPTION_GROUP_OF, Options

    o = Options.of(samples=3, logs=("vllm.log",), dns_server="127.0.0.1", slos=("ttft_p90=800ms",))
    assert (o.request.samples, o.evidence.logs, o.network.dns_server, o.gate.slos) == (
        3, ("vllm.log",), "127.0.0.1", ("ttft_p90=800ms",))
    assert o.request.timeout_s == Options().request.timeout_s  # the rest keeps its defaults
    changed = o.with_fields(followup=False, typical_output_tokens=128)
    assert changed.diagnosis.followup is False and changed.workload.typical_output_tokens == 128
    assert changed.request.samples == 3 and o.diagnosis.followup is True  # a copy
    assert OPTION_GROUP_OF["compare_file"] == "gate" and OPTION_GROUP_OF["pid"] == "evidence"
    with pytest.raises(TypeError, match="no field 'sample'"):
        Options.of(sample=3)


def test_a_target_spec_builds_through_the_factory_and_a_fleet_entry_overrides_it() -> None:
    from llmdoctor.fleet import FleetEntry, entry_spec
    from llmdoctor.target import TargetSpec

    env = {"K1": "sk-one", "K2": "sk-two"}
    spec = TargetSpec("h:8000", model="m", api_key_env="K1", headers=(("X-Team", "a"),))
    assert spec.build(env) == build_target("h:8000", model="m", api_key_env="K1", headers=(("X-Team", "a"),),
                                           environ=env)
    own = entry_spec(FleetEntry("b", "http://b:1", model="mb", api_key_env="K2"), spec).build(env)
    assert (own.base_url, own.model, own.api_key, own.headers) == ("http://b:1/v1", "mb", "sk-two", (("X-Team", "a"),))
    shared = entry_spec(FleetEntry("c", "http://c:1"), spec).build(env)
    assert (shared.base_url, shared.model, shared.api_key) == ("http://c:1/v1", "m", "sk-one")
    with pytest.raises(TargetError, match="no endpoint URL"):
        TargetSpec().build(env)
    assert "X-Team" not in repr(spec)  # headers may be credentials


@pytest.mark.parametrize(("endpoint", "expected"), [
    ("http://llm.internal:8000/v1", "http://llm.internal:8000/v1"),  # what a run records: kept as it is
    ("(recorded)", None),  # no endpoint a run could have had: the replay says "(recorded)"
    (42, None),
])
def test_a_recording_names_its_target_through_the_factory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                          endpoint: object, expected: str | None) -> None:
    from llmdoctor.inputs.recording import load_recorded_run

    data = json.loads((ROOT / "fixtures" / "recordings" / "v0.1-demo.json").read_text())
    path = tmp_path / "run.json"
    path.write_text(json.dumps({**data, "endpoint": endpoint, "model": "m"}))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-read")
    target = load_recorded_run(str(path)).target
    assert (target.base_url if target else None) == expected
    assert target is None or (target.model, target.api_key) == ("m", None)  # a replay sends nothing: no key
