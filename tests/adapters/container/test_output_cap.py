"""The output cap as a pure function: the observation fits, and the count of cut characters is
exact."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from polyloop.adapters._output import cap_output


@given(
    output=st.text(max_size=300),
    dropped=st.integers(min_value=0, max_value=10**7),
    note=st.sampled_from(["", "\n[interrupted]\n"]),
    cap=st.integers(min_value=1, max_value=400),
)
def test_cap_fits_and_counts_exactly(output: str, dropped: int, note: str, cap: int) -> None:
    """The capped text fits the cap, shows the head of the output, and counts the cut exactly."""
    capped = cap_output(output, dropped, note, cap)
    text, cut = capped.text, capped.cut_chars
    total = len(output) + dropped
    assert len(text) <= cap
    if total + len(note) <= cap:
        assert (text, cut) == (output + note, 0)
        return
    shown = total - cut
    assert 0 <= shown <= len(output)
    # What is shown is exactly the head of the output.
    assert text.startswith(output[:shown])
    if cap >= len(note) + 60:
        assert f"{cut} more characters" in text
        assert text.endswith(note)
