"""Odd characters in prompt text: what they are, where, and a cleaned copy of the text.

Pure functions over strings, no I/O. `scan` finds the characters and runs that
upset tokenizers (each one becomes its own token, or several): control
characters, zero-width and bidi marks, lone surrogates, replacement
characters, mojibake, long runs of whitespace or of one character, embedded
base64 and data URIs, large JSON blobs. `clean` removes or collapses them, so
that tokenizing the text before and after measures the token inflation.

Scanning is a handful of compiled regular expressions per text, so linting a
thousand logged requests takes milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmdoctor.logs.patterns import LazyPattern

__all__ = ["ODD_KINDS", "OddRun", "scan", "clean", "escape_sample"]

#: Kinds of odd content, with a plain-words label each (the order is the report order).
ODD_KINDS: dict[str, str] = {
    "control": "control characters",
    "zero_width": "zero-width characters",
    "bidi": "bidirectional-text marks",
    "surrogate": "lone UTF-16 surrogates (invalid Unicode)",
    "replacement": "U+FFFD replacement characters (bytes that were not valid UTF-8)",
    "mojibake": "mojibake (UTF-8 read as Latin-1/cp1252, e.g. 'Ã©', 'â€™')",
    "whitespace_run": "long runs of whitespace",
    "repeated_run": "long runs of one repeated character",
    "data_uri": "embedded data: URIs",
    "base64": "embedded base64 blobs",
    "json_blob": "large JSON blobs pasted into the text",
}

# Tab, LF and CR are ordinary; every other C0/C1 control and DEL is not.
_CONTROL = LazyPattern(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]+")
_ZERO_WIDTH = LazyPattern("[\u200b\u200c\u200d\u2060\u2061-\u2064\ufeff\u00ad\u180e]+")
_BIDI = LazyPattern("[\u200e\u200f\u061c\u202a-\u202e\u2066-\u2069]+")
_SURROGATE = LazyPattern("[\ud800-\udfff]+")
_REPLACEMENT = LazyPattern("\ufffd+")
# UTF-8 bytes decoded as Latin-1 / cp1252: a lead byte (Ã, Â, â, Ð, Ñ...) followed by a
# continuation byte shown as a Latin-1 symbol, or the cp1252 "â€" pair (’ “ ” – …).
_MOJIBAKE = LazyPattern("(?:[\u00c2\u00c3\u00c5\u00d0\u00d1][\u0080-\u00bf\u0152\u0153\u0160\u0161\u017d\u017e"
                       "\u0178\u2018-\u201e\u2020-\u2022\u2026\u2030\u2039\u203a\u20ac\u2122]"
                       "|\u00e2\u20ac[\u0080-\u00bf\u2018-\u201e\u2020-\u2022\u2026\u2122\u0153\u0161\u017e"
                       "\u02dc\u203a\u2039]?|\u00ef\u00bb\u00bf)+")
_WHITESPACE_RUN = LazyPattern(r"[ \t\u00a0\u3000]{32,}|(?:[ \t]*\r?\n){8,}")
_REPEATED_RUN = LazyPattern(r"([^\s\w])\1{39,}|(\w)\2{59,}")
_DATA_URI = LazyPattern(r"data:[\w.+-]+/[\w.+-]+(?:;[\w=.+-]+)*;base64,[A-Za-z0-9+/=]{16,}")
_BASE64 = LazyPattern(r"(?<![A-Za-z0-9+/])(?=[A-Za-z0-9+/]*[0-9+/])[A-Za-z0-9+/]{200,}={0,2}")
_JSON_KEY = LazyPattern(r'"[^"\n]{1,80}"\s*:\s*')
JSON_BLOB_MIN_KEYS = 25
JSON_BLOB_MIN_CHARS = 1500


@dataclass
class OddRun:
    """Odd content of one kind found in one text: how much, and an escaped sample."""

    kind: str
    count: int
    chars: int
    where: str
    sample: str


def escape_sample(text: str, limit: int = 40) -> str:
    """A short, printable, escaped excerpt of `text` (safe to print in a terminal)."""
    out = []
    for ch in text[:limit]:
        code = ord(ch)
        if ch.isprintable() and not (0xD800 <= code <= 0xDFFF) and ch not in "\u200b\u200c\u200d\ufeff":
            out.append(ch)
        elif code <= 0xFF:
            out.append(f"\\x{code:02x}")
        else:
            out.append(f"\\u{code:04x}")
    return "".join(out) + ("…" if len(text) > limit else "")


_SIMPLE = (
    ("control", _CONTROL),
    ("zero_width", _ZERO_WIDTH),
    ("bidi", _BIDI),
    ("surrogate", _SURROGATE),
    ("replacement", _REPLACEMENT),
    ("mojibake", _MOJIBAKE),
    ("whitespace_run", _WHITESPACE_RUN),
    ("repeated_run", _REPEATED_RUN),
    ("data_uri", _DATA_URI),
)


_NON_ASCII_KINDS = frozenset({"zero_width", "bidi", "surrogate", "replacement", "mojibake"})
_LINE_BREAKS = str.maketrans("", "", "\n\r\t")


def _candidates(text: str) -> set[str]:
    """Kinds that can occur in `text`, decided with fast C-level string tests.

    Running every pattern over every text costs ~1 µs a kilobyte each; most prompts are
    plain, so cheap tests (isascii, isprintable, substring search) rule kinds out first.
    """
    kinds: set[str] = set()
    ascii_only = text.isascii()
    if not ascii_only:
        kinds |= _NON_ASCII_KINDS
    if not text.translate(_LINE_BREAKS).isprintable():
        kinds.add("control")
        if ascii_only:
            return kinds | {"whitespace_run", "repeated_run", "data_uri", "base64"}
    if "    " in text or "\t" in text or "\n\n" in text or "\n " in text or not ascii_only:
        kinds.add("whitespace_run")
    if any(ch * 40 in text for ch in set(text) if not ch.isspace()):
        kinds.add("repeated_run")
    if len(text) >= 200 and any(len(word) >= 200 for word in text.split()):
        kinds |= {"data_uri", "base64"}
    elif "data:" in text:
        kinds.add("data_uri")
    return kinds


def scan(text: str, where: str = "") -> list[OddRun]:
    """Odd content in `text`, one `OddRun` per kind found (empty for clean text)."""
    if len(text) < 32 and text.isascii() and text.isprintable():
        return []  # the common short, plain case: nothing here can match
    possible = _candidates(text)
    runs: list[OddRun] = []
    for kind, pattern in _SIMPLE:
        if kind not in possible:
            continue
        matches = list(pattern.finditer(text))
        if matches:
            chars = sum(m.end() - m.start() for m in matches)
            runs.append(OddRun(kind, len(matches), chars, where, escape_sample(matches[0].group(0))))
    if "base64" in possible:
        stripped = _DATA_URI.sub("", text) if any(r.kind == "data_uri" for r in runs) else text
        matches = list(_BASE64.finditer(stripped))
        if matches:
            chars = sum(m.end() - m.start() for m in matches)
            runs.append(OddRun("base64", len(matches), chars, where, escape_sample(matches[0].group(0))))
    if len(text) >= JSON_BLOB_MIN_CHARS and text.count('":') >= JSON_BLOB_MIN_KEYS:
        keys = list(_JSON_KEY.finditer(text))
        if len(keys) >= JSON_BLOB_MIN_KEYS:
            start, end = keys[0].start(), keys[-1].end()
            if end - start >= JSON_BLOB_MIN_CHARS:
                runs.append(OddRun("json_blob", len(keys), end - start, where, escape_sample(text[start:])))
    return runs


def clean(text: str) -> str:
    """`text` with odd content removed or collapsed (what a careful client would send).

    Control, zero-width and bidi characters, surrogates and replacement characters
    are dropped; whitespace runs collapse to one space or newline; character runs to
    three; data URIs and base64 blobs become ``[data]``. Mojibake and JSON are kept
    (repairing them needs knowledge the text does not carry).
    """
    text = _DATA_URI.sub("[data]", text)
    text = _BASE64.sub("[data]", text)
    for pattern in (_CONTROL, _ZERO_WIDTH, _BIDI, _SURROGATE, _REPLACEMENT):
        text = pattern.sub("", text)
    text = _WHITESPACE_RUN.sub(lambda m: "\n" if "\n" in m.group(0) else " ", text)
    text = _REPEATED_RUN.sub(lambda m: m.group(0)[:3], text)
    return text
