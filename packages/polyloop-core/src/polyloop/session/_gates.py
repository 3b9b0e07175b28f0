"""Which actions wait for a person, and the request a gated action records (design 0037).

An action is gated when its tool ``requires_approval`` or ``asks_user``, or when the request's
:class:`ApprovalPolicy` says so for that one call (tool-less actions too). A request with none
of these is ungated: the loop then never looks here, and its log and snapshot are what they
were before gating existed.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from polyloop.asking import (
    AskKind,
    UserAsked,
)
from polyloop.errors import ConfigurationError
from polyloop.ports import Action
from polyloop.tools import ToolRegistry, ToolSpec, canonical_arguments

__all__ = [
    "DEFAULT_REJECTED_TEMPLATE",
    "QUESTION_ARGUMENT",
    "REASON_TOKEN",
    "ApprovalPolicy",
    "Gates",
    "now_iso",
    "sha256_text",
]

#: Replaced (literally) by the person's reason in ``RunRequest.rejected_template``.
REASON_TOKEN = "{reason}"
#: The observation of an action a person rejected; ``{reason}`` is their reason.
DEFAULT_REJECTED_TEMPLATE = (
    "This action was not run: a person reviewing it refused it. Their reason: {reason}"
)
#: The argument of an ``asks_user`` tool that holds the question shown to the user.
QUESTION_ARGUMENT = "question"


@runtime_checkable
class ApprovalPolicy(Protocol):
    """A host's rule for which single actions wait for a person (e.g. "refunds above 50 EUR").

    ``name`` is recorded in the parameter snapshot and in every ask, so a resume or a decision
    under another policy is refused. Calling it must be pure and cheap: it is asked once per
    action, and again on resume for the action of a recorded ask.
    """

    @property
    def name(self) -> str:
        """A stable name of this rule (and its thresholds), for the snapshot."""
        ...

    def __call__(self, action: Action) -> bool:
        """``True``: this action waits for a person's approval before it runs."""
        ...


def sha256_text(text: str) -> str:
    """SHA-256 hex digest of ``text``'s UTF-8 (lone surrogates kept, as the snapshot does)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def now_iso() -> str:
    """The current UTC time, ISO 8601 to the second (``asked_at``/``decided_at``)."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _check(policy: object, rejected_template: object) -> None:
    if policy is not None:
        name = getattr(policy, "name", None)
        if not callable(policy) or not isinstance(name, str) or not name:
            raise ConfigurationError(
                "approval_policy must be an ApprovalPolicy: a callable taking an Action and "
                "returning bool, with a non-empty string `name` (recorded in the snapshot)."
            )
    if not isinstance(rejected_template, str) or REASON_TOKEN not in rejected_template:
        raise ConfigurationError(
            f"rejected_template must contain the token {REASON_TOKEN!r}; got "
            f"{rejected_template!r}. The model must read why its action was refused."
        )


@dataclass(frozen=True, slots=True)
class Gates:
    """The gating rules of one invocation; :meth:`of` returns ``None`` when nothing is gated.

    The tools' flags come with the request; ``policy`` and ``rejected_template`` are keyword
    arguments of ``run_or_park``/``resume_or_park`` (``RunRequest`` keeps its seed fields).
    """

    tools: ToolRegistry
    policy: ApprovalPolicy | None
    rejected_template: str = DEFAULT_REJECTED_TEMPLATE

    @staticmethod
    def is_gated(tools: ToolRegistry, policy: ApprovalPolicy | None) -> bool:
        if policy is not None:
            return True
        for name in tools.names():
            spec = tools.spec_for(name)
            if spec is not None and (spec.requires_approval or spec.asks_user):
                return True
        return False

    @classmethod
    def of(
        cls,
        tools: ToolRegistry,
        policy: ApprovalPolicy | None = None,
        rejected_template: str = DEFAULT_REJECTED_TEMPLATE,
    ) -> Gates | None:
        """The gates of a run, checked; ``None`` when no action of it can wait for a person."""
        _check(policy, rejected_template)
        if not cls.is_gated(tools, policy):
            return None
        return cls(tools, policy, rejected_template)

    def parameters(self) -> Mapping[str, str]:
        """The snapshot keys of gating (under ``approval.``): the policy's name when there is
        one, and the rejection template. An ungated run records neither."""
        keys = {"rejected_template": self.rejected_template}
        if self.policy is not None:
            keys["policy"] = self.policy.name
        return keys

    def kind_for(self, action: Action, spec: ToolSpec | None) -> AskKind | None:
        """What ``action`` (whose tool, if any, is ``spec``) asks of a person, or ``None``."""
        if spec is not None:
            if spec.asks_user:
                return AskKind.QUESTION
            if spec.requires_approval:
                return AskKind.APPROVAL
        if self.policy is not None and self.policy(action) is True:
            return AskKind.APPROVAL
        return None

    def asked(
        self, run_id: str, step: int, kind: AskKind, action: Action, spec: ToolSpec | None
    ) -> UserAsked:
        """The ``UserAsked`` record of ``action`` at ``step``, bound to exactly that action."""
        call = action.tool_call
        if call is None or spec is None:
            arguments_json = None
            arguments_sha256 = sha256_text(action.text)
            schema_sha256 = description_sha256 = None
        else:
            arguments_json = canonical_arguments(call.arguments)
            arguments_sha256 = sha256_text(arguments_json)
            schema_sha256, description_sha256 = tool_digests(spec)
        question = None
        if kind is AskKind.QUESTION:
            assert call is not None
            question = question_of(call.arguments)
        return UserAsked(
            run_id=run_id,
            step=step,
            kind=kind,
            action=action.text,
            tool_name=None if call is None else call.name,
            arguments_json=arguments_json,
            arguments_sha256=arguments_sha256,
            schema_sha256=schema_sha256,
            description_sha256=description_sha256,
            policy_name=None if self.policy is None else self.policy.name,
            question=question,
            asked_at=now_iso(),
        )


def tool_digests(spec: ToolSpec) -> tuple[str, str]:
    """(schema, description) digests of a tool, exactly as the parameter snapshot has them."""
    return sha256_text(canonical_arguments(spec.parameters)), sha256_text(spec.description)


def question_of(arguments: Mapping[str, object]) -> str:
    """The question an ``asks_user`` call shows: its ``question`` argument when that is a
    string, else the call's canonical arguments."""
    value = arguments.get(QUESTION_ARGUMENT)
    return value if isinstance(value, str) else canonical_arguments(arguments)
