"""A person's decision on a parked run's ask: checked against the ask, then recorded once.

:func:`approve`, :func:`edit`, :func:`reject` and :func:`answer` name the ask they answer by
its step (``step=``, design 0059), take the run's lease, read its log, find the pending ask,
refuse a decision naming another ask or bound to anything else (:class:`StaleAskError` naming
the key) and write one ``UserAnswered`` (design 0037). An in-process host answers through
``ask_now`` with a :class:`UserDecision`, checked by the same :func:`decided` rule.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from polyloop.asking import (
    AskKind,
    UserAnswered,
    UserAsked,
    Verdict,
)
from polyloop.errors import (
    AskNotPendingError,
    ConfigurationError,
    StaleAskError,
    ToolCallRejected,
    UnsupportedStoreError,
)
from polyloop.ports import RunLog, RunStore, ToolCall, UserAsking, supports_user_asking
from polyloop.recovery import answer_to, pending_ask, validate_log
from polyloop.session._gates import now_iso, tool_digests
from polyloop.session._lease import check_lease_wait, release_run_lease, take_run_lease
from polyloop.tools import ToolRegistry, canonical_arguments

__all__ = [
    "AskHandler",
    "UserDecision",
    "answer",
    "approve",
    "decided",
    "edit",
    "read_pending_ask",
    "reject",
    "require_user_asking",
]


@dataclass(frozen=True, slots=True)
class UserDecision:
    """A decision handed back by an in-process ``ask_now`` handler (never stored as such: it
    becomes a ``UserAnswered``). Build it with :meth:`approve`, :meth:`edit`, :meth:`reject`
    or :meth:`answer`."""

    verdict: Verdict
    arguments: Mapping[str, object] | None = None
    reason: str | None = None
    text: str | None = None
    decided_by: str = ""
    #: The step of the ask this decides. ``None``: the ask the handler was called with (the
    #: call binds it). A handler relaying decisions made elsewhere (a queue, a web form) sets
    #: the step the person saw, so that a decision made for an earlier ask is refused
    #: (:class:`StaleAskError`) rather than taken by this one.
    step: int | None = None

    @classmethod
    def approve(cls, *, decided_by: str = "", step: int | None = None) -> UserDecision:
        return cls(Verdict.APPROVE, decided_by=decided_by, step=step)

    @classmethod
    def edit(
        cls, arguments: Mapping[str, object], *, decided_by: str = "", step: int | None = None
    ) -> UserDecision:
        return cls(
            Verdict.EDIT,
            arguments=MappingProxyType(dict(arguments)),
            decided_by=decided_by,
            step=step,
        )

    @classmethod
    def reject(cls, reason: str, *, decided_by: str = "", step: int | None = None) -> UserDecision:
        return cls(Verdict.REJECT, reason=reason, decided_by=decided_by, step=step)

    @classmethod
    def answer(cls, text: str, *, decided_by: str = "", step: int | None = None) -> UserDecision:
        return cls(Verdict.ANSWER, text=text, decided_by=decided_by, step=step)


#: ``ask_now`` of ``run_or_park``/``resume_or_park``: asked with the pending ask as soon as it
#: is recorded; a :class:`UserDecision` answers in-process, ``None`` parks the run.
AskHandler = Callable[[UserAsked], Awaitable[UserDecision | None]]


def require_user_asking(store: RunStore, what: str) -> UserAsking:
    """``store`` as a :class:`UserAsking` store, or :class:`UnsupportedStoreError`."""
    if not supports_user_asking(store):
        raise UnsupportedStoreError(
            f"{what}: the store {type(store).__name__} lacks the UserAsking capability "
            "(write_user_asked, write_user_answered), so it cannot hold the records of a run "
            "that waits for a person. Use a store that has it (memory, jsonl, sqlite, "
            "postgres) or drop requires_approval/asks_user and the approval policy. Nothing "
            "was written."
        )
    assert isinstance(store, UserAsking)
    return store


def ask_words(ask: UserAsked) -> str:
    """``approval of refund``, ``question (ask_user)``: what an ask asks, in words."""
    if ask.kind is AskKind.QUESTION:
        return "question" if ask.tool_name is None else f"question ({ask.tool_name})"
    what = ask.tool_name if ask.tool_name is not None else "a tool-less action"
    return f"approval of {what}"


def _named_words(log: RunLog | None, step: int) -> str:
    """The ask of ``step`` a decision names, as the log holds it (decided or not)."""
    if log is None:
        return f"the ask of step {step}"
    named = next((a for a in log.asks if a.step == step), None)
    if named is None:
        return f"the ask of step {step}, which this run never made"
    decision = answer_to(log, named)
    if decision is None:
        return f"the ask of step {step} ({ask_words(named)})"
    who = f" by {decision.decided_by!r}" if decision.decided_by else ""
    return (
        f"the ask of step {step} ({ask_words(named)}), already decided "
        f"({decision.verdict.value}{who} at {decision.decided_at})"
    )


def stale_step(ask: UserAsked, step: int, log: RunLog | None = None) -> StaleAskError:
    """The refusal of a decision naming the ask of ``step`` while the run waits on ``ask``:
    both asks named, and what to do (design 0059)."""
    return StaleAskError(
        f"Run {ask.run_id!r}: the decision names {_named_words(log, step)}, but the run waits "
        f"on the ask of step {ask.step} ({ask_words(ask)}, asked at {ask.asked_at}). A decision "
        f"answers only the ask it names; nothing was written. Read the pending ask "
        f"(`polyloop pending`) and, if the person decided that one, decide it naming step "
        f"{ask.step}.",
        key="step",
    )


def require_ask_step(step: object, what: str) -> int:
    """``step`` as the step of an ask (an int >= 0), or :class:`ConfigurationError`."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ConfigurationError(
            f"{what}: step must name the ask the decision answers, the step of the pending "
            f"ask (an int >= 0, UserAsked.step), got {step!r}. Nothing was written."
        )
    return step


def _stale(ask: UserAsked, key: str, given: object, recorded: object) -> StaleAskError:
    return StaleAskError(
        f"Run {ask.run_id!r}, step {ask.step}: the decision is bound to {key} {given!r}, but "
        f"the pending ask has {recorded!r}: the action, its tool or the policy changed since "
        "it was asked. Nothing was written; read the pending ask again (`polyloop pending`) "
        "and decide on what it shows now.",
        key=key,
    )


def _check_binding(
    ask: UserAsked,
    arguments_sha256: str,
    schema_sha256: str | None,
    policy_name: str | None,
    tools: ToolRegistry | None,
) -> None:
    if arguments_sha256 != ask.arguments_sha256:
        raise _stale(ask, "arguments_sha256", arguments_sha256, ask.arguments_sha256)
    if schema_sha256 is not None and schema_sha256 != ask.schema_sha256:
        raise _stale(ask, "schema_sha256", schema_sha256, ask.schema_sha256)
    if policy_name is not None and policy_name != ask.policy_name:
        raise _stale(ask, "policy_name", policy_name, ask.policy_name)
    if tools is not None and ask.tool_name is not None:
        spec = tools.spec_for(ask.tool_name)
        if spec is None:
            raise _stale(ask, "tool_name", None, ask.tool_name)
        schema, description = tool_digests(spec)
        if schema != ask.schema_sha256:
            raise _stale(ask, "schema_sha256", schema, ask.schema_sha256)
        if description != ask.description_sha256:
            raise _stale(ask, "description_sha256", description, ask.description_sha256)


def decided(ask: UserAsked, decision: UserDecision, tools: ToolRegistry | None) -> UserAnswered:
    """The ``UserAnswered`` of ``decision`` on ``ask``; refuses one that cannot decide it (a
    verdict of the wrong kind, an edit the tool's schema rejects)."""
    verdict = decision.verdict
    where = f"Run {ask.run_id!r}, step {ask.step}"
    if decision.step is not None:
        named = require_ask_step(decision.step, f"{where}: a UserDecision")
        if named != ask.step:
            raise stale_step(ask, named)
    if not isinstance(verdict, Verdict):
        raise ConfigurationError(
            f"{where}: a decision's verdict must be a Verdict, got {verdict!r}."
        )
    if ask.kind is AskKind.QUESTION and verdict is not Verdict.ANSWER:
        raise ConfigurationError(
            f"{where} asks the user a question; answer it (answer(...)), it cannot be "
            f"{verdict.value}d."
        )
    if ask.kind is AskKind.APPROVAL and verdict is Verdict.ANSWER:
        raise ConfigurationError(
            f"{where} waits for an approval; approve, edit or reject it, an answer does not "
            "decide it."
        )
    if not isinstance(decision.decided_by, str):
        raise ConfigurationError(f"{where}: decided_by must be a string.")
    arguments_json = reason = text = None
    if verdict is Verdict.EDIT:
        if ask.tool_name is None:
            raise ConfigurationError(
                f"{where} asks about a tool-less action, which has no arguments to edit; "
                "approve or reject it."
            )
        if tools is None or decision.arguments is None:
            raise ConfigurationError(f"{where}: an edit needs the new arguments and the tools.")
        try:
            tools.validate(ToolCall(ask.tool_name, decision.arguments))
        except ToolCallRejected as rejected:
            raise ConfigurationError(
                f"{where}: the edited arguments are refused like any call would be ({rejected}); "
                "nothing was written. Give arguments the tool's schema accepts."
            ) from None
        arguments_json = canonical_arguments(decision.arguments)
    elif verdict is Verdict.REJECT:
        reason = decision.reason
        if not isinstance(reason, str) or not reason.strip():
            raise ConfigurationError(
                f"{where}: a rejection needs a reason; the model reads it to choose what to do."
            )
    elif verdict is Verdict.ANSWER:
        text = decision.text
        if not isinstance(text, str):
            raise ConfigurationError(f"{where}: an answer must be a string.")
    return UserAnswered(
        run_id=ask.run_id,
        step=ask.step,
        verdict=verdict,
        arguments_sha256=ask.arguments_sha256,
        arguments_json=arguments_json,
        reason=reason,
        answer=text,
        decided_by=decision.decided_by,
        decided_at=now_iso(),
    )


def _not_pending(run_id: str, log: RunLog, step: int) -> AskNotPendingError:
    named = next((a for a in log.asks if a.step == step), None)
    decision = None if named is None else answer_to(log, named)
    if log.started is None:
        why = "the store holds no log of it"
    elif log.finished is not None:
        why = f"it is finished ({log.finished.result.stop_reason.value})"
    elif decision is not None:
        who = f" by {decision.decided_by!r}" if decision.decided_by else ""
        why = (
            f"the ask of step {step} is already decided ({decision.verdict.value}{who} at "
            f"{decision.decided_at}); a decision is given once"
        )
    else:
        why = f"it waits on no ask (and made none at step {step})"
    return AskNotPendingError(
        f"Run {run_id!r} has no pending ask: {why}. Nothing was written; see where it is with "
        "`polyloop show` (run_status)."
    )


async def read_pending_ask(store: RunStore, run_id: str) -> UserAsked | None:
    """The ask run ``run_id`` waits on, or ``None`` (read without the lease). Its ``step`` names
    it: every decision passes it as ``step=`` (design 0059)."""
    return pending_ask(await store.read_log(run_id))


@dataclass(frozen=True, slots=True)
class _Binding:
    """What a decision on an action is bound to: the digests the person saw, checked against
    the pending ask (and ``tools``, the registry the run is resumed with, when given)."""

    arguments_sha256: str
    schema_sha256: str | None
    policy_name: str | None
    tools: ToolRegistry | None


async def _decide(
    store: RunStore,
    run_id: str,
    decision: UserDecision,
    lease_wait_seconds: float,
    binding: _Binding | None = None,
) -> UserAnswered:
    asking = require_user_asking(store, f"Deciding run {run_id!r}")
    step = require_ask_step(decision.step, f"Deciding run {run_id!r}")
    check_lease_wait(lease_wait_seconds)
    lease = await take_run_lease(store, run_id, lease_wait_seconds)
    try:
        log = await store.read_log(run_id)
        validate_log(log, run_id)
        ask = pending_ask(log)
        if ask is None:
            raise _not_pending(run_id, log, step)
        # The ask first: a decision made for another ask must not be taken by this one,
        # however alike their arguments (design 0059).
        if step != ask.step:
            raise stale_step(ask, step, log)
        tools = None if binding is None else binding.tools
        if binding is not None:
            _check_binding(
                ask, binding.arguments_sha256, binding.schema_sha256, binding.policy_name, tools
            )
        record = decided(ask, decision, tools)
        await asking.write_user_answered(record)
        return record
    finally:
        await release_run_lease(lease)


async def approve(
    store: RunStore,
    run_id: str,
    *,
    step: int,
    arguments_sha256: str,
    decided_by: str = "",
    schema_sha256: str | None = None,
    policy_name: str | None = None,
    tools: ToolRegistry | None = None,
    lease_wait_seconds: float = 0.0,
) -> UserAnswered:
    """Approve the pending ask of ``run_id``: the ask of ``step`` (``UserAsked.step``, the ask
    the person decided), bound to the ``arguments_sha256`` the person saw.

    ``schema_sha256``/``policy_name`` (when given) and ``tools`` (the registry the run is
    resumed with, when given) are checked against the ask too. Raises
    :class:`AskNotPendingError`, :class:`StaleAskError` naming the key that differs (``step``
    when the run waits on another ask than the one of ``step``), or
    :class:`RunLeaseHeldError` while a driver holds the run. Returns the recorded decision.
    """
    binding = _Binding(arguments_sha256, schema_sha256, policy_name, tools)
    decision = UserDecision.approve(decided_by=decided_by, step=step)
    return await _decide(store, run_id, decision, lease_wait_seconds, binding)


async def edit(
    store: RunStore,
    run_id: str,
    arguments: Mapping[str, object],
    *,
    step: int,
    tools: ToolRegistry,
    arguments_sha256: str,
    decided_by: str = "",
    policy_name: str | None = None,
    lease_wait_seconds: float = 0.0,
) -> UserAnswered:
    """Approve the pending call (the ask of ``step``) with other ``arguments``, validated
    against the tool's schema in ``tools`` (whose schema must still be the one asked about)."""
    binding = _Binding(arguments_sha256, None, policy_name, tools)
    decision = UserDecision.edit(arguments, decided_by=decided_by, step=step)
    return await _decide(store, run_id, decision, lease_wait_seconds, binding)


async def reject(
    store: RunStore,
    run_id: str,
    *,
    step: int,
    reason: str,
    arguments_sha256: str,
    decided_by: str = "",
    schema_sha256: str | None = None,
    policy_name: str | None = None,
    tools: ToolRegistry | None = None,
    lease_wait_seconds: float = 0.0,
) -> UserAnswered:
    """Refuse the pending action (the ask of ``step``); the step ends ``NOT_EXECUTED`` and
    the model reads ``reason`` through the request's ``rejected_template``."""
    binding = _Binding(arguments_sha256, schema_sha256, policy_name, tools)
    decision = UserDecision.reject(reason, decided_by=decided_by, step=step)
    return await _decide(store, run_id, decision, lease_wait_seconds, binding)


async def answer(
    store: RunStore,
    run_id: str,
    text: str,
    *,
    step: int,
    decided_by: str = "",
    lease_wait_seconds: float = 0.0,
) -> UserAnswered:
    """Answer the pending question of ``run_id``, the ask of ``step``; ``text`` becomes that
    step's observation. An answer naming another ask is refused (:class:`StaleAskError`)."""
    decision = UserDecision.answer(text, decided_by=decided_by, step=step)
    return await _decide(store, run_id, decision, lease_wait_seconds)
