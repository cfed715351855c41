"""A default ``llmdoctor check`` against a REAL llama.cpp server: every request it reports, the server logged.

Counted at the server by its access log (uvicorn, one line per HTTP request, written when the
response starts), not by llmdoctor: the report's ``requests.sent`` must be exactly that count, each
path it logged must be one the dry-run plan names, and the run stays within the default
``--max-requests``. Issue 18's 20 is for a healthy endpoint; this server has one slot and no /metrics,
so the metrics fallbacks are paid and the diagnosis may rightly order its concurrency step (measured
here: 18 requests, the diagnosis confirming slow prefill on the tiny model).
"""

from __future__ import annotations

import re
import time
from collections import Counter

from llmdoctor.options import Options
from tests.cliutil import run_process
from tests.llamacpp_server import LlamaCppServer

ACCESS_LINE = re.compile(r'"(GET|POST|HEAD|PUT|DELETE|OPTIONS) (\S+) HTTP/1\.[01]" (\d{3})')


def _logged(server: LlamaCppServer, offset: int, expected: int, timeout_s: float = 5.0) -> list[tuple[str, str]]:
    """(method, path) of every access-log line after `offset`, once there are `expected` (bounded wait)."""
    deadline = time.monotonic() + timeout_s
    while True:
        lines = [(m, p.split("?")[0]) for m, p, _ in ACCESS_LINE.findall(server.log_text()[offset:])]
        if len(lines) >= expected or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def test_a_default_check_sends_what_it_reports_counted_at_the_server(llama_server: LlamaCppServer) -> None:
    offset = len(llama_server.log_text())
    result = run_process("check", "--endpoint", llama_server.url, "--json", "--timeout", "60", timeout=240)
    assert result.code in (0, 1, 2), result.err
    sent = result.report["requests"]["sent"]
    logged = _logged(llama_server, offset, sent)
    print(f"\ndefault check against llama_cpp.server: {len(logged)} requests at the server "
          f"({dict(Counter(p for _, p in logged))}), {sent} reported")
    assert len(logged) == sent
    assert {p for _, p in logged} <= {"/v1/models", "/v1/chat/completions", "/metrics", "/api/ps", "/props",
                                      "/slots"}
    assert sent <= Options().request.max_requests
