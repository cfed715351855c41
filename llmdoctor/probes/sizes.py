"""How much each probe sends: the sizes its code and its declared request plan share.

The probe modules import the probe catalog (to read other probes), so the catalog's
request plans cannot import the probe modules back; both read these numbers from here.
"""

from __future__ import annotations

__all__ = ["SERVER_TOKENS_SAMPLE", "SINGLE_REQUESTS", "CONCURRENCY_N", "DEFAULT_IDLE_S", "PREFIX_REPEATS"]

#: Requests tokenized by the server at most (the rest are extrapolated).
SERVER_TOKENS_SAMPLE = 3
#: Requests sent one at a time in a concurrency step (one before the parallel ones, the rest after).
SINGLE_REQUESTS = 2
#: Requests in flight at once in the diagnosis's concurrency step.
CONCURRENCY_N = 2
#: Idle wait of the after-idle follow-up when ``--idle-test`` did not give one.
DEFAULT_IDLE_S = 2.0
#: Times the prefix-reuse probe sends the application's prompt (the first, then the repeats).
PREFIX_REPEATS = 3
