"""The request options every chat-completions client checks the same way (the gateway's and the
SDK-backed clients': design 0064), with messages naming the client that was given them."""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from polyloop.errors import ConfigurationError

__all__ = [
    "RequestOptions",
    "check_int",
    "check_number",
    "check_request_options",
    "option_parameters",
]

#: The request fields the clients own: extra_body may not set them.
RESERVED_BODY_KEYS: Final = frozenset(
    {"model", "messages", "stream", "stream_options", "metadata", "tools", "parallel_tool_calls"}
)


def check_number(owner: str, name: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigurationError(f"{owner} {name} must be a finite number or None, got {value!r}.")


def check_int(owner: str, name: str, value: int | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{owner} {name} must be an int or None, got {value!r}.")


def _check_tool_options(
    owner: str, tool_choice: object, parallel_tool_calls: object, body_extra: Mapping[str, object]
) -> None:
    if tool_choice is not None:
        if not isinstance(tool_choice, str | Mapping) or tool_choice == "":
            raise ConfigurationError(
                f"{owner} tool_choice must be a non-empty string ('auto', 'required', "
                f"'none') or a mapping (e.g. {{'type': 'function', 'function': {{'name': "
                f"'read_file'}}}}), or None, got {tool_choice!r}."
            )
        if "tool_choice" in body_extra:
            raise ConfigurationError(
                f"{owner} got tool_choice both as an argument and in extra_body; "
                "pass it once (the tool_choice argument)."
            )
        try:
            json.dumps(tool_choice)
        except (TypeError, ValueError) as error:
            raise ConfigurationError(
                f"{owner} tool_choice must be JSON-serializable: {error}."
            ) from None
    if parallel_tool_calls is not None and not isinstance(parallel_tool_calls, bool):
        raise ConfigurationError(
            f"{owner} parallel_tool_calls must be False (the default: ask for at most "
            "one call per reply), True, or None (send nothing, for servers that reject the "
            f"field), got {parallel_tool_calls!r}."
        )


@dataclass(frozen=True, slots=True)
class RequestOptions:
    """The checked options, as the clients keep them."""

    #: Every sampling parameter by its wire name, ``None`` when not sent.
    sampling: Mapping[str, object]
    extra_body: Mapping[str, object]
    deadline: float | None
    fail_on: frozenset[str]
    tool_choice: str | dict[str, object] | None
    parallel_tool_calls: bool | None


def check_request_options(
    owner: str,
    *,
    temperature: float | None,
    top_p: float | None,
    max_tokens: int | None,
    seed: int | None,
    stop: Sequence[str] | None,
    presence_penalty: float | None,
    frequency_penalty: float | None,
    extra_body: Mapping[str, object] | None,
    deadline: float | None,
    fail_on_finish_reasons: Collection[str],
    tool_choice: str | Mapping[str, object] | None,
    parallel_tool_calls: bool | None,
) -> RequestOptions:
    """The options, checked; ``owner`` (the client's class name) starts every message.
    Raises :class:`ConfigurationError`."""
    check_number(owner, "deadline", deadline)
    if deadline is not None and deadline <= 0:
        raise ConfigurationError(f"{owner} deadline must be > 0 seconds, got {deadline!r}.")
    for name, value in (
        ("temperature", temperature),
        ("top_p", top_p),
        ("presence_penalty", presence_penalty),
        ("frequency_penalty", frequency_penalty),
    ):
        check_number(owner, name, value)
    check_int(owner, "max_tokens", max_tokens)
    check_int(owner, "seed", seed)
    if stop is not None and (
        isinstance(stop, str) or not all(isinstance(item, str) for item in stop)
    ):
        raise ConfigurationError(
            f"{owner} stop must be a sequence of strings (not one string) or None."
        )
    if isinstance(fail_on_finish_reasons, str) or not all(
        isinstance(reason, str) and reason for reason in fail_on_finish_reasons
    ):
        raise ConfigurationError(
            f"{owner} fail_on_finish_reasons must be a collection of non-empty strings "
            "(not one string), e.g. ['length', 'content_filter']."
        )
    body_extra = dict(extra_body or {})
    clash = sorted(RESERVED_BODY_KEYS.intersection(body_extra))
    if clash:
        raise ConfigurationError(
            f"{owner} extra_body may not set {clash}: the client owns those fields (use "
            "native_tools=True to send the request's tools, and parallel_tool_calls= to "
            "choose what is asked of the server)."
        )
    _check_tool_options(owner, tool_choice, parallel_tool_calls, body_extra)
    try:
        json.dumps(body_extra)
    except (TypeError, ValueError) as error:
        raise ConfigurationError(
            f"{owner} extra_body must be JSON-serializable: {error}."
        ) from None
    sampling: dict[str, object] = {
        "temperature": temperature,
        "top_p": top_p,
        "max_tokens": max_tokens,
        "seed": seed,
        "stop": list(stop) if stop is not None else None,
        "presence_penalty": presence_penalty,
        "frequency_penalty": frequency_penalty,
    }
    return RequestOptions(
        sampling=MappingProxyType(sampling),
        extra_body=MappingProxyType(body_extra),
        deadline=None if deadline is None else float(deadline),
        fail_on=frozenset(fail_on_finish_reasons),
        tool_choice=(
            tool_choice
            if tool_choice is None or isinstance(tool_choice, str)
            else dict(tool_choice)
        ),
        parallel_tool_calls=parallel_tool_calls,
    )


def _ascii_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def option_parameters(
    options: RequestOptions,
    *,
    binding_metadata: bool,
    native_tools: bool,
    extra_header_names: Sequence[str] | None = None,
) -> dict[str, str]:
    """The options as ``parameters()`` reports them: sampling (``unset`` when not sent),
    ``extra_body.*``, the binding forwarding, and the tool options only when not their defaults
    (so snapshots recorded before they existed stay valid). ``extra_header_names`` (the
    gateway's) goes before the binding forwarding, where the gateway has always put it."""
    params: dict[str, str] = {}
    for name, value in options.sampling.items():
        params[name] = "unset" if value is None else _ascii_json(value)
    for name, value in sorted(options.extra_body.items()):
        params[f"extra_body.{name}"] = _ascii_json(value)
    if extra_header_names is not None:
        params["extra_header_names"] = ",".join(extra_header_names)
    params["binding_forwarding"] = "header+metadata" if binding_metadata else "header"
    if native_tools:
        params["native_tools"] = "true"
    if options.fail_on:
        params["fail_on_finish_reasons"] = _ascii_json(sorted(options.fail_on))
    if options.tool_choice is not None:
        params["tool_choice"] = _ascii_json(options.tool_choice)
    if options.parallel_tool_calls is not False:
        params["parallel_tool_calls"] = "unset" if options.parallel_tool_calls is None else "true"
    return params
