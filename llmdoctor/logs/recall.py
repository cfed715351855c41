"""Recall of the log scanner on a labelled corpus of real log lines (``fixtures/logs/corpus``).

The corpus is one file per backend and event class (``<backend>-<class>.log``), each line quoted from
a public issue, pull request, doc or recorded run, and ``expected.tsv`` saying, for every line, the event
class and kind it must raise (``none`` for the healthy lines, which must raise nothing) and where the
line comes from. Each line is scanned on its own, so a line cannot borrow its finding from a neighbour
(the scanner folds bursts of nearby hits into one event).

Used by ``tests/test_log_corpus.py`` (the CI gate: every line found, no false alarm) and by
``bench/logscan.py`` (recall printed beside throughput).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

from llmdoctor.logs.scan import LogScanner

__all__ = ["CorpusLine", "Recall", "load_corpus", "score"]


@dataclass(frozen=True)
class CorpusLine:
    """One labelled line: where it is, the class and kind it must raise (``none``: nothing), its source."""

    file: str
    line: int
    cls: str
    kind: str
    source: str
    version: str
    text: str


@dataclass
class Recall:
    """How many event lines were found with the right class (and kind), and what went wrong."""

    events: int = 0
    found: int = 0
    right_kind: int = 0
    healthy: int = 0
    false_alarms: int = 0
    misses: list[str] = field(default_factory=list)
    alarms: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        """Found event lines over all event lines (1.0 for an empty corpus)."""
        return self.found / self.events if self.events else 1.0

    @property
    def perfect(self) -> bool:
        """Every event line found with its class and kind, and no healthy line raised anything."""
        return self.found == self.right_kind == self.events and not self.false_alarms


def load_corpus(directory: Path) -> list[CorpusLine]:
    """The lines named in ``directory/expected.tsv``, with their text read from the corpus files."""
    out: list[CorpusLine] = []
    texts: dict[str, list[str]] = {}
    for row in (directory / "expected.tsv").read_text(encoding="utf-8").splitlines():
        if not row.strip() or row.startswith("#"):
            continue
        name, line, cls, kind, source, version = row.split("\t")
        lines = texts.setdefault(name, (directory / name).read_text(encoding="utf-8").splitlines())
        out.append(CorpusLine(name, int(line), cls, kind, source, version, lines[int(line) - 1]))
    return out


def _scan_one(text: str) -> list[tuple[str, str]]:
    scanner = LogScanner()
    scanner.scan_stream(io.BytesIO(text.encode("utf-8") + b"\n"), "<line>")
    return [(cls, hit.kind) for cls, hits in scanner.result().hits.items() for hit in hits]


def score(lines: list[CorpusLine]) -> Recall:
    """Scan every corpus line on its own and count what it raised against what it must raise."""
    result = Recall()
    for item in lines:
        raised = _scan_one(item.text)
        where = f"{item.file}:{item.line}"
        if item.cls == "none":
            result.healthy += 1
            if raised:
                result.false_alarms += 1
                result.alarms.append(f"{where} raised {raised}")
            continue
        result.events += 1
        classes = [cls for cls, _ in raised]
        if item.cls in classes:
            result.found += 1
            if (item.cls, item.kind) in raised:
                result.right_kind += 1
            else:
                result.misses.append(f"{where} {item.cls}: kind {raised} instead of {item.kind}")
        else:
            result.misses.append(f"{where} {item.cls}/{item.kind}: raised {raised or 'nothing'}")
    return result
