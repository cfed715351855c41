"""The commands that need no endpoint: `replay` (recorded measurements), `checks` and `explain`."""

from __future__ import annotations

from typing import Any

import click

from llmdoctor.cli.export import export_options, export_settings
from llmdoctor.cli.modes import apply_gate, inject_reference, replay_gate_options
from llmdoctor.cli.output import common_output_options, run_and_exit
from llmdoctor.cli.usage import UsageProblem, require_format, require_known_ids

__all__ = ["explain", "list_checks", "replay"]


@click.command(name="checks")
@click.option("--json", "as_json", is_flag=True, help="List as JSON.")
def list_checks(as_json: bool) -> None:
    """List the checklist: ids, names, categories and titles, in the order they run."""
    from llmdoctor.registry import available_checks

    registry = available_checks()  # from the generated index: no check module is imported
    if as_json:
        import json

        rows = [{"id": c.id, "name": c.name, "category": c.category, "title": c.title,
                 "requires": list(c.requires), "optional": list(c.optional)}
                for c in registry.checks]
        click.echo(json.dumps(rows, indent=2))
        return
    for c in registry.checks:
        click.echo(f"{c.id:<7}{c.category:<12}{c.name:<28}{c.title}")
    if registry.errors:
        from llmdoctor.redact import redact_output

        for err in registry.errors:  # a plugin's error may quote anything, a credential included
            click.echo(redact_output(f"(plugin {err.name} failed to load: {err.reason})"), err=True)


@click.command()
@click.argument("check_id")
def explain(check_id: str) -> None:
    """Print a check's documentation: what it checks, why it matters, how to fix it."""
    import inspect

    from llmdoctor.registry import find_check

    check_cls = find_check(check_id)
    if check_cls is None:
        raise UsageProblem(f"no check {check_id!r}; `llmdoctor checks` lists them")
    click.echo(f"{check_cls.id} {check_cls.name} — {check_cls.title}  [{check_cls.category.value}]\n")
    click.echo(inspect.cleandoc(check_cls.__doc__ or ""))
    if check_cls.declared():
        click.echo(f"\nMeasurements used: {', '.join(p.name for p in check_cls.declared())}")


@click.command()
@click.argument("recording", type=click.Path(exists=True, dir_okay=False))
@replay_gate_options
@export_options
@common_output_options
def replay(recording: str, as_json: bool, fmt: str | None, output: str | None, select: tuple[str, ...],
           ignore: tuple[str, ...], fail_on: str, slos: tuple[str, ...], compare_file: str | None,
           **export_values: Any) -> None:
    """Re-run the checks offline on measurements saved with --save-measurements.

    With --slo / --compare, judge the recorded measurements by these objectives or this baseline.
    """
    from llmdoctor.recording import RecordingError, load_recording

    try:
        target, options, measurements = load_recording(recording)
    except RecordingError as exc:
        raise UsageProblem(str(exc)) from None
    require_format(fmt or "text")
    require_known_ids(select, ignore)
    export = export_settings(export_values)
    if slos or compare_file:
        options = apply_gate(options, slos, compare_file or options.gate.compare_file)
        measurements = inject_reference(measurements, compare_file)
    run_and_exit(target, options, fmt or ("json" if as_json else "text"), output, None, select, ignore, fail_on,
                 recorded=measurements, export=export)
