"""What ``approve``, ``reject``, ``edit`` and ``answer`` share: find the ask, bind the decision
to the ask it names (``--step``, design 0059) and to the digest the person saw, record it
through ``polyloop.session`` and say what happened.

The decision itself (the lease, at most once, the digests) is the library's; this module maps
its refusals onto exit codes (design 0053): nothing waits → 10, another ask than the one shown
→ 11, a driver or decider holds the run → 12, a decision that does not fit the ask → 13.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import click

from polyloop.asking import UserAnswered, UserAsked
from polyloop.errors import (
    AskNotPendingError,
    ConfigurationError,
    RunLeaseHeldError,
    StaleAskError,
    UnsupportedStoreError,
)
from polyloop.ports import RunLog, RunStore
from polyloop.recovery import answer_to, pending_ask
from polyloop_cli.commands.resume import agent_option_words, resume_and_report
from polyloop_cli.demo.approval import agent_words
from polyloop_cli.rendering.asks import (
    AGENT_PLACEHOLDER,
    DIGEST_SHOWN,
    argument_lines,
    ask_headline,
    ask_json,
    decision_json,
)
from polyloop_cli.rendering.invocation import suggest
from polyloop_cli.rendering.render import Output
from polyloop_cli.shared import command_kit
from polyloop_cli.shared.agents import agent_options, opened_agent, resume_options
from polyloop_cli.shared.command_kit import StoreChoice, run_coroutine, run_not_found
from polyloop_cli.shared.errors import CliError, ExitCode, Refusal, refusals, shown_id
from polyloop_cli.shared.stores import open_store, read_log

__all__ = [
    "SHA256_HELP",
    "STEP_HELP",
    "Decide",
    "Deciding",
    "agent_option_words",
    "by_option",
    "decide",
    "decide_then_resume",
    "deciding_options",
    "report_decision",
    "sha256_option",
]

#: Records the decision on the run's pending ask (``ask`` is ``None`` when none is pending:
#: the library then says why), bound to ``digest``.
Decide = Callable[[RunStore, str, UserAsked | None, str], Awaitable[object]]

SHA256_HELP = (
    "The first hex digits (at least 8) of the arguments' SHA-256 that `polyloop pending` "
    "showed: the decision is refused (exit 11) when the pending ask has other arguments. "
    "Without it the pending ask is decided as it is now, and printed."
)


STEP_HELP = (
    "The step of the ask you decide, as `polyloop pending` shows it (required): the decision "
    "is refused (exit 11) when the run waits on another ask, however alike."
)


def by_option(function: click.decorators.FC) -> click.decorators.FC:
    return click.option(
        "--by",
        "decided_by",
        metavar="NAME",
        default="",
        help="Who decides, recorded with the decision (e.g. an e-mail address).",
    )(function)


def sha256_option(function: click.decorators.FC) -> click.decorators.FC:
    return click.option("--sha256", "prefix", metavar="HEX", default=None, help=SHA256_HELP)(
        function
    )


@dataclass(frozen=True, slots=True)
class Deciding:
    """What every deciding command takes besides the ask it decides: who decides (``--by``),
    the agent to resume with (``--agent``/``--episode``), the store and the output form."""

    decided_by: str
    agent: str | None
    episode_json: str | None
    choice: StoreChoice
    as_json: bool
    #: ``--step``: the step of the ask decided (design 0059).
    step: int

    def then_resume(self, run_id: str, prefix: str | None, record: Decide) -> None:
        """:func:`decide_then_resume` with these options."""
        decide_then_resume(
            self.choice,
            run_id,
            prefix,
            record,
            self.as_json,
            self.agent,
            self.episode_json,
            step=self.step,
        )


def deciding_options(*, agent_required: bool = False) -> Callable[[Callable[..., None]], Any]:
    """``--step`` (required), ``--by``, ``--agent``/``--episode`` (required with
    ``agent_required``), ``--store`` and ``--json``, handed to the command as one keyword
    argument ``deciding`` (a :class:`Deciding`)."""

    def decorate(command: Callable[..., None]) -> Any:
        @functools.wraps(command)
        def gathered(
            *arguments: Any,
            decided_by: str,
            agent: str | None,
            episode_json: str | None,
            store: str | None,
            as_json: bool,
            step: int,
            **options: Any,
        ) -> None:
            choice = command_kit.store_choice(store)
            deciding = Deciding(decided_by, agent, episode_json, choice, as_json, step)
            command(*arguments, deciding=deciding, **options)

        agent_choice = agent_options if agent_required else resume_options
        options = command_kit.store_option(command_kit.json_option(gathered))
        stepped = click.option(
            "--step", type=click.IntRange(min=0), required=True, metavar="N", help=STEP_HELP
        )(options)
        return by_option(agent_choice(stepped))

    return decorate


#: Any well-formed digest: when nothing is pending the library refuses before comparing it.
_NO_ASK_DIGEST = "0" * 64


def _bound_digest(run_id: str, ask: UserAsked | None, prefix: str | None) -> str:
    """The full digest the decision is bound to: the pending ask's when ``prefix`` (what the
    person saw) is a prefix of it."""
    if ask is None:
        return _NO_ASK_DIGEST
    if prefix is None:
        return ask.arguments_sha256
    wanted = prefix.strip().lower()
    if len(wanted) < 8 or wanted.strip("0123456789abcdef"):
        raise CliError(
            ExitCode.USAGE,
            f"--sha256 {prefix!r} is not the start of a SHA-256 digest: give at least 8 of the "
            f"hex digits `{suggest('pending')}` shows.",
        )
    if not ask.arguments_sha256.startswith(wanted):
        raise CliError(
            ExitCode.STALE_ASK,
            f"run {shown_id(run_id)} no longer waits on the ask you saw: its pending ask (step "
            f"{ask.step}) has arguments_sha256 {ask.arguments_sha256[:DIGEST_SHOWN]}, not "
            f"{wanted}; nothing was written. Read it again with `{suggest('pending')}`.",
        )
    return ask.arguments_sha256


async def decide(
    choice: StoreChoice, run_id: str, prefix: str | None, record: Decide, *, step: int
) -> tuple[UserAsked, UserAnswered, Mapping[str, str]]:
    """Find run ``run_id``'s pending ask, check it is the one of ``step``, bind to ``prefix``
    and record the decision; returns the ask, the decision as recorded and the run's
    parameter snapshot."""
    advice = f"`{suggest('show', run_id, *choice.option)}` shows what can be read."
    async with open_store(choice.url, missing_advice=choice.missing_advice) as store:
        log = await read_log(store, choice.url, run_id, advice=advice, name_store=False)
        if log == RunLog():
            raise run_not_found(choice, run_id)
        ask = pending_ask(log)
        if ask is not None and ask.step != step:
            raise CliError(
                ExitCode.STALE_ASK,
                f"run {shown_id(run_id)} waits on the {ask_headline(ask)}, not on the ask of "
                f"step {step} you named; nothing was written. Read it with "
                f"`{suggest('pending', *choice.option)}`.",
            )
        digest = _bound_digest(run_id, ask, prefix)
        with refusals(
            Refusal(
                AskNotPendingError,
                lambda error: CliError(
                    ExitCode.ASK_NOT_PENDING,
                    f"run {shown_id(run_id)} waits on no ask, so there is nothing to decide; "
                    f"`{suggest('pending', *choice.option)}` lists what waits.",
                    detail=str(error),
                ),
            ),
            Refusal(
                StaleAskError,
                lambda error: CliError(
                    ExitCode.STALE_ASK,
                    f"run {shown_id(run_id)}: the decision is bound to another ask than the "
                    f"pending one ({error.key} differs); nothing was written. Read it again with "
                    f"`{suggest('pending', *choice.option)}`.",
                    detail=str(error),
                ),
            ),
            Refusal(
                RunLeaseHeldError,
                lambda error: CliError(
                    ExitCode.RUN_BUSY,
                    f"run {shown_id(run_id)} is being driven or decided right now; nothing was "
                    "written. Try again when it is done.",
                    detail=str(error),
                ),
            ),
            Refusal(
                UnsupportedStoreError,
                lambda error: CliError(
                    ExitCode.USAGE,
                    f"the {choice.url.kind} store cannot record a person's decision; runs that "
                    "wait for a person need a store with the UserAsking capability.",
                    detail=str(error),
                ),
            ),
            Refusal(
                ConfigurationError,
                lambda error: CliError(
                    ExitCode.DECISION_REFUSED,
                    f"the decision does not fit the ask of run {shown_id(run_id)}; nothing was "
                    "written.",
                    detail=str(error),
                ),
            ),
        ):
            await record(store, run_id, ask, digest)
        assert ask is not None  # the library refused a decision without a pending ask
        # What was recorded, read back: the decision as the store holds it.
        answered = answer_to(await store.read_log(run_id), ask)
    assert answered is not None
    assert log.started is not None  # a run with a pending ask has started
    return ask, answered, log.started.parameter_snapshot


def decide_then_resume(
    choice: StoreChoice,
    run_id: str,
    prefix: str | None,
    record: Decide,
    as_json: bool,
    agent: str | None,
    episode_json: str | None,
    *,
    step: int,
) -> None:
    """Record the decision on the ask of ``step`` and say so; with ``--agent`` (``agent``)
    resume the run at once, exiting as ``polyloop resume`` does. The agent is built first: a
    factory or ``--episode`` that cannot build it is refused before anything is written."""
    if agent is not None:
        run_coroutine(_agent_builds(choice, run_id, agent, episode_json))
    ask, answered, snapshot = run_coroutine(decide(choice, run_id, prefix, record, step=step))
    report_decision(
        Output(as_json=as_json),
        choice,
        ask,
        answered,
        resumed=agent is not None,
        agent=agent_words(snapshot, choice.url),
    )
    if agent is not None:
        resume_and_report(Output(as_json=as_json), choice, run_id, agent, episode_json)


async def _agent_builds(
    choice: StoreChoice, run_id: str, agent: str, episode_json: str | None
) -> None:
    """Build run ``run_id``'s agent once and let it go (exit 22 when it cannot be built)."""
    async with (
        open_store(choice.url, missing_advice=choice.missing_advice) as store,
        opened_agent(agent, episode_json, run_id, store),
    ):
        pass


def report_decision(
    output: Output,
    choice: StoreChoice,
    ask: UserAsked,
    answered: UserAnswered,
    *,
    resumed: bool = False,
    agent: tuple[str, ...] | None = None,
) -> None:
    """What was decided, on what, and how the run goes on (``resumed``: it is resumed right
    after, which reports for itself; with ``--json`` only the resume's document is printed).
    ``agent``: the ``--agent``/``--episode`` words of the resume command, when known."""
    if resumed and output.as_json:
        return
    resume = suggest("resume", ask.run_id, *(agent or AGENT_PLACEHOLDER), *choice.option)
    if output.as_json:
        document: dict[str, Any] = {
            "store": str(choice.url),
            "ask": ask_json(ask),
            "decision": decision_json(answered),
            "run_status": "running",
        }
        output.json(document)
        return
    verdicts = {
        "approve": "approved",
        "edit": "approved with edited arguments",
        "reject": "rejected",
    }
    verdict = verdicts.get(answered.verdict.value, "answered")
    output.line(f"Run {ask.run_id}: {ask_headline(ask)} {verdict}.", style="bold")
    # What goes ahead: the edited arguments, for an edit.
    shown = replace(ask, arguments_json=answered.arguments_json or ask.arguments_json)
    for line in argument_lines(shown, margin="  "):
        output.line(line)
    if resumed:
        output.line("The decision is recorded; resuming the run now.")
        return
    output.line(
        "The decision is recorded; the run continues when it is resumed (a batch rerun "
        "continues its episodes), e.g. with:"
        if agent is not None
        else "The decision is recorded; the run continues when it is resumed (a batch rerun "
        "continues its episodes), e.g. with the factory that builds its agent:"
    )
    output.command(resume)
