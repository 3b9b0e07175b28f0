"""``polyloop replay --parser MODULE:FACTORY RUN...``: the recorded replies of runs read again by
another decision parser, and every step where its decision differs from the recorded one
(design 0067). No model is called, nothing is executed, nothing is written."""

from __future__ import annotations

import sys
from typing import Any

import click

from polyloop.batch import FactoryError, load_factory
from polyloop.errors import CorruptLogError, RunNotFoundError
from polyloop.ports import DecisionParser
from polyloop.session import ParserReplay, replay_parser
from polyloop_cli.rendering.invocation import suggest
from polyloop_cli.rendering.render import Column, Fit, Output
from polyloop_cli.shared.command_kit import (
    StoreChoice,
    json_option,
    run_coroutine,
    run_not_found,
    store_choice,
    store_option,
)
from polyloop_cli.shared.errors import CliError, ExitCode, Refusal, refusals, shown_id
from polyloop_cli.shared.stores import open_store

__all__ = ["load_parser", "replay", "replay_json"]


@click.command()
@click.argument("run_ids", nargs=-1, required=True, metavar="RUN...")
@click.option(
    "--parser",
    "parser_spec",
    metavar="MODULE:FACTORY",
    required=True,
    help="The callable that builds the decision parser to try, factory() (looked up from the "
    "current directory first).",
)
@store_option
@json_option
def replay(run_ids: tuple[str, ...], parser_spec: str, store: str | None, as_json: bool) -> None:
    """Feed the recorded replies of each RUN to the parser FACTORY builds, and list, step by
    step, where its decision differs from the one the run recorded (the decision's kind, the
    action, tool and arguments, the parse error, the history text, the final answer).

    Calls no model and executes nothing. Exit codes: 0 the report was printed (differences or
    not: see `differing_steps`); 5 no such run; 6 a log is corrupt; 22 the factory cannot be
    loaded or does not build a parser.
    """
    output = Output(as_json=as_json)
    choice = store_choice(store)
    parser = load_parser(parser_spec)
    reports = _replay_all(choice, run_ids, parser)
    if as_json:
        output.json({"parser": parser_spec, "runs": [replay_json(r) for r in reports]})
        return
    for report in reports:
        _print(output, report)


def load_parser(spec: str) -> DecisionParser:
    """The parser ``factory()`` of ``spec`` builds, or exit 22 saying why not."""
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # as `python -m`: the current directory's modules first
    try:
        factory: Any = load_factory(spec)
    except FactoryError as error:
        raise CliError(ExitCode.BAD_FACTORY, str(error)) from None
    try:
        parser = factory()
    except Exception as error:
        raise CliError(
            ExitCode.BAD_FACTORY,
            f"parser factory {spec!r} raised {type(error).__name__} when called with no "
            "arguments; it must return a decision parser.",
            detail=str(error),
        ) from None
    if not callable(getattr(parser, "parse", None)):
        raise CliError(
            ExitCode.BAD_FACTORY,
            f"parser factory {spec!r} returned a {type(parser).__name__}, which has no "
            "parse(reply) method; return a decision parser.",
        )
    return parser  # type: ignore[no-any-return]


def _replay_all(
    choice: StoreChoice, run_ids: tuple[str, ...], parser: DecisionParser
) -> list[ParserReplay]:
    async def go() -> list[ParserReplay]:
        async with open_store(choice.url, missing_advice=choice.missing_advice) as opened:
            out = []
            for run_id in run_ids:
                current[0] = run_id
                out.append(await replay_parser(opened, run_id, parser))
            return out

    current = [run_ids[0]]
    with refusals(
        Refusal(RunNotFoundError, lambda error: run_not_found(choice, current[0])),
        Refusal(
            CorruptLogError,
            lambda error: CliError(
                ExitCode.CORRUPT_LOG,
                f"replay refused run {shown_id(current[0])}: its log is corrupt; "
                f"`{suggest('show', current[0], *choice.option)}` shows what it holds.",
                detail=str(error),
            ),
        ),
    ):
        return run_coroutine(go())


def replay_json(report: ParserReplay) -> dict[str, Any]:
    """The ``--json`` document of one run's replay."""
    return {
        "run_id": report.run_id,
        "steps_replayed": report.steps_replayed,
        "steps_without_reply": report.steps_without_reply,
        "differing_steps": list(report.steps_differing),
        "differences": [
            {
                "step": d.step,
                "field": d.field,
                "recorded": d.recorded,
                "replayed": d.replayed,
            }
            for d in report.differences
        ],
    }


def _print(output: Output, report: ParserReplay) -> None:
    differing = report.steps_differing
    output.line(
        f"Run {report.run_id}: {report.steps_replayed} recorded replies replayed, "
        f"{len(differing)} step(s) decided differently"
        + (f" ({report.steps_without_reply} without a reply)" if report.steps_without_reply else "")
        + "."
    )
    if not differing:
        return
    output.table(
        (
            Column("STEP"),
            Column("FIELD"),
            Column("RECORDED", Fit.FOLD),
            Column("REPLAYED", Fit.FOLD),
        ),
        [(d.step, d.field, _shown(d.recorded), _shown(d.replayed)) for d in report.differences],
    )
    output.line()


def _shown(value: str | None) -> str:
    return "-" if value is None else value
