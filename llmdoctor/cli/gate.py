"""The gate's command-line pieces: --slo, --compare and --save-baseline, and the options they make.

``check`` applies `gate_options` (a `GateArgs`), ``replay`` applies `replay_gate_options` (a
`SloArgs`: it judges old measurements by new objectives). Heavy imports stay inside the
functions so ``llmdoctor --help`` is fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from llmdoctor.cli.specs import option_group
from llmdoctor.cli.usage import UsageProblem

if TYPE_CHECKING:
    from llmdoctor.options import Options

__all__ = ["GateArgs", "SloArgs", "apply_gate", "gate_options", "inject_reference", "replay_gate_options"]


@dataclass(frozen=True)
class SloArgs:
    """``--slo`` and ``--compare`` as given."""

    slos: tuple[str, ...] = ()
    compare_file: str | None = None


@dataclass(frozen=True)
class GateArgs(SloArgs):
    """``--slo``, ``--compare`` and ``--save-baseline`` as given."""

    save_baseline: str | None = None


_SLO = click.option("--slo", "slos", multiple=True, metavar="METRIC=LIMIT",
                    help="Latency objective, e.g. ttft_p90=800ms, total_p50=2s, fixed_cost=300ms, per_token=20ms "
                         "(repeatable; also [slo] in llmdoctor.toml). A breach is a critical finding (LD710).")
_COMPARE = click.option("--compare", "compare_file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                        help="Report regressions against a baseline saved with --save-baseline (LD711).")
_SAVE_BASELINE = click.option("--save-baseline", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                              help="Save this run's measurements as a baseline for a later --compare.")

#: ``check``'s gate: --slo, --save-baseline, --compare, as a `GateArgs` named ``gate``.
gate_options = option_group("gate", GateArgs, _SLO, _SAVE_BASELINE, _COMPARE)
#: ``replay``'s gate: --slo and --compare, as a `SloArgs` named ``gate``.
replay_gate_options = option_group("gate", SloArgs, _SLO, _COMPARE)


def apply_gate(options: Options, gate: SloArgs) -> Options:
    """Options with the SLOs (config file, overridden by flags) and the baseline file to compare with."""
    import dataclasses
    import os

    from llmdoctor.inputs.slo import SloError, load_config, merge_slos, parse_slo, slos_from_config

    try:
        config, source = load_config(".")
        merged = merge_slos(slos_from_config(config, source), [parse_slo(s) for s in gate.slos])
    except SloError as exc:
        raise UsageProblem(str(exc)) from None
    compare_file = gate.compare_file
    if compare_file is not None:
        from llmdoctor.inputs.recording import RecordingError
        from llmdoctor.probes.reference import reference_from_recording

        if not os.path.isfile(compare_file):
            raise UsageProblem(f"--compare {compare_file}: no such file")
        try:
            reference_from_recording(compare_file)
        except RecordingError as exc:
            raise UsageProblem(str(exc)) from None
    return dataclasses.replace(options, gate=dataclasses.replace(options.gate, slos=merged, compare_file=compare_file))


def inject_reference(measurements: dict[str, Any], compare_file: str | None) -> dict[str, Any]:
    """For a replay with --compare: put the baseline file's reference into the recorded measurements."""
    if not compare_file:
        return measurements
    from llmdoctor.probes.reference import reference_from_recording
    from llmdoctor.serde import to_data

    return {**measurements, "reference": to_data(reference_from_recording(compare_file))}
