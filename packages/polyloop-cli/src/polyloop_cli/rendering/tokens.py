"""A run's tokens by one rule (design 0061): each recorded reply's count, summed over every
reply, that of a step not completed too (its tokens were spent). The viewer's pages, the runs
page and any other caller count the same way."""

from __future__ import annotations

from collections.abc import Mapping

from polyloop.ports import RunLog

__all__ = ["run_tokens", "run_usage", "tokens_of"]


def tokens_of(usage: Mapping[str, int]) -> int:
    """One number for a usage mapping: ``total_tokens`` if reported, else the sum of the
    top-level counts (nested details, named with a ``.``, are parts of those)."""
    if "total_tokens" in usage:
        return usage["total_tokens"]
    return sum(count for key, count in usage.items() if "." not in key)


def _usages(log: RunLog) -> list[Mapping[str, int]]:
    return [r.reply.usage for r in log.model_results if r.reply is not None and r.reply.usage]


def run_tokens(log: RunLog) -> int | None:
    """The run's tokens: :func:`tokens_of` each recorded reply, summed. ``None``: no reply
    reported usage."""
    usages = _usages(log)
    if not usages:
        return None
    return sum(tokens_of(usage) for usage in usages)


def run_usage(log: RunLog) -> dict[str, int]:
    """Each usage key summed over the same replies as :func:`run_tokens`."""
    totals: dict[str, int] = {}
    for usage in _usages(log):
        for key, count in usage.items():
            totals[key] = totals.get(key, 0) + count
    return totals
