from __future__ import annotations

import json
from urllib.parse import quote

import httpx

from llmdoctor.redact import MASK, SENSITIVE_HEADERS, Redactor, is_sensitive_header, mask_secret, redact_headers

KEY = "sk-canary-7f3a9Q2xZ"


def test_mask_secret_keeps_nothing():
    assert mask_secret(KEY) == MASK
    assert KEY[-3:] not in mask_secret(KEY)
    assert mask_secret("") == ""


def test_sensitive_header_names():
    for name in ("Authorization", "proxy-authorization", "Cookie", "Set-Cookie", "X-API-Key", "api-key",
                 "OpenAI-Api-Key", "x-my-api-key", "X-Csrf-Token", "x-client-secret"):
        assert is_sensitive_header(name), name
    for name in ("content-type", "x-ratelimit-remaining-tokens", "x-prompt-tokens", "x-queue-time",
                 "openai-processing-ms", "keep-alive"):
        assert not is_sensitive_header(name), name
    assert "authorization" in SENSITIVE_HEADERS


def test_redact_headers_mapping_pairs_and_httpx():
    assert redact_headers({"Authorization": f"Bearer {KEY}", "Content-Type": "text/plain"}) == {
        "authorization": MASK,
        "content-type": "text/plain",
    }
    assert redact_headers([("X-Api-Key", KEY), ("Via", "a"), ("via", "b")]) == {"x-api-key": MASK, "via": "a, b"}
    h = httpx.Headers([("set-cookie", "a=1"), ("set-cookie", "b=2"), ("x-queue-time", "12")])
    assert redact_headers(h) == {"set-cookie": f"{MASK}, {MASK}", "x-queue-time": "12"}


def test_redactor_text_all_occurrences_and_spellings():
    r = Redactor([KEY])
    text = f"key {KEY} again {KEY}; url ?k={quote(KEY, safe='')} json {json.dumps(KEY)}"
    out = r.text(text)
    assert KEY not in out
    assert out.count(MASK) == 4


def test_redactor_json_escaped_secret():
    secret = 'tok"en/with\\odd'
    r = Redactor([secret])
    body = json.dumps({"error": {"message": f"bad key {secret}"}})
    assert "odd" not in r.text(body)


def test_redactor_bearer_of_unknown_token():
    r = Redactor([])
    assert r.text("Authorization: Bearer abcdefghijklmnop") == f"Authorization: Bearer {MASK}"
    assert r.text("bearer short") == "bearer short"  # too short to be a token


def test_redactor_ignores_empty_and_tiny_secrets():
    r = Redactor([None, "", "x"])
    assert not r
    assert r.text("xxx example") == "xxx example"


def test_redactor_overlapping_secrets_longest_first():
    r = Redactor(["abcd1234", "abcd1234efgh5678"])
    assert r.text("abcd1234efgh5678") == MASK


def test_redactor_obj_recursive():
    r = Redactor([KEY])
    obj = {
        "headers": {"Authorization": "Basic Zm9vOmJhcg==", "x-queue-time": "3"},
        "list": [KEY, ("t", KEY), 3, None],
        KEY: "as key",
        "n": 1.5,
    }
    out = r.obj(obj)
    assert KEY not in repr(out)
    assert out["headers"] == {"Authorization": MASK, "x-queue-time": "3"}
    assert out["list"] == [MASK, ("t", MASK), 3, None]
    assert out[MASK] == "as key"
    assert out["n"] == 1.5
    assert obj["list"][0] == KEY  # the input is not modified


def test_for_request_collects_header_secrets():
    r = Redactor.for_request(None, [("X-Api-Key", "header-secret-1"), ("Authorization", "Bearer tok-secret-2"),
                                    ("Accept", "application/json")])
    out = r.text("header-secret-1 tok-secret-2 application/json")
    assert "secret" not in out
    assert "application/json" in out


def test_repr_does_not_leak():
    assert KEY not in repr(Redactor([KEY]))
