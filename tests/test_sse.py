from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmdoctor.probes.sse import SSEError, SSEEvent, SSEParser


def parse(data: bytes, **kwargs) -> list[SSEEvent]:
    p = SSEParser(**kwargs)
    return p.feed(data) + p.close()


def parse_split(data: bytes, cuts: list[int]) -> list[SSEEvent]:
    p = SSEParser()
    events: list[SSEEvent] = []
    prev = 0
    for cut in sorted(cuts) + [len(data)]:
        events += p.feed(data[prev:cut])
        prev = cut
    return events + p.close()


def test_basic_event_and_default_type():
    assert parse(b"data: hello\n\n") == [SSEEvent("message", "hello", None)]


@pytest.mark.parametrize("eol", [b"\n", b"\r", b"\r\n"])
def test_line_endings(eol):
    data = b"event: add" + eol + b"data: a" + eol + b"data: b" + eol + eol + b"data: c" + eol + eol
    assert parse(data) == [SSEEvent("add", "a\nb", None), SSEEvent("message", "c", None)]


def test_mixed_line_endings():
    assert parse(b"data: a\r\ndata: b\rdata: c\n\r\n") == [SSEEvent("message", "a\nb\nc", None)]


def test_cr_lf_split_across_chunks_is_one_line_ending():
    p = SSEParser()
    assert p.feed(b"data: a\r") == []
    # The LF completes the CRLF: it must not be read as an empty line (which would dispatch).
    assert p.feed(b"\n") == []
    assert p.feed(b"data: b\r") == []
    assert p.feed(b"\n\r\n") == [SSEEvent("message", "a\nb", None)]


def test_crlf_at_chunk_end_then_lf_is_a_blank_line():
    p = SSEParser()
    assert p.feed(b"data: a\r\n") == []
    assert p.feed(b"\n") == [SSEEvent("message", "a", None)]


def test_cr_then_cr_is_two_lines():
    p = SSEParser()
    assert p.feed(b"data: a\r") == []
    assert p.feed(b"\r") == [SSEEvent("message", "a", None)]


def test_comments_ignored():
    assert parse(b": keep-alive\n\n:another\ndata: x\n\n") == [SSEEvent("message", "x", None)]


def test_only_one_leading_space_stripped():
    assert parse(b"data:  two spaces\n\ndata:none\n\n") == [
        SSEEvent("message", " two spaces", None),
        SSEEvent("message", "none", None),
    ]


def test_field_without_colon_is_empty_value():
    # "data" alone is a data line with an empty value: the event dispatches with data "".
    assert parse(b"data\n\n") == [SSEEvent("message", "", None)]
    assert parse(b"data\ndata\n\n") == [SSEEvent("message", "\n", None)]


def test_event_without_data_is_not_dispatched():
    assert parse(b"event: ping\n\ndata: x\n\n") == [SSEEvent("message", "x", None)]


def test_value_keeps_further_colons():
    assert parse(b'data: {"a": "b:c"}\n\n') == [SSEEvent("message", '{"a": "b:c"}', None)]


def test_id_persists_and_nul_id_ignored():
    events = parse(b"id: 1\ndata: a\n\ndata: b\n\nid: x\x00y\ndata: c\n\nid\ndata: d\n\n")
    assert [e.id for e in events] == ["1", "1", "1", ""]


def test_retry_field():
    p = SSEParser()
    p.feed(b"retry: 3000\n\nretry: soon\n\n")
    assert p.retry == 3000


def test_unknown_fields_ignored():
    assert parse(b"foo: bar\ndata: x\n\n") == [SSEEvent("message", "x", None)]


def test_bom_stripped_even_split():
    p = SSEParser()
    assert p.feed(b"\xef") == []
    assert p.feed(b"\xbb\xbfdata: x\n\n") == [SSEEvent("message", "x", None)]


def test_incomplete_event_discarded_by_default_dispatched_on_request():
    assert parse(b"data: x\n\ndata: cut") == [SSEEvent("message", "x", None)]
    assert parse(b"data: x\n\ndata: cut", dispatch_incomplete=True) == [
        SSEEvent("message", "x", None),
        SSEEvent("message", "cut", None),
    ]


def test_utf8_split_inside_character():
    data = "data: héllo 世界 🎉\n\n".encode()
    p = SSEParser()
    events = []
    for i in range(len(data)):
        events += p.feed(data[i : i + 1])
    assert events == [SSEEvent("message", "héllo 世界 🎉", None)]


def test_invalid_utf8_replaced_never_raises():
    events = parse(b"data: a\xff\xfeb\xc3\n\n")
    assert events == [SSEEvent("message", "a\ufffd\ufffdb\ufffd", None)]


def test_overlong_line_raises():
    p = SSEParser(max_line_bytes=1000)
    with pytest.raises(SSEError):
        for _ in range(100):
            p.feed(b"data: " + b"x" * 100)
    assert issubclass(SSEError, ValueError)


def test_overlong_line_in_one_chunk_raises():
    p = SSEParser(max_line_bytes=1000)
    with pytest.raises(SSEError):
        p.feed(b"data: " + b"x" * 2000 + b"\n\n")


def test_many_short_data_lines_bounded_by_event_limit():
    p = SSEParser(max_event_bytes=10_000)
    with pytest.raises(SSEError):
        for _ in range(1000):
            p.feed(b"data: " + b"x" * 50 + b"\n")


def test_default_limit_is_one_mib():
    p = SSEParser()
    p.feed(b"data: " + b"x" * ((1 << 20) - 10))
    with pytest.raises(SSEError):
        p.feed(b"x" * (1 << 20))


def test_one_byte_feeding_of_long_line_is_linear():
    # 200 kB one byte at a time: must not rescan the buffer on every feed (quadratic).
    line = b"data: " + b"y" * 200_000 + b"\n\n"
    p = SSEParser()
    events = []
    for i in range(len(line)):
        events += p.feed(line[i : i + 1])
    assert len(events) == 1 and len(events[0].data) == 200_000


STREAM = (
    b"\xef\xbb\xbf: comment\r\n"
    b"event: start\r\ndata: {\"a\": 1}\r\nid: 7\r\n\r\n"
    b"data: line one\rdata:line two\r\r"
    b"retry: 10\nevent: x\ndata\n\n"
    + "data: ünïcødé 🎉\n\n".encode()
    + b"data: bad \xff\xfe\n\n"
    + b"data: [DONE]\n\n"
)


def test_reference_stream():
    assert parse(STREAM) == [
        SSEEvent("start", '{"a": 1}', "7"),
        SSEEvent("message", "line one\nline two", "7"),
        SSEEvent("x", "", "7"),
        SSEEvent("message", "ünïcødé 🎉", "7"),
        SSEEvent("message", "bad \ufffd\ufffd", "7"),
        SSEEvent("message", "[DONE]", "7"),
    ]


def test_one_byte_at_a_time_equals_whole():
    p = SSEParser()
    events = []
    for i in range(len(STREAM)):
        events += p.feed(STREAM[i : i + 1])
    assert events + p.close() == parse(STREAM)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=30))
def test_random_splits_equal_whole(cuts):
    assert parse_split(STREAM, cuts) == parse(STREAM)


_line = st.sampled_from(
    [b"data: x", b"data:y", b"data", b"event: e", b"id: 3", b": c", b"retry: 5", b"", b"data: \xc3\xa9",
     b"data: \xff", b"foo"]
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(_line, st.sampled_from([b"\n", b"\r", b"\r\n"])), max_size=20),
    st.lists(st.integers(min_value=0, max_value=400), max_size=20),
)
def test_random_streams_random_splits(lines, cuts):
    data = b"".join(line + eol for line, eol in lines)
    assert parse_split(data, [c % (len(data) + 1) for c in cuts]) == parse(data)
