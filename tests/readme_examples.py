"""The Python examples of the READMEs, and the distributions each one names for `pip install`.

An example's install is the `pip install` commands before it in its own section (a `##` or
`###` heading), or, when that section has none, those of the README's preamble (above its first
`##` heading: a package README names itself there).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
READMES = (ROOT / "README.md", *sorted(ROOT.glob("packages/*/README.md")))

_BLOCK = re.compile(r"```python\n(.*?)```", re.S)
_HEADING = re.compile(r"^#{2,3} ", re.M)
_PIP = re.compile(r"pip install ((?:[^\n`#)]|\)(?!\s))+)")
_IMPORT = re.compile(r"^\s*(?:from|import) (polyloop[\w.]*|polyloop_\w+)", re.M)
#: Modules that need an extra of their distribution.
_EXTRAS = {
    "polyloop.stores.postgres": "postgres",
    "polyloop.adapters.mcp": "mcp",
    "polyloop.adapters.otel": "otel",
    "polyloop.adapters.openai_client": "openai",
    "polyloop.adapters.litellm_client": "litellm",
    "polyloop.batch.ray": "ray",
}
_DISTRIBUTION_OF = (
    ("polyloop.stores", "polyloop-stores"),
    ("polyloop.adapters", "polyloop-adapters"),
    ("polyloop.batch", "polyloop-batch"),
    ("polyloop_contract", "polyloop-contract"),
    ("polyloop_cli", "polyloop-cli"),
    ("polyloop", "polyloop-core"),
)


@dataclass(frozen=True, slots=True)
class Example:
    readme: Path
    line: int
    code: str
    #: What its install names, as written (`polyloop-adapters[mcp]`).
    installs: tuple[str, ...]

    def where(self) -> str:
        return f"{self.readme.relative_to(ROOT)}:{self.line}"


def _installs(text: str) -> list[str]:
    found = []
    for command in _PIP.findall(text):
        for word in command.split():
            word = word.strip("'\"")
            if word.startswith("polyloop"):
                found.append(word)
    return found


def examples() -> list[Example]:
    found = []
    for readme in READMES:
        text = readme.read_text(encoding="utf-8")
        first_heading = _HEADING.search(text)
        preamble = text[: first_heading.start()] if first_heading else text
        for block in _BLOCK.finditer(text):
            headings = [m.start() for m in _HEADING.finditer(text, 0, block.start())]
            section = text[headings[-1] if headings else 0 : block.start()]
            installs = _installs(section) or _installs(preamble)
            line = text.count("\n", 0, block.start()) + 1
            found.append(Example(readme, line, block.group(1), tuple(installs)))
    return found


def needed(code: str) -> set[str]:
    """The distributions (with extras: ``polyloop-stores[postgres]``) ``code`` imports from."""
    wanted = set()
    for module in _IMPORT.findall(code):
        distribution = next(d for prefix, d in _DISTRIBUTION_OF if module.startswith(prefix))
        extra = next((e for m, e in _EXTRAS.items() if module.startswith(m)), None)
        wanted.add(f"{distribution}[{extra}]" if extra else distribution)
    return wanted


def _requirements(distribution: str) -> set[str]:
    """The workspace distributions (with extras) ``distribution`` depends on, itself excluded."""
    name, _, extras = distribution.partition("[")
    project = tomllib.loads((ROOT / "packages" / name / "pyproject.toml").read_text())["project"]
    listed = list(project["dependencies"])
    for extra in filter(None, extras.rstrip("]").split(",")):
        listed += project["optional-dependencies"][extra]
    found = set()
    for requirement in listed:
        match = re.match(r"(polyloop-[a-z]+)(\[[a-z,]+\])?", requirement)
        if match:
            found.add(match.group(1) + (match.group(2) or ""))
    return found


def provided(installs: tuple[str, ...]) -> set[str]:
    """Every distribution, with its extras, that installing ``installs`` brings."""
    seen: set[str] = set()
    todo = list(installs)
    while todo:
        each = todo.pop()
        if each not in seen:
            seen.add(each)
            todo += _requirements(each)
    bare = {each.partition("[")[0] for each in seen}
    return seen | bare
