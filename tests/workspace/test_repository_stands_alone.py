"""The repository stands alone: no file refers to files outside it, and what the design records
cite (the brief's sections) is held in research-wiki/spec.md."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "research-wiki" / "spec.md"
#: A path out of the repository: the sibling `shared` directory the project was started from,
#: by a relative or an absolute path.
OUTSIDE = re.compile(r"\.\./shared\b|/work/shared\b|(?<![\w.])shared/(?:SPEC|STYLE|seeds)\b")
CITATION = re.compile(r"SPEC §(\d+)")


def _tracked_texts() -> dict[str, str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    texts = {}
    for name in filter(None, listed.split("\0")):
        path = ROOT / name
        if name == "uv.lock" or not path.is_file():
            continue
        try:
            texts[name] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # a binary file
    return texts


def test_no_tracked_file_refers_outside_the_repository() -> None:
    this = str(Path(__file__).relative_to(ROOT))
    found = [
        f"{name}: {match.group(0)}"
        for name, text in _tracked_texts().items()
        if name != this
        for match in OUTSIDE.finditer(text)
    ]
    assert found == []


def test_every_cited_section_of_the_brief_is_in_the_wiki() -> None:
    sections = set(re.findall(r"^## (\d+)\. ", SPEC.read_text(), re.M))
    cited = {
        f"{name}: SPEC §{number}"
        for name, text in _tracked_texts().items()
        for number in CITATION.findall(text)
        if number not in sections
    }
    assert sections, "research-wiki/spec.md lost its numbered sections"
    assert cited == set()


def test_the_design_records_say_where_the_brief_is() -> None:
    index = (ROOT / "research-wiki" / "design" / "README.md").read_text()
    assert "(../spec.md)" in index
