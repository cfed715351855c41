"""LD720: a cause the differential diagnosis confirmed with its follow-up tests."""

from __future__ import annotations

from collections.abc import Iterator

from llmdoctor.causes import Cause
from llmdoctor.check import Category, Check, CheckSkipped
from llmdoctor.context import Context
from llmdoctor.diagnosis.hypotheses import BY_ID
from llmdoctor.diagnosis.model import Diagnosis
from llmdoctor.diagnosis.scoring import DECISIVE
from llmdoctor.findings import Confidence, Evidence, Finding, Frequency, Severity
from llmdoctor.probes.catalog import DIAGNOSIS, FOLLOWUP_IDLE, IDLE


class ConfirmedCause(Check):
    """Confirmed cause: what the follow-up tests proved is behind the latency.

    ## What it checks
    Reads the differential diagnosis (probe ``diagnosis``). From the first
    pass (first request, "Say ok." baseline, GET /v1/models, a metrics
    scrape) the doctor forms hypotheses — queueing, slow prefill, slow
    decode, cold start / scale-to-zero, a new connection per request, a slow
    network, a fixed server floor, no prefix cache — then orders the
    follow-up test that best tells them apart within ``--budget``
    (prompt-length sweep, output-length sweep, a concurrency step, an idle
    test, fresh vs reused connections, metrics around a lone request, a
    repeated prompt). Each confirmed cause (probability ≥ 0.95) is one
    finding, with its chain: symptom → hypotheses → test → result →
    conclusion. The hypotheses are causes of ``llmdoctor/causes.py``: when
    a checklist check names the same cause (LD301 for a cold start), that
    finding lists it and this one folds under it as supporting evidence;
    otherwise this one lists it, with the symptoms it explains (LD701's
    floor, LD702's fixed cost) folded under it.

    ## Why it adds latency
    A high time to first token looks the same from outside whether requests
    wait in a queue, the prompt is slow to process, the model was loading or
    the network is far; each has a different fix. The confirmed cause is the
    one the tests could not explain away.

    ## Example
    "Say ok." takes 330 ms with a jittery first token. The output-length
    sweep shows a cheap per-token cost, the prompt-length sweep a flat
    prefill, and two requests at once make the second wait for the first:
    queueing, confirmed (p = 0.99); slow prefill and slow decode ruled out.

    ## Fix
    The fix of the confirmed cause (shown with the finding): more parallel
    capacity for queueing, shorter prompts or prefix caching for prefill,
    a warm replica for cold starts, a pooled client for handshakes, and so on.

    ## Caveats
    The tests are short and run at one moment: a cause that comes and goes
    (another tenant's burst) may be missed or confirmed by chance; the
    scoring is deliberately coarse (likelihood ratios of 3, 10 and 100) so a
    reader can redo it. ``--no-followup`` turns the follow-up tests off.
    """

    id = "LD720"
    name = "confirmed-cause"
    title = "Cause confirmed by follow-up tests"
    category = Category.BASELINE
    requires = (DIAGNOSIS,)

    def run(self, ctx: Context) -> Iterator[Finding]:
        d = ctx.get(DIAGNOSIS)
        if not d.hypotheses:
            raise CheckSkipped("no hypotheses were formed")
        refuted = ", ".join(h.title.lower() for h in d.refuted) or "none"
        for h in d.confirmed:
            spec = BY_ID[h.id]
            chain = " → ".join(link.text for link in d.chain(h.id) if link.stage in ("result", "conclusion"))
            tests = sum(1 for s in d.steps if s.ran)
            yield Finding(
                Severity.WARNING,
                Confidence.HIGH,
                f"Confirmed cause: {h.title.lower()}",
                f"{d.symptom}. After {tests} follow-up test(s) ({d.spent_requests} requests): {chain}. "
                f"Ruled out: {refuted}.",
                spec.fix,
                impact_ms=h.impact_ms,
                frequency=_frequency(d, h.id, spec.cause.spec.frequency),
                cause=spec.cause,
                restatement=True,
                impact_basis=h.impact_basis,
                evidence=tuple(Evidence(o.source, o.text, f"LR {o.likelihood_ratio:g}", "diagnosis", statistic=True)
                               for o in h.evidence),
            )


def _frequency(d: Diagnosis, hypothesis: Cause, default: Frequency) -> Frequency:
    """How often the confirmed cause is paid: its cause's default, except that a cold start an idle
    follow-up test saw come back (the model unloaded while idle) recurs."""
    if default is not Frequency.COLD_START:
        return default
    for step in d.steps:
        if step.ran and step.probe in (FOLLOWUP_IDLE.name, IDLE.name) and any(
                u.hypothesis is hypothesis and u.likelihood_ratio >= DECISIVE for u in step.updates):
            return Frequency.RECURRING_COLD_START
    return default
