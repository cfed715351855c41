"""``--budget requests=N,seconds=S``: what the follow-up tests may spend."""

from __future__ import annotations

__all__ = ["BudgetError", "parse_budget"]


class BudgetError(ValueError):
    """The budget text cannot be read (one-line message)."""


def parse_budget(text: str, requests: int, seconds: float) -> tuple[int, float]:
    """``requests=N,seconds=S`` (either part may be left out) over the defaults given."""
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        try:
            if not sep:
                raise ValueError
            if key == "requests":
                requests = int(value)
                if requests < 0:
                    raise ValueError
            elif key == "seconds":
                seconds = float(value.strip().removesuffix("s"))
                if not 0 <= seconds < float("inf"):
                    raise ValueError
            else:
                raise BudgetError(f"--budget: unknown part {key!r}: use requests=N,seconds=S")
        except ValueError as exc:
            if isinstance(exc, BudgetError):
                raise
            raise BudgetError(f"--budget: {part!r} is not a non-negative number: use requests=N,seconds=S") from None
    return requests, seconds
