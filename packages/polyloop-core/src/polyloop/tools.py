"""Tool specs, the immutable tool registry, and the executor derived from it.

Registration, the schema the model sees, validation of a call and dispatch are all driven by
one :class:`ToolRegistry` instance, so the four can never disagree. A registry is a value:
``restrict_to`` returns a new one, and several narrow registries can live side by side.
"""

from __future__ import annotations

import copy
import inspect
import json
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from polyloop.errors import ConfigurationError, EnvironmentFailure, ToolCallRejected
from polyloop.ports import Action, ActionExecutor, ToolCall
from polyloop.types import ActionOutcome, ActionStatus, ReplayPolicy

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

__all__ = [
    "RegistryExecutor",
    "Tool",
    "ToolHandler",
    "ToolRegistry",
    "ToolSpec",
    "canonical_arguments",
]

#: A tool's implementation: takes the validated arguments, returns the observation text.
#: It may be a plain function or a coroutine function. If it raises, the action still counts as
#: executed and the observation says what went wrong (the model can correct itself) — except
#: :class:`polyloop.errors.EnvironmentFailure`, which means the environment is gone (ENV_ERROR).
ToolHandler = Callable[[Mapping[str, object]], "str | Awaitable[str]"]


def canonical_arguments(arguments: Mapping[str, object]) -> str:
    """The canonical JSON of tool arguments: sorted keys, no spaces, UTF-8 text kept as is.

    Every mapping (a read-only one too) is written as a JSON object, with its keys as strings.
    Values JSON cannot encode are written as their ``repr`` so that a rejected call can still
    be recorded.
    """
    return _CANONICAL.encode(_plain(arguments))


_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr
)


def _copy_schema(value: Any) -> Any:
    """Deep-copy a schema, turning every mapping (even a read-only one) into a plain dict.

    ``copy.deepcopy`` alone cannot copy a ``MappingProxyType`` nested in a schema, such as the
    ``parameters`` of another spec reused as a sub-schema.
    """
    if isinstance(value, Mapping):
        return {key: _copy_schema(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy_schema(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_copy_schema(item) for item in value)
    return copy.deepcopy(value)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What a tool is, as the model and the loop see it."""

    name: str
    description: str
    #: A plain JSON Schema (dict) that validates the arguments of a call.
    parameters: Mapping[str, object]
    #: May an interrupted call be executed again on resume? Default ``NEVER``.
    replay_policy: ReplayPolicy = ReplayPolicy.NEVER
    #: A successful execution of this tool means the run's goal is reached.
    completes_run: bool = False
    #: A call of this tool waits for a person's approval before its action intent (design
    #: 0037); the run must be driven with ``run_or_park``/``resume_or_park``.
    requires_approval: bool = False
    #: A call of this tool is a question to the user: the run parks with its ``question``
    #: argument, the executor is never called, and the answer is the step's observation.
    asks_user: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigurationError(
                f"ToolSpec.name must be a non-empty string, got {self.name!r}."
            )
        if not isinstance(self.parameters, Mapping):
            raise ConfigurationError(
                f"ToolSpec {self.name!r}: parameters must be a JSON Schema mapping, got "
                f"{type(self.parameters).__name__}."
            )
        if not isinstance(self.replay_policy, ReplayPolicy):
            raise ConfigurationError(
                f"ToolSpec {self.name!r}: replay_policy must be a ReplayPolicy, got "
                f"{self.replay_policy!r}."
            )
        for flag in ("completes_run", "requires_approval", "asks_user"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigurationError(
                    f"ToolSpec {self.name!r}: {flag} must be a bool, got {getattr(self, flag)!r}."
                )
        if self.asks_user and (self.requires_approval or self.completes_run):
            raise ConfigurationError(
                f"ToolSpec {self.name!r}: a tool that asks_user is answered by a person and "
                "never executed, so it can neither require approval nor complete the run; "
                "drop requires_approval/completes_run."
            )
        object.__setattr__(self, "parameters", MappingProxyType(_copy_schema(self.parameters)))

    def __reduce__(self) -> tuple[type[ToolSpec], tuple[object, ...]]:
        # The read-only schema view cannot be pickled or deep-copied; rebuild from a plain copy.
        return (
            ToolSpec,
            (
                self.name,
                self.description,
                _copy_schema(self.parameters),
                self.replay_policy,
                self.completes_run,
                self.requires_approval,
                self.asks_user,
            ),
        )


@dataclass(frozen=True, slots=True)
class Tool:
    """A spec registered together with the handler that implements it."""

    spec: ToolSpec
    handler: ToolHandler


def _plain(value: object) -> Any:
    """Deep-copy a schema into plain dicts and lists (the validator needs real dicts)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _compile(spec: ToolSpec) -> Validator:
    # Imported here: jsonschema is only needed once a registry with tools exists, and keeping
    # it out of module import keeps `import polyloop.session` fast.
    import jsonschema
    import jsonschema.exceptions
    import jsonschema.validators

    schema = _plain(spec.parameters)
    validator_class = jsonschema.validators.validator_for(
        schema, default=jsonschema.Draft202012Validator
    )
    try:
        validator_class.check_schema(schema)
    except jsonschema.exceptions.SchemaError as error:
        raise ConfigurationError(
            f"Tool {spec.name!r} has an invalid JSON Schema for its parameters: {error.message} "
            f"(at {'/'.join(str(p) for p in error.absolute_path) or 'the root'}). Fix the schema."
        ) from None
    return validator_class(schema)


class ToolRegistry:
    """An immutable set of tools: model-visible schema, validation and dispatch from one place."""

    __slots__ = ("_tools", "_validators")

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        by_name: dict[str, Tool] = {}
        for tool in tools:
            if not isinstance(tool, Tool):
                raise ConfigurationError(
                    f"ToolRegistry takes Tool(spec, handler) objects, got {type(tool).__name__}."
                )
            if tool.spec.name in by_name:
                raise ConfigurationError(
                    f"Two tools are named {tool.spec.name!r}; tool names must be unique in a registry."
                )
            if not callable(tool.handler):
                raise ConfigurationError(f"Tool {tool.spec.name!r}: handler is not callable.")
            by_name[tool.spec.name] = tool
        self._tools: Final[Mapping[str, Tool]] = MappingProxyType(by_name)
        self._validators: Final[Mapping[str, Validator]] = MappingProxyType(
            {name: _compile(tool.spec) for name, tool in by_name.items()}
        )

    @classmethod
    def _from_parts(
        cls, tools: Mapping[str, Tool], validators: Mapping[str, Validator]
    ) -> ToolRegistry:
        registry = cls.__new__(cls)
        object.__setattr__(registry, "_tools", MappingProxyType(dict(tools)))
        object.__setattr__(registry, "_validators", MappingProxyType(dict(validators)))
        return registry

    def __setattr__(self, name: str, value: object) -> None:
        if hasattr(self, name):
            raise AttributeError(f"ToolRegistry is immutable; cannot set {name!r}.")
        object.__setattr__(self, name, value)

    def __len__(self) -> int:
        return len(self._tools)

    def __bool__(self) -> bool:
        return bool(self._tools)

    def __repr__(self) -> str:
        return f"ToolRegistry({list(self._tools)!r})"

    def names(self) -> tuple[str, ...]:
        """Tool names in registration order."""
        return tuple(self._tools)

    def restrict_to(self, names: Collection[str]) -> ToolRegistry:
        """A new registry holding only ``names`` (in this registry's order).

        Raises :class:`ConfigurationError` naming every requested tool this registry lacks.
        """
        if isinstance(names, str):
            raise ConfigurationError(
                f"restrict_to takes a collection of names, got the string {names!r}; "
                f"write restrict_to([{names!r}])."
            )
        wanted = set(names)
        missing = sorted(wanted - set(self._tools))
        if missing:
            raise ConfigurationError(
                f"restrict_to asked for tools this registry does not have: {missing}; "
                f"available: {sorted(self._tools)}."
            )
        kept = {name: tool for name, tool in self._tools.items() if name in wanted}
        return ToolRegistry._from_parts(kept, {name: self._validators[name] for name in kept})

    def schema_for_model(self) -> Sequence[Mapping[str, object]]:
        """The tool list as shown to the model: name, description and parameter schema.

        Fresh plain objects on every call; mutating them does not touch the registry.
        """
        return [
            {
                "name": tool.spec.name,
                "description": tool.spec.description,
                "parameters": _plain(tool.spec.parameters),
            }
            for tool in self._tools.values()
        ]

    def validate(self, call: ToolCall) -> None:
        """Raise :class:`ToolCallRejected` unless ``call`` names a tool here with valid arguments."""
        validator = self._validators.get(call.name)
        if validator is None:
            raise ToolCallRejected(
                f"Unknown tool {call.name!r}; this registry offers {sorted(self._tools)}."
            )
        if not isinstance(call.arguments, Mapping):
            raise ToolCallRejected(
                f"Tool {call.name!r}: arguments must be a JSON object, got "
                f"{type(call.arguments).__name__}."
            )
        arguments = _plain(call.arguments)
        if validator.is_valid(arguments):
            return
        errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        if errors:
            details = "; ".join(
                f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
                for e in errors[:5]
            )
            raise ToolCallRejected(
                f"Tool {call.name!r}: arguments do not match its schema: {details}."
            )

    def executor(self) -> ActionExecutor:
        """An executor that dispatches tool actions to this registry's handlers."""
        return RegistryExecutor(self)

    def spec_for(self, name: str) -> ToolSpec | None:
        """The spec of ``name``, or ``None`` when this registry has no such tool."""
        tool = self._tools.get(name)
        return None if tool is None else tool.spec

    def _handler_for(self, name: str) -> ToolHandler:
        return self._tools[name].handler


class RegistryExecutor:
    """The :class:`ActionExecutor` derived from a registry; it remembers which one.

    ``RunRequest`` checks that this executor's registry is the very ``tools`` it carries.
    """

    __slots__ = ("_registry",)

    def __init__(self, registry: ToolRegistry) -> None:
        self._registry = registry

    @property
    def registry(self) -> ToolRegistry:
        return self._registry

    async def execute(self, action: Action) -> ActionOutcome:
        call = action.tool_call
        if call is None:
            return ActionOutcome(
                status=ActionStatus.NOT_EXECUTED,
                observation="This agent acts only through tool calls; no tool was called.",
                observation_is_synthetic=True,
                env_reported_completion=False,
                observation_truncated_chars=0,
            )
        try:
            self._registry.validate(call)
        except ToolCallRejected as rejected:
            return ActionOutcome(
                status=ActionStatus.NOT_EXECUTED,
                observation=str(rejected),
                observation_is_synthetic=True,
                env_reported_completion=False,
                observation_truncated_chars=0,
            )
        handler = self._registry._handler_for(call.name)
        try:
            result: object = handler(call.arguments)
            if inspect.isawaitable(result):
                result = await result
        except EnvironmentFailure:
            raise  # the loop records ENV_ERROR and stops
        except Exception as error:  # a failing tool is an observation, not an env failure
            return ActionOutcome(
                status=ActionStatus.EXECUTED,
                observation=f"Tool {call.name!r} failed: {type(error).__name__}: {error}",
                observation_is_synthetic=True,
                env_reported_completion=False,
                observation_truncated_chars=0,
            )
        if not isinstance(result, str):
            return ActionOutcome(
                status=ActionStatus.EXECUTED,
                observation=(
                    f"Tool {call.name!r} returned {type(result).__name__}, not text; "
                    "its handler must return a string."
                ),
                observation_is_synthetic=True,
                env_reported_completion=False,
                observation_truncated_chars=0,
            )
        return ActionOutcome(
            status=ActionStatus.EXECUTED,
            observation=result,
            observation_is_synthetic=False,
            env_reported_completion=False,
            observation_truncated_chars=0,
        )

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "tool_registry", "tools": ",".join(self._registry.names())}
