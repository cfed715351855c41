"""Request files, the odd-character scanner, token counting (server, local tokenizer, estimate), prefill."""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import pytest

from llmdoctor.context import Context
from llmdoctor.inputs.request_files import RequestFileError, load_requests
from llmdoctor.inputs.textscan import clean, scan
from llmdoctor.options import Options
from llmdoctor.probes import catalog
from llmdoctor.target import Target

ROOT = Path(__file__).resolve().parent.parent
REQUESTS = ROOT / "fixtures" / "requests"
sys.path.insert(0, str(ROOT / "fixtures"))


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def make_jsonl(path: Path, n: int = 1000, seed: int = 3) -> Path:
    rng = random.Random(seed)
    words = "the river stone garden window paper light music forest winter summer".split()
    with path.open("w") as f:
        for _ in range(n):
            text = " ".join(rng.choice(words) for _ in range(rng.randint(20, 400)))
            if rng.random() < 0.05:
                text += "\u200b caf\u00c3\u00a9 " + " " * 40
            body = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}],
                    "max_tokens": 256, "stream": True}
            f.write(json.dumps(body) + "\n")
    return path


# -- reading files -------------------------------------------------------------------------------
def test_reads_chat_completion_array_and_batch_lines(tmp_path: Path) -> None:
    chat = write(tmp_path, "a.json", json.dumps({"messages": [{"role": "user", "content": "hi"}], "n": 2}))
    batch = write(tmp_path, "b.jsonl", json.dumps(
        {"custom_id": "1", "method": "POST", "url": "/v1/chat/completions",
         "body": {"messages": [{"role": "user", "content": "yo"}], "stream": True}}) + "\n\n"
        + json.dumps({"prompt": [1, 2, 3, 4]}) + "\n")
    array = write(tmp_path, "c.json", json.dumps([{"prompt": "once"}, {"prompt": ["a", "bb"]}]))
    got = load_requests([chat, batch, array])
    assert [r.kind for r in got] == ["chat", "chat", "completion", "completion", "completion"]
    assert got[0].params.n == 2 and got[0].params.choices == 2
    assert got[1].source.endswith("b.jsonl:1") and got[1].params.stream is True
    assert got[2].source.endswith("b.jsonl:3") and got[2].prompt_token_ids == 4
    assert got[3].source.endswith("c.json:[0]")


@pytest.mark.parametrize(
    ("text", "name", "fragment"),
    [
        ('{"messages": [', "x.json", "x.json:1: invalid JSON"),
        ('\n\n{"model": "m"}', "x.json", "x.json:3: not a chat or completions request"),
        ('{"prompt": "a"}\n{"prompt": "b"\n', "x.jsonl", "x.jsonl:2: invalid JSON on this line"),
        ('{"messages": "hello"}', "x.json", '"messages" must be an array'),
        ('{"messages": ["hello"]}', "x.json", "messages[0] must be an object"),
        ('{"prompt": 5}', "x.json", '"prompt" must be a string'),
        ("[1, 2]", "x.json", "x.json:[0]: not a request body"),
        ("   ", "x.json", "empty file"),
    ],
)
def test_bad_files_raise_one_clear_line(tmp_path: Path, text: str, name: str, fragment: str) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(RequestFileError) as info:
        load_requests([path])
    message = str(info.value)
    assert fragment in message and "\n" not in message


def test_missing_file_is_an_error() -> None:
    with pytest.raises(RequestFileError, match="no such file"):
        load_requests(["/nonexistent/req.json"])


def test_normalised_form_keeps_no_text() -> None:
    (req,) = load_requests([str(REQUESTS / "huge-context.json")])
    assert req.prompt_chars > 80_000
    assert "river" not in json.dumps(__import__("llmdoctor.serde", fromlist=["to_data"]).to_data(req))


def test_probe_without_files_is_unavailable_with_reason() -> None:
    ctx = Context(target=None, options=Options())
    assert ctx.optional(catalog.REQUESTS) is None
    assert ctx.statuses()[0].reason == "no request given (use --request FILE)"


# -- odd characters ------------------------------------------------------------------------------
def test_scan_finds_each_kind_and_clean_removes_them() -> None:
    import base64

    text = ("a\u200bb \x07 caf\u00c3\u00a9 it\u00e2\u20ac\u2122s \u202eevil\u202c \ufffd" + " " * 40 + "=" * 60
            + " data:image/png;base64," + base64.b64encode(bytes(range(256)) * 2).decode()
            + " " + base64.b64encode(bytes(range(255, -1, -1)) * 2).decode() + " \ud800")
    kinds = {r.kind for r in scan(text, "m")}
    assert kinds == {"zero_width", "control", "mojibake", "bidi", "replacement", "whitespace_run",
                     "repeated_run", "data_uri", "base64", "surrogate"}
    assert scan(clean(text)) == [r for r in scan(clean(text)) if r.kind == "mojibake"]
    assert scan("A plain sentence with nothing odd in it, long enough to be scanned fully.\n" * 5) == []


def test_scan_finds_pasted_json() -> None:
    blob = json.dumps([{"id": i, "name": f"n{i}", "price": i} for i in range(50)])
    assert [r.kind for r in scan("rows: " + blob)] == ["json_blob"]


def test_thousand_logged_requests_lint_fast(tmp_path: Path) -> None:
    """Loose bound (CI machines vary); bench/requests_lint.py prints the precise number."""
    from importlib.metadata import entry_points

    from llmdoctor.runner import run_one

    path = make_jsonl(tmp_path / "logged.jsonl")
    checks = [e.load() for e in entry_points(group="llmdoctor.checks") if e.name[:3] in ("LD1", "LD6")]
    started = time.perf_counter()
    ctx = Context(target=None, options=Options.of(request_files=(str(path),), context_window=4096))
    outcomes = [run_one(c, ctx) for c in checks]
    elapsed = time.perf_counter() - started
    assert len(ctx.get(catalog.REQUESTS).requests) == 1000
    assert all(o.status != "crashed" for o in outcomes), [(o.check_id, o.reason) for o in outcomes]
    assert {o.check_id for o in outcomes if o.status == "failed"} >= {"LD103"}
    assert elapsed < 3.0, f"linting 1,000 requests took {elapsed:.2f} s"


# -- local tokenizer -----------------------------------------------------------------------------
@pytest.fixture(scope="session")
def tiny_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> str:
    pytest.importorskip("tokenizers")
    from make_tiny_tokenizer import make_tokenizer

    return str(make_tokenizer(tmp_path_factory.mktemp("tok") / "tiny-tokenizer"))


def test_local_tokenizer_counts_with_chat_template(tiny_tokenizer: str, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_tokenizer, local_files_only=True)
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "What is the capital of France?"}]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids  # transformers 5 returns a BatchEncoding
    expected = len(ids)
    assert expected > len(tok.encode("What is the capital of France?", add_special_tokens=False)) + 5
    path = write(tmp_path, "r.json", json.dumps({"messages": messages, "max_tokens": 16}))
    ctx = Context(target=None, options=Options.of(request_files=(path,), tokenizer=tiny_tokenizer, context_window=64))
    counted = ctx.get(catalog.PROMPT_TOKENS)
    assert counted.method == "tokenizer" and counted.counts[0].tokens == expected
    assert "chat template" in counted.counts[0].method
    assert counted.window == 64 and counted.window_source == "--context-window"


def test_local_tokenizer_measures_odd_character_inflation(tiny_tokenizer: str) -> None:
    from llmdoctor.checks.ld103_odd_characters import OddCharacters

    from llmdoctor.runner import run_one

    path = str(REQUESTS / "odd-characters.json")
    ctx = Context(target=None, options=Options.of(request_files=(path,), tokenizer=tiny_tokenizer))
    outcome = run_one(OddCharacters, ctx)
    (finding,) = outcome.findings
    inflation = ctx.get(catalog.PROMPT_TOKENS).counts[0].odd_tokens
    assert inflation is not None and inflation > 500
    assert f"{inflation:,} prompt tokens" in finding.message


def test_missing_tokenizer_falls_back_to_a_stated_estimate(tmp_path: Path) -> None:
    ctx = Context(target=None, options=Options.of(request_files=(str(REQUESTS / "clean-chat.json"),),
                                               tokenizer=str(tmp_path / "absent")))
    counted = ctx.get(catalog.PROMPT_TOKENS)
    assert counted.method == "estimate"
    assert counted.notes and "offline" in counted.notes[0]
    c = counted.counts[0]
    assert c.low < c.tokens < c.high


# -- the server's tokenizer over HTTP (the simulator's vLLM-shaped /tokenize) ---------------------
def _sim():
    sim = pytest.importorskip("llmdoctor.sim")
    return sim


def test_server_tokenize_end_to_end(tmp_path: Path) -> None:
    sim = _sim()
    from llmdoctor.sim import tokens as simtok

    path = make_jsonl(tmp_path / "logged.jsonl", n=50)
    bodies = [json.loads(line) for line in path.read_text().splitlines()]
    with sim.SimServer(sim.get_profile("healthy")) as server:
        ctx = Context(Target(server.base_url), Options.of(request_files=(str(path),)))
        try:
            counted = ctx.get(catalog.PROMPT_TOKENS)
            server_counts = ctx.get(catalog.SERVER_TOKENS)
            sent = ctx.requests_sent
        finally:
            ctx.close()
    assert server_counts.api == "vllm" and server_counts.max_model_len == 4096
    assert 1 <= len(server_counts.samples) <= 3 and sent <= 1 + 3  # /v1/models + the sample
    for sample in server_counts.samples:
        assert sample.tokens == simtok.count_chat_tokens(bodies[sample.index]["messages"])
        assert counted.counts[sample.index].tokens == sample.tokens
    assert counted.method == "server" and counted.window == 4096
    others = [c for i, c in enumerate(counted.counts) if i not in {s.index for s in server_counts.samples}]
    assert all("ratio" in c.method for c in others)


def test_prefill_probe_measures_cost_per_prompt_token() -> None:
    sim = _sim()
    profile = sim.get_profile("healthy", per_prompt_token_ms=0.5, jitter_ms=0.0)
    with sim.SimServer(profile) as server:
        ctx = Context(Target(server.base_url), Options.of(samples=2, warmup=0))
        try:
            result = ctx.get(catalog.PREFILL)
        finally:
            ctx.close()
    assert result.tokens_source == "usage"
    assert result.reliable and 0.3 < result.per_token_ms < 0.8
