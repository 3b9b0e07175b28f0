"""Reading an episodes file: every bad line is refused by number, before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polyloop.batch import Episode, EpisodesFileError, check_episodes_file
from polyloop.batch.episodes import parse_episode_line

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)
RUN_IDS = st.text(min_size=1).filter(lambda text: not any(0xD800 <= ord(c) <= 0xDFFF for c in text))


@given(run_id=RUN_IDS, data=st.dictionaries(st.text(), JSON_VALUES, max_size=4))
def test_a_line_with_a_string_run_id_is_that_episode_with_its_data(
    run_id: str, data: dict[str, object]
) -> None:
    """Any JSON object with a non-empty string run_id parses to an episode holding the object."""
    line = {**data, "run_id": run_id}
    assert Episode(run_id, line) == parse_episode_line(json.dumps(line) + "\n", 3, Path("e"))


@given(line=st.text())
def test_any_line_is_an_episode_nothing_or_an_error_naming_its_number(line: str) -> None:
    """Arbitrary text never raises anything but EpisodesFileError, and that names the line."""
    refusal: EpisodesFileError | None = None
    parsed: Episode | None = None
    try:
        parsed = parse_episode_line(line, 7, Path("eps.jsonl"))
    except EpisodesFileError as error:
        refusal = error
    if refusal is not None:
        assert (7, True) == (refusal.line, "eps.jsonl, line 7" in str(refusal))
    else:
        assert parsed is None or isinstance(parsed.run_id, str)


@pytest.mark.parametrize(
    ("lines", "line", "words"),
    [
        (['{"run_id": "a"}', "{not json", '{"run_id": "b"}'], 2, "is not JSON"),
        (['{"run_id": "a"}', '{"task": 1}'], 2, "has no run_id"),
        (['{"run_id": 7}'], 1, "run_id is 7, not a non-empty string"),
        (['{"run_id": ""}'], 1, 'run_id is "", not a non-empty string'),
        (['{"run_id": "a"}', "", '["run_id", "b"]'], 3, "holds a JSON list, not an object"),
        (
            ['{"run_id": "a"}', '{"run_id": "b"}', '{"run_id": "a"}'],
            3,
            "is already the run_id of line 1",
        ),
        (['{"run_id": "\\ud800"}'], 1, "lone surrogate"),
    ],
)
def test_a_bad_line_is_refused_naming_its_number(
    tmp_path: Path, lines: list[str], line: int, words: str
) -> None:
    """Not JSON, not an object, a missing, non-string, empty or repeated run_id: one error,
    naming the file and the line, saying nothing was started."""
    path = tmp_path / "eps.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(EpisodesFileError) as caught:
        check_episodes_file(path)
    message = str(caught.value)
    assert (line, True, True, True) == (
        caught.value.line,
        f"{path}, line {line}" in message,
        words in message,
        message.endswith("Nothing was started."),
    )


def test_a_line_that_is_not_utf8_is_refused_by_number(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 on line 2 are refused as line 2."""
    path = tmp_path / "eps.jsonl"
    path.write_bytes(b'{"run_id": "a"}\n{"run_id": "\xff"}\n')
    with pytest.raises(EpisodesFileError, match=r"line 2 is not UTF-8 text") as caught:
        check_episodes_file(path)
    assert 2 == caught.value.line


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    """A path with no file is refused saying so."""
    with pytest.raises(EpisodesFileError, match="cannot read the episodes file"):
        check_episodes_file(tmp_path / "nowhere.jsonl")


def test_a_good_file_is_counted_and_streamed_in_order(tmp_path: Path) -> None:
    """Blank lines are skipped; the episodes come back in file order with their data."""
    path = tmp_path / "eps.jsonl"
    path.write_text('{"run_id": "b", "x": 1}\n\n   \n{"run_id": "a"}\r\n', encoding="utf-8")
    checked = check_episodes_file(path)
    assert (2, [Episode("b", {"run_id": "b", "x": 1}), Episode("a", {"run_id": "a"})]) == (
        checked.count,
        list(checked.episodes()),
    )
