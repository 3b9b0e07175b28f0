"""The result ids the loop allocates: a pure function of (kind, call_index), so a replay of a
call reuses the id of the call it repeats."""

from __future__ import annotations

__all__ = ["action_result_id", "model_result_id"]


def model_result_id(call_index: int) -> str:
    """The result id of step ``call_index``'s model call: deterministic, so a replay reuses it."""
    return f"model-{call_index}"


def action_result_id(call_index: int) -> str:
    """The result id of step ``call_index``'s action."""
    return f"action-{call_index}"
