"""Every required option and argument of every `polyloop` command, left out, is a usage error:
exit 2 and one line naming it, before the command does anything (issue 36).

The cases come from the command tree itself, so a command or option added later is covered
without touching this file. The locked click takes an explicit ``default=None`` as a value, so
``required=True`` alone let `resume` and `edit` run without --agent into an internal error.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from polyloop_cli.main import cli, main


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name)


def _command(path: tuple[str, ...]) -> click.Command:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


def _value(parameter: click.Parameter) -> str:
    """A value the parameter's type accepts (nothing is run: the check comes first)."""
    kind = parameter.type
    if isinstance(kind, click.Choice):
        return str(kind.choices[0])
    if isinstance(kind, click.types.IntParamType | click.types.FloatParamType):
        return "1"
    return "x.out" if isinstance(kind, click.Path) else "x"


def _cases() -> Iterator[tuple[tuple[str, ...], str]]:
    for path in _commands(cli):
        for parameter in _command(path).params:
            if parameter.required:
                assert parameter.name is not None
                yield path, parameter.name


CASES = list(_cases())


def test_the_tree_has_the_required_options_known_to_have_been_unchecked() -> None:
    """The cases include `resume --agent`, `edit --agent` and `edit --arguments`."""
    assert {(("resume",), "agent"), (("edit",), "agent"), (("edit",), "arguments_json")} <= set(
        CASES
    )


@pytest.mark.parametrize(("path", "missing"), CASES, ids=[f"{' '.join(p)}:{m}" for p, m in CASES])
def test_a_missing_required_parameter_is_a_usage_error_naming_it(
    path: tuple[str, ...],
    missing: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("POLYLOOP_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("POLYLOOP_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    command = _command(path)
    target = next(parameter for parameter in command.params if parameter.name == missing)
    argv = list(path)
    arguments_left = True
    for parameter in command.params:
        if not parameter.required:
            continue
        if isinstance(parameter, click.Argument):
            # An argument after the missing one would take its place: leave those out too.
            arguments_left = arguments_left and parameter is not target
            if arguments_left:
                argv.append(_value(parameter))
        elif parameter is not target:
            argv += [parameter.opts[0], _value(parameter)]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert 2 == exited.value.code, err
    (line,) = err.strip().splitlines()
    assert line.startswith("polyloop: error: Missing "), line
    named = target.opts[0] if isinstance(target, click.Option) else target.human_readable_name
    assert named in line, line
    assert not (tmp_path / "home").exists()  # nothing was done: not even the store opened
