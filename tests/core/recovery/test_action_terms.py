"""`polyloop.recovery.action_terms` is the one statement of an action's replay terms.

A tool-less action is ``never`` to replay and completes nothing; a tool call takes its spec's
``replay_policy`` and ``completes_run``. The callers (the loop, resume, the validation and the
record builders) are shown to agree with it in ``tests/core/session/test_action_terms.py``; here
the rule itself, and that none of them writes the rule's literal again.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

import polyloop
from polyloop.recovery import TOOL_LESS_TERMS, ActionTerms, action_terms
from polyloop.recovery._terms import repeated_on_resume
from polyloop.tools import ToolSpec
from polyloop.types import ReplayPolicy

CORE = Path(polyloop.__file__).parent
#: Every module that once wrote the rule out for itself (issue 28) and now asks `action_terms`.
CALLERS = (
    "session/_loop.py",
    "session/_resume.py",
    "recovery/_validation.py",
    "testing/_records.py",
)
TERMS_MODULE = "recovery/_terms.py"
COMBINATIONS = list(itertools.product(ReplayPolicy, (False, True)))


def _spec(policy: ReplayPolicy, completes_run: bool) -> ToolSpec:
    return ToolSpec("t", "A tool.", {"type": "object"}, policy, completes_run)


def test_a_tool_less_action_is_never_to_replay_and_completes_nothing() -> None:
    """Whatever tools there are, no tool called means `never` and no completion."""
    assert ActionTerms(ReplayPolicy.NEVER, completes_run=False) == TOOL_LESS_TERMS
    for policy, completes_run in COMBINATIONS:
        spec = _spec(policy, completes_run)
        assert TOOL_LESS_TERMS is action_terms(None, lambda name, spec=spec: spec)


@pytest.mark.parametrize(("policy", "completes_run"), COMBINATIONS)
def test_a_tool_call_takes_its_specs_terms(policy: ReplayPolicy, completes_run: bool) -> None:
    spec = _spec(policy, completes_run)
    asked: list[str] = []

    def spec_for(name: str) -> ToolSpec:
        asked.append(name)
        return spec

    assert ActionTerms(policy, completes_run) == action_terms("t", spec_for)
    assert ["t"] == asked


def test_an_unknown_tool_has_no_terms() -> None:
    assert action_terms("gone", lambda name: None) is None


def test_a_default_tool_spec_is_never_to_replay() -> None:
    """The first file of the trail: a `ToolSpec` that says nothing is `never` to replay."""
    spec = ToolSpec("t", "A tool.", {"type": "object"})
    assert ActionTerms(ReplayPolicy.NEVER, False) == action_terms("t", lambda name: spec)


def _never_literals(relative: str) -> list[int]:
    """Lines of ``relative`` (under core) that name ``ReplayPolicy.NEVER``."""
    tree = ast.parse((CORE / relative).read_text(encoding="utf-8"))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr == "NEVER"
        and isinstance(node.value, ast.Name)
        and node.value.id == "ReplayPolicy"
    ]


@pytest.mark.parametrize("relative", CALLERS)
def test_no_caller_writes_the_rule_again(relative: str) -> None:
    """The callers neither name `ReplayPolicy.NEVER` nor go without the one function (resume
    asks through the loop's `Driver.terms_of`, which calls it)."""
    assert [] == _never_literals(relative)
    source = (CORE / relative).read_text(encoding="utf-8")
    assert any(use in source for use in ("action_terms(", "terms_of(", "TOOL_LESS_TERMS"))


def test_the_rule_is_written_once_in_its_module() -> None:
    """`recovery/_terms.py` names `ReplayPolicy.NEVER` exactly once: the tool-less terms."""
    assert 1 == len(_never_literals(TERMS_MODULE))


@pytest.mark.parametrize("policy", list(ReplayPolicy))
def test_only_a_safe_intent_in_doubt_is_made_again(policy: ReplayPolicy) -> None:
    """`repeated_on_resume` (what `plan_resume` asks of an intent in doubt) holds for `safe`
    alone."""
    assert repeated_on_resume(policy) is (policy is ReplayPolicy.SAFE)
