"""DecisionParser contract: parse never raises, always returns a ParsedReply, is pure and repeatable."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyloop.ports import (
    Action,
    DecisionParser,
    FinalAnswer,
    InvalidDecision,
    ParsedReply,
    ToolCall,
)
from polyloop.types import ModelReply
from polyloop_contract._checks import (
    HYPOTHESIS_PHASES,
    Rule,
    check_parameters_no_io,
    check_parameters_shape,
    check_parameters_stable_no_secrets,
    watching_io,
)

SEAM = "DecisionParser"

PARSER_SETTINGS = settings(
    phases=HYPOTHESIS_PHASES,
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_FENCE_PIECES = ("```", "```python", "```py\n", "~~~", "````", "```\n", "\n```", "`", "``")
_PREFIXES = (
    "",
    "FINAL:",
    "CALL ",
    "RUN:",
    "Action:",
    "Final Answer:",
    "{",
    '{"name": ',
    "<tool_call>",
)


def _replies() -> st.SearchStrategy[ModelReply]:
    anything = st.text(alphabet=st.characters(codec=None), max_size=300)
    control = st.text(alphabet=st.characters(max_codepoint=0x1F), max_size=50)
    surrogates = st.text(
        alphabet=st.characters(categories=["Cs", "Co", "Cn", "Mn", "Zl", "Zp"]), max_size=40
    )
    fences = st.lists(st.one_of(st.sampled_from(_FENCE_PIECES), anything, control), max_size=8).map(
        "".join
    )
    prefixed = st.tuples(st.sampled_from(_PREFIXES), st.one_of(anything, fences, surrogates)).map(
        "".join
    )
    huge = st.tuples(
        st.sampled_from(("x", "```python\n", "\x00", "é\u0301", "{")), st.integers(1_000, 50_000)
    ).map(lambda pair: pair[0] * pair[1])
    content = st.one_of(st.just(""), anything, control, surrogates, fences, prefixed, huge)
    return st.builds(
        ModelReply,
        call_id=st.one_of(st.none(), st.text(min_size=1, max_size=20)),
        content=content,
        thinking=st.one_of(st.just(""), anything, surrogates),
    )


#: Replies that every run checks, whatever hypothesis draws.
FIXED_REPLIES: tuple[ModelReply, ...] = tuple(
    ModelReply(None, content, "")
    for content in (
        "",
        " ",
        "\x00",
        "```",
        "```python\nprint('unterminated')",
        "```python\n```\n```",
        "\ud800 lone surrogate",
        "\ufeff\u202e reversed",
        "FINAL:",
        "CALL",
        "CALL tool {",
        "RUN:",
        "x" * 1_000_000,
        "```python\n" * 20_000,
    )
)


def _short(reply: ModelReply) -> str:
    text = repr(reply.content)
    return f"ModelReply(content={text if len(text) <= 80 else text[:77] + '...'}, length {len(reply.content)})"


def _parse(rule: Rule, parser: DecisionParser, reply: ModelReply) -> object:
    try:
        return parser.parse(reply)
    except Exception as error:
        rule.fail(
            f"parse({_short(reply)}) raised {type(error).__name__}: {error}; a reply that "
            "cannot be read must come back as InvalidDecision, never as an exception"
        )


def _check_parsed(reply: ModelReply, parsed: object) -> None:
    shape = Rule(SEAM, "parse returns a ParsedReply")
    where = f"parse({_short(reply)})"
    shape.check(
        isinstance(parsed, ParsedReply),
        f"{where} returned {type(parsed).__name__}, not ParsedReply",
    )
    assert isinstance(parsed, ParsedReply)
    shape.check(
        isinstance(parsed.history_text, str),
        f"{where}: history_text is {type(parsed.history_text).__name__}, not str",
    )
    decision = parsed.decision
    shape.check(
        isinstance(decision, Action | FinalAnswer | InvalidDecision),
        f"{where}: decision is {type(decision).__name__}; it must be Action, FinalAnswer or "
        "InvalidDecision",
    )
    if isinstance(decision, Action):
        shape.check(isinstance(decision.text, str), f"{where}: Action.text is not a str")
        call = decision.tool_call
        shape.check(
            call is None
            or (
                isinstance(call, ToolCall)
                and isinstance(call.name, str)
                and hasattr(call.arguments, "keys")
            ),
            f"{where}: Action.tool_call is {call!r}; it must be None or a ToolCall with a str "
            "name and a mapping of arguments",
        )
    elif isinstance(decision, FinalAnswer):
        shape.check(isinstance(decision.text, str), f"{where}: FinalAnswer.text is not a str")
    else:
        explains = Rule(SEAM, "an InvalidDecision says what to fix")
        explains.check(
            isinstance(decision.explanation, str) and decision.explanation.strip() != "",
            f"{where} returned InvalidDecision with explanation {decision.explanation!r}; it is "
            "fed back to the model verbatim, so it must tell the model what to fix",
        )


def _over_replies(check: Callable[[ModelReply], None]) -> None:
    for reply in FIXED_REPLIES:
        check(reply)

    @PARSER_SETTINGS
    @given(reply=_replies())
    def generated(reply: ModelReply) -> None:
        check(reply)

    generated()


def test_parse_never_raises(polyloop_decision_parser: DecisionParser) -> None:
    """parse returns for empty, huge, control-character, half-fenced and odd-Unicode replies."""
    rule = Rule(SEAM, "parse never raises")

    def once(reply: ModelReply) -> None:
        _parse(rule, polyloop_decision_parser, reply)

    _over_replies(once)


def test_parse_returns_a_parsed_reply(polyloop_decision_parser: DecisionParser) -> None:
    """Every reply yields a ParsedReply holding an Action, a FinalAnswer or an InvalidDecision."""
    rule = Rule(SEAM, "parse never raises")

    def checked(reply: ModelReply) -> None:
        _check_parsed(reply, _parse(rule, polyloop_decision_parser, reply))

    _over_replies(checked)


def test_parse_is_repeatable(polyloop_decision_parser: DecisionParser) -> None:
    """Parsing one reply twice gives equal results (resume parses a recorded reply again)."""
    raises = Rule(SEAM, "parse never raises")
    rule = Rule(SEAM, "parse is repeatable")

    def twice(reply: ModelReply) -> None:
        first = _parse(raises, polyloop_decision_parser, reply)
        second = _parse(raises, polyloop_decision_parser, reply)
        rule.check(
            first == second,
            f"parse({_short(reply)}) gave {first!r} and then {second!r}; a resumed run parses "
            "the recorded reply again and must reach the same decision",
        )

    _over_replies(twice)


def test_parse_is_synchronous_and_does_no_io(polyloop_decision_parser: DecisionParser) -> None:
    """parse is a plain method and opens no file, socket or process while parsing."""
    rule = Rule(SEAM, "parse is synchronous and does no I/O")
    rule.check(
        not inspect.iscoroutinefunction(polyloop_decision_parser.parse),
        "parse is declared async; it must be a plain method (parsing is pure computation)",
    )
    raises = Rule(SEAM, "parse never raises")
    for reply in FIXED_REPLIES:
        with watching_io() as seen:
            result = _parse(raises, polyloop_decision_parser, reply)
        rule.check(
            not inspect.isawaitable(result),
            "parse returned an awaitable; it must return the ParsedReply itself",
        )
        rule.check(
            not seen,
            f"parse({_short(reply)}) did I/O: {'; '.join(seen[:3])}; resume re-parses "
            "recorded replies, which is only safe for pure computation",
        )


def test_parameters_are_synchronous_and_str_valued(
    polyloop_decision_parser: DecisionParser,
) -> None:
    """parameters() is a plain method returning a mapping of str to str."""
    check_parameters_shape(SEAM, polyloop_decision_parser)


def test_parameters_do_no_io_and_are_cheap(polyloop_decision_parser: DecisionParser) -> None:
    """parameters() opens no file, socket or process, does not sleep, and returns at once."""
    check_parameters_no_io(SEAM, polyloop_decision_parser)


def test_parameters_are_stable_and_hold_no_secrets(
    polyloop_decision_parser: DecisionParser,
) -> None:
    """parameters() answers the same twice and names no credential."""
    check_parameters_stable_no_secrets(SEAM, polyloop_decision_parser)
