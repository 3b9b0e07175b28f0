"""The values and records of a run that waits for a person (design 0037).

Beside :mod:`polyloop.types` at the bottom of the dependency graph (``polyloop.types`` keeps
exactly the names of design 0006): the two log records a gated run writes, ``UserAsked``
(the request, bound to exactly one action) and ``UserAnswered`` (the decision), their enums,
and ``RunParked``, what the loop returns when a run waits. Nothing here imports another
PolyLoop module except :mod:`polyloop.errors` and ``polyloop._frozen``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from polyloop._frozen import fast_frozen_init
from polyloop.errors import ConfigurationError

__all__ = ["AskKind", "PendingAsk", "RunParked", "UserAnswered", "UserAsked", "Verdict"]


def _require_step(owner: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"{owner}.step must be an int >= 0, got {value!r}.")


# ---------------------------------------------------------------------------
# Asking a person (design 0037): two more log records, written only by gated runs
# ---------------------------------------------------------------------------


class AskKind(StrEnum):
    """What a run parked on asks of a person."""

    #: May this exact action run? (a tool marked ``requires_approval``, or the request's policy)
    APPROVAL = "approval"
    #: The model asks the user something (a tool marked ``asks_user``); the answer is the
    #: step's observation.
    QUESTION = "question"


class Verdict(StrEnum):
    """What a person decided about an ask. ``ANSWER`` answers a question; the other three
    decide an approval."""

    APPROVE = "approve"
    EDIT = "edit"
    REJECT = "reject"
    ANSWER = "answer"


def _require_digest(owner: str, name: str, value: object, *, nullable: bool) -> None:
    if value is None and nullable:
        return
    if not isinstance(value, str) or len(value) != 64 or value.strip("0123456789abcdef") != "":
        raise ConfigurationError(
            f"{owner}.{name} must be a SHA-256 hex digest (64 lowercase hex digits), got "
            f"{value!r}; copy it from the pending ask."
        )


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class UserAsked:
    """Written after step ``step``'s decision parsed into a gated action, before any action
    intent of that step: the request to a person, bound to exactly that action.

    The digests bind a decision to what was asked: ``arguments_sha256`` is the SHA-256 of
    ``arguments_json`` (of ``action`` for a tool-less action), ``schema_sha256`` and
    ``description_sha256`` those the parameter snapshot records for the tool. ``step`` names
    the ask (a run asks at most once per step): every decision names it (design 0059), so two
    asks alike in everything else are never confused.
    """

    run_id: str
    step: int
    kind: AskKind
    #: ``Action.text`` of the gated action, as the step record will hold it.
    action: str
    #: ``None`` for a tool-less action.
    tool_name: str | None
    #: Canonical JSON of the call's arguments (sorted keys, no spaces); ``None`` without a tool.
    arguments_json: str | None
    arguments_sha256: str
    schema_sha256: str | None
    description_sha256: str | None
    #: ``ApprovalPolicy.name`` of the request's policy, when it has one.
    policy_name: str | None
    #: The question shown to the user (``QUESTION`` asks only).
    question: str | None
    #: When it was asked: ISO 8601, UTC, seconds.
    asked_at: str

    def __post_init__(self) -> None:
        _require_step("UserAsked", self.step)
        if not isinstance(self.kind, AskKind):
            raise ConfigurationError(f"UserAsked.kind must be an AskKind, got {self.kind!r}.")
        _require_digest("UserAsked", "arguments_sha256", self.arguments_sha256, nullable=False)
        _require_digest("UserAsked", "schema_sha256", self.schema_sha256, nullable=True)
        _require_digest("UserAsked", "description_sha256", self.description_sha256, nullable=True)
        if (self.tool_name is None) != (self.arguments_json is None):
            raise ConfigurationError(
                f"UserAsked for step {self.step} of run {self.run_id!r}: tool_name and "
                "arguments_json are set together (a tool call) or both None (a tool-less action)."
            )
        if (self.kind is AskKind.QUESTION) != (self.question is not None):
            raise ConfigurationError(
                f"UserAsked for step {self.step} of run {self.run_id!r}: a question ask carries "
                "its question, an approval ask none."
            )


#: The ask a parked run waits on, as :func:`polyloop.recovery.pending_ask` reads it from the
#: log: the :class:`UserAsked` record itself.
PendingAsk = UserAsked


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class UserAnswered:
    """A person's decision on the ask of step ``step``, written at most once per ask, under
    the run's lease, before the step's action intent (if it gets one).

    ``arguments_sha256`` repeats the ask's: the decision is bound to the action asked about.
    ``arguments_json`` is set for ``EDIT`` (the canonical JSON of the arguments approved
    instead), ``reason`` for ``REJECT`` (the model reads it), ``answer`` for ``ANSWER``.
    """

    run_id: str
    step: int
    verdict: Verdict
    arguments_sha256: str
    arguments_json: str | None
    reason: str | None
    answer: str | None
    #: Who decided, in the host's words (``""`` when it did not say).
    decided_by: str
    #: When: ISO 8601, UTC, seconds.
    decided_at: str

    def __post_init__(self) -> None:
        _require_step("UserAnswered", self.step)
        if not isinstance(self.verdict, Verdict):
            raise ConfigurationError(
                f"UserAnswered.verdict must be a Verdict, got {self.verdict!r}."
            )
        _require_digest("UserAnswered", "arguments_sha256", self.arguments_sha256, nullable=False)
        verdict = self.verdict
        for name, wanted in (
            ("arguments_json", verdict is Verdict.EDIT),
            ("reason", verdict is Verdict.REJECT),
            ("answer", verdict is Verdict.ANSWER),
        ):
            if (getattr(self, name) is not None) != wanted:
                raise ConfigurationError(
                    f"UserAnswered for step {self.step} of run {self.run_id!r}: {name} is set "
                    f"exactly for the verdict it belongs to (edit: arguments_json, reject: "
                    f"reason, answer: answer), not for {verdict.value!r}."
                )


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class RunParked:
    """What ``run_or_park``/``resume_or_park`` return when the run waits for a person.

    Not a :class:`RunResult`: the run has not stopped, has no stop reason, and holds no lease.
    Decide the ask (``polyloop.session.approve``/``edit``/``reject``/``answer`` with
    ``step=ask.step``), then call ``resume_or_park`` again.
    """

    run_id: str
    #: Steps recorded so far (the asking step is not among them).
    steps_done: int
    ask: UserAsked
