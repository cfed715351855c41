"""Renderers: one plain function per output format; the report never renders itself."""

from __future__ import annotations

from collections.abc import Callable

from llmdoctor.reporting.report import Report

__all__ = ["RENDERERS", "render"]


def _json(report: Report) -> str:
    from llmdoctor.render.json import render_json

    return render_json(report)


def _text(report: Report) -> str:
    from llmdoctor.render.terminal import render_terminal

    return render_terminal(report)


def _markdown(report: Report) -> str:
    from llmdoctor.render.markdown import render_markdown

    return render_markdown(report)


def _junit(report: Report) -> str:
    from llmdoctor.render.junit import render_junit

    return render_junit(report)


def _html(report: Report) -> str:
    from llmdoctor.render.html import render_html

    return render_html(report)


def _prometheus(report: Report) -> str:
    from llmdoctor.render.prometheus import render_prometheus

    return render_prometheus(report)


# format name -> function(report) -> str
RENDERERS: dict[str, Callable[[Report], str]] = {
    "text": _text,
    "json": _json,
    "markdown": _markdown,
    "junit": _junit,
    "html": _html,
    "prometheus": _prometheus,
}


def render(report: Report, fmt: str) -> str:
    """Render `report` in format `fmt` (a key of `RENDERERS`)."""
    return RENDERERS[fmt](report)
