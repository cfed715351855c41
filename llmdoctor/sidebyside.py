"""Side by side: the same probes against two endpoints, interleaved, compared phase by phase.

The article's isolation test: run the production endpoint and the same model
in a clean environment (or two backends) with identical minimal requests,
alternating A, B, A, B … so that drift over time (load, thermal state, the
network) hits both alike. Every phase of the waterfall, time to first token
and total are then compared with the same noise-aware test as baselines
(`llmdoctor.analysis.regress`): a difference counts only when the rank test and the
bootstrap interval both say so, and it is larger than the minimum effect. Its output, text or
JSON, is `llmdoctor.render.compare`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from llmdoctor.analysis.regress import Comparison, compare_samples
from llmdoctor.options import Options
from llmdoctor.probes.catalog import ORDER, SIDE_BY_SIDE
from llmdoctor.probes.contract import AnyProbe, Reads, schedule, static_off
from llmdoctor.probes.side_by_side import Side
from llmdoctor.reporting.breakdown import waterfall
from llmdoctor.target import Target

__all__ = ["SideBySide", "Side", "probes_measured", "render_dry_run", "run_side_by_side"]


@dataclass
class SideBySide:
    """Both sides and the per-metric comparisons (B relative to A)."""

    a: Side
    b: Side
    comparisons: list[Comparison] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0: no significant difference; 1: a significant difference; 3: could not measure."""
        if self.a.error or self.b.error:
            return 3
        return 1 if any(c.significant for c in self.comparisons) else 0


def _phase_samples(side: Side) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"ttft": [], "total": []}
    for t in side.ok:
        if t.ttft_ms is not None:
            out["ttft"].append(t.ttft_ms)
        out["total"].append(t.total_ms or 0.0)
        for p in waterfall(t):
            out.setdefault(p.name, []).append(p.ms)
    return out


def probes_measured(options: Options) -> list[AnyProbe]:
    """What `compare` measures, in order, in each endpoint's context: the schedule of `SIDE_BY_SIDE`
    (the discovery it needs, then itself), without a check run's summaries."""
    return [p for p in schedule([Reads((SIDE_BY_SIDE,))], lambda p: static_off(p, options), ORDER, options)
            if not p.closing]


def render_dry_run(targets: Sequence[Target], options: Options) -> str:
    """``compare --dry-run``: the requests each endpoint would get (from the probes' plans); nothing is sent."""
    from llmdoctor.plan import plan_line, plan_requests

    probes = probes_measured(options)
    lines = [f"llmdoctor compare dry run — A {targets[0].base_url}, B {targets[1].base_url}: nothing is sent.", ""]
    for label, target in zip("AB", targets):
        planned = plan_requests(target, options, probes)
        total = sum(r.count for r in planned)
        lines += [f"[{label}] {target.base_url}", *(plan_line(r) for r in planned),
                  f"  at most {min(total, options.request.max_requests)} HTTP requests (plan {total}, "
                  f"budget {options.request.max_requests})", ""]
    lines.append("The samples alternate A, B, A, B …; each request may be retried once (stale keep-alive, or "
                 "429/503 with a short Retry-After) within the same budget.")
    lines.append("Probes, in the order they run, for each endpoint: " + ", ".join(p.name for p in probes))
    lines.append("Credentials: sent only to each endpoint's own origin; redirects are reported, never followed.")
    return "\n".join(lines) + "\n"


def run_side_by_side(
    targets: Sequence[Target], options: Options, *, min_rel: float = 0.10, min_abs_ms: float = 5.0
) -> SideBySide:
    """Measure `SIDE_BY_SIDE` in A's context with B's beside it, then compare phase by phase.

    Each side's requests are counted by probe (`Side.requests_by_probe`). Ctrl-C stops it with
    what it has: both sides marked interrupted, no comparison (exit 3).
    """
    from llmdoctor.context import Context, ProbeUnavailable

    a, b = (Context(target=t, options=options) for t in targets)
    a.beside = b
    sides = [Side(label, t.base_url) for label, t in zip("AB", targets)]
    try:
        a.measure(probes_measured(options))
        measured = a.get(SIDE_BY_SIDE)
        sides = [measured.a, measured.b]
    except ProbeUnavailable as exc:  # the probe itself failed (a bug): both sides say why
        for side in sides:
            side.error = exc.reason
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM before the samples: the comparison is incomplete (exit 3)
        for side in sides:
            side.error = side.error or f"interrupted (Ctrl-C) after {len(side.samples)} samples"
    finally:
        for side, ctx in zip(sides, (a, b)):
            side.requests_sent = ctx.requests_sent
            side.requests_by_probe = ctx.requests_by_probe
            ctx.close()
    result = SideBySide(sides[0], sides[1])
    if not any(s.error for s in sides):
        pa, pb = _phase_samples(sides[0]), _phase_samples(sides[1])
        for metric in ("ttft", "total", *[k for k in pa if k not in ("ttft", "total")]):
            if metric in pb:
                result.comparisons.append(compare_samples(metric, pa[metric], pb[metric], min_rel=min_rel,
                                                          min_abs_ms=min_abs_ms))
    return result
