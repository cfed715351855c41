"""`llmdoctor compare`: two endpoints side by side, requests interleaved A, B, A, B …"""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from llmdoctor.cli.output import emit
from llmdoctor.cli.usage import UsageProblem, check_client, require_finite, target_from_args

__all__ = ["compare"]


@click.command()
@click.option("--endpoint", "-e", "endpoints", multiple=True, required=True, metavar="URL",
              help="Give exactly two: A (e.g. production) and B (e.g. the same model in a clean environment).")
@click.option("--model", "-m", "models", multiple=True, metavar="NAME",
              help="Model to probe; once for both, or twice (A then B). Default: each endpoint's first model.")
@click.option("--api-key-env", "key_envs", multiple=True, metavar="NAME",
              help="Environment variable with the API key; once for both, or twice (A then B).")
@click.option("--samples", type=click.IntRange(5, 200), default=10, show_default=True,
              help="Interleaved samples per endpoint (at least 5 for the rank test).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0.1, 3600), default=30.0, show_default=True,
              help="Per-request timeout in seconds.")
@click.option("--insecure", is_flag=True, help="Accept any TLS certificate.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON (schema/compare.schema.json).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None, help="Write to FILE.")
@click.option("--dry-run", is_flag=True, help="Print the requests each endpoint would get (at most) and send none.")
def compare(endpoints: tuple[str, ...], models: tuple[str, ...], key_envs: tuple[str, ...], samples: int,
            timeout_s: float, insecure: bool, as_json: bool, output: str | None, dry_run: bool) -> NoReturn:
    """Compare two endpoints phase by phase, requests interleaved A, B, A, B … so drift hits both alike.

    \b
    Each phase of the waterfall, TTFT and total are compared with a
    Mann-Whitney U test and a bootstrap interval of the difference of
    medians (a difference must exceed 10% and 5 ms to count).
    Exit: 0 no difference beyond noise · 1 a phase differs · 3 could not measure.

    \b
    Example:
      llmdoctor compare -e https://llm.prod.internal -e http://clean-box:8000 --samples 20
    """
    from llmdoctor.options import NetworkOptions, Options, RequestPolicy
    from llmdoctor.render.compare import render_compare_json, render_compare_text
    from llmdoctor.sidebyside import render_dry_run, run_side_by_side
    from llmdoctor.target import DEFAULT_API_KEY_ENV, TargetSpec

    require_finite()
    if len(endpoints) != 2:
        raise UsageProblem("compare needs exactly two --endpoint values (A and B)")
    for name, values in (("--model", models), ("--api-key-env", key_envs)):
        if len(values) > 2:
            raise UsageProblem(f"{name} takes one value (both) or two (A then B)")

    def pick(values: tuple[str, ...], i: int, default: str | None) -> str | None:
        return values[min(i, len(values) - 1)] if values else default

    targets = [
        target_from_args(TargetSpec(url, model=pick(models, i, None),
                                    api_key_env=pick(key_envs, i, DEFAULT_API_KEY_ENV) or DEFAULT_API_KEY_ENV))
        for i, url in enumerate(endpoints)
    ]
    options = Options(request=RequestPolicy(timeout_s=timeout_s, samples=samples, max_requests=samples + 10),
                      network=NetworkOptions(insecure=insecure))
    for target in targets:
        check_client(target, options)
    if dry_run:
        emit(render_dry_run(targets, options), output)
        sys.exit(0)
    result = run_side_by_side(targets, options)
    emit(render_compare_json(result) if as_json else render_compare_text(result), output)
    sys.exit(result.exit_code)
