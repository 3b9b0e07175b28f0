"""The output cap shared by the executors: an observation never exceeds its limit, and the
number of characters cut is exact (it becomes ``observation_truncated_chars``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CappedOutput", "cap_output"]


@dataclass(frozen=True, slots=True)
class CappedOutput:
    """The observation to show and how many characters of output it leaves out."""

    text: str
    cut_chars: int


def _marker(cut: int) -> str:
    return f"\n[... {cut} more characters of output not shown ...]\n"


def cap_output(output: str, dropped: int, note: str, cap: int) -> CappedOutput:
    """Fit ``output`` (of which ``dropped`` further characters were already cut) plus ``note``
    into ``cap`` characters: the head of the output, a one-line marker saying how much is not
    shown, then ``note``."""
    total = len(output) + dropped
    if total + len(note) <= cap:
        return CappedOutput(output + note, 0)
    keep = min(len(output), max(0, cap - len(note)))
    for _ in range(3):
        keep = min(len(output), max(0, cap - len(note) - len(_marker(total - keep))))
    cut = total - keep
    text = output[:keep] + _marker(cut) + note
    if len(text) > cap:
        # A cap too small for the marker: plain cut.
        text = (output[:keep] + note)[:cap]
    return CappedOutput(text, cut)
