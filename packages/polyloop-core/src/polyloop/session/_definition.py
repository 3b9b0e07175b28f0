"""``AgentDefinition``, ``RunRequest`` and the parameter snapshot they produce together."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from polyloop.errors import ConfigurationError
from polyloop.ports import ActionExecutor, DecisionParser, EventSink, ModelClient, RunStore
from polyloop.tools import RegistryExecutor, ToolRegistry, canonical_arguments
from polyloop.types import Budget, Context, Injection, ReplayPolicy, SyntheticObservations

__all__ = [
    "OBSERVATION_TOKEN",
    "TOOLS_TOKEN",
    "AgentDefinition",
    "RunRequest",
    "merge_snapshots",
    "snapshot_differences",
]

#: Replaced (literally, never with ``str.format``) by the observation in ``observation_template``.
OBSERVATION_TOKEN = "{observation}"
#: Replaced by the JSON of ``tools.schema_for_model()`` in ``tool_section_template``.
TOOLS_TOKEN = "{tools}"

#: Snapshot key families added after runs were first recorded (design 0032), as (prefix,
#: suffix): a snapshot recorded before holds no key of such a family, and is compared without
#: it. Once a snapshot holds one key of a family, every key of that family is compared.
ADDED_KEY_FAMILIES: tuple[tuple[str, str], ...] = (
    ("request.tools.", ".schema_sha256"),
    ("request.tools.", ".description_sha256"),
)


#: Where a shipped store's logs lived, as its ``parameters()`` reported it before design 0040,
#: by ``store.kind``: a snapshot recorded then holds these keys, today's snapshot does not
#: (where a log lives does not change what a run does). Left out of the comparison when the
#: current snapshot lacks them, so a run recorded before resumes from wherever its store is now.
RETIRED_STORE_KEYS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "sqlite": ("store.path",),
        "jsonl": ("store.directory",),
        "postgres": ("store.database", "store.schema"),
    }
)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def snapshot_differences(recorded: Mapping[str, str], current: Mapping[str, str]) -> list[str]:
    """One line per key whose value differs (``<absent>`` on the side that lacks it).

    A key family of :data:`ADDED_KEY_FAMILIES` that the recorded snapshot has no key of is left
    out: the run was recorded before the family existed, and refusing every such run would only
    force its users to start over. For the same reason a key of :data:`RETIRED_STORE_KEYS`
    (for the recorded ``store.kind``) that the current snapshot lacks is left out.
    """
    skipped = [
        family
        for family in ADDED_KEY_FAMILIES
        if not any(key.startswith(family[0]) and key.endswith(family[1]) for key in recorded)
    ]
    retired = set(RETIRED_STORE_KEYS.get(recorded.get("store.kind", ""), ())) - set(current)
    absent = "<absent>"
    lines = []
    for key in sorted(set(recorded) | set(current)):
        if key in retired or any(
            key.startswith(prefix) and key.endswith(suffix) for prefix, suffix in skipped
        ):
            continue
        old, new = recorded.get(key, absent), current.get(key, absent)
        if old != new:
            lines.append(f"  {key}: recorded {old!r}, now {new!r}")
    return lines


def merge_snapshots(*parts: tuple[str, Mapping[str, str]]) -> dict[str, str]:
    """Merge ``(prefix, parameters)`` pairs into one flat mapping of ``prefix + key``.

    A key produced twice raises :class:`ConfigurationError` naming both sources: the merge never
    overwrites, because which value survived would depend on the order of the merge.
    """
    merged: dict[str, str] = {}
    source: dict[str, str] = {}
    for prefix, parameters in parts:
        if not isinstance(parameters, Mapping):
            raise ConfigurationError(
                f"parameters() of {prefix.rstrip('.')} returned {type(parameters).__name__}; "
                "it must return a mapping of str to str."
            )
        for key, value in parameters.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ConfigurationError(
                    f"parameters() of {prefix.rstrip('.')} reported {key!r}: {value!r}; keys and "
                    "values must both be strings (convert numbers with str())."
                )
            full = prefix + key
            if full in merged:
                raise ConfigurationError(
                    f"Parameter snapshot key {full!r} is produced twice (by {source[full]} and "
                    f"{prefix.rstrip('.')}); rename one of them."
                )
            merged[full] = value
            source[full] = prefix.rstrip(".")
    return merged


@dataclass(frozen=True, slots=True)
class AgentDefinition:
    """The seams that stay the same across runs. Immutable and safe to share between runs."""

    model_client: ModelClient
    decision_parser: DecisionParser
    store: RunStore
    event_sink: EventSink
    synthetic_observations: SyntheticObservations

    def __post_init__(self) -> None:
        for name, protocol in (
            ("model_client", ModelClient),
            ("decision_parser", DecisionParser),
            ("store", RunStore),
            ("event_sink", EventSink),
        ):
            if not isinstance(getattr(self, name), protocol):
                raise ConfigurationError(
                    f"AgentDefinition.{name} does not implement {protocol.__name__}: "
                    f"{type(getattr(self, name)).__name__} lacks one of its methods."
                )
        if not isinstance(self.synthetic_observations, SyntheticObservations):
            raise ConfigurationError(
                "AgentDefinition.synthetic_observations must be a SyntheticObservations."
            )

    def parameter_snapshot(self) -> Mapping[str, str]:
        """Ask each seam for its parameters now and merge them under the seam's prefix."""
        texts = self.synthetic_observations
        return merge_snapshots(
            ("model_client.", self.model_client.parameters()),
            ("decision_parser.", self.decision_parser.parameters()),
            ("store.", self.store.parameters()),
            ("event_sink.", self.event_sink.parameters()),
            (
                "synthetic_observations.",
                {
                    "action_rejected": texts.action_rejected,
                    "env_failed": texts.env_failed,
                    "model_call_failed": texts.model_call_failed,
                },
            ),
        )


def _freeze_injections(
    value: Mapping[str, tuple[Injection, ...]],
) -> Mapping[str, tuple[Injection, ...]]:
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            "RunRequest.injections must be a mapping of channel name to a tuple of Injection."
        )
    frozen: dict[str, tuple[Injection, ...]] = {}
    for channel, entries in value.items():
        if not isinstance(channel, str) or not isinstance(entries, tuple | list):
            raise ConfigurationError(
                f"RunRequest.injections[{channel!r}] must be a tuple of Injection, keyed by a "
                "string channel name."
            )
        for entry in entries:
            if not isinstance(entry, Injection):
                raise ConfigurationError(
                    f"RunRequest.injections[{channel!r}] holds {type(entry).__name__}; "
                    "only Injection entries are allowed."
                )
        frozen[channel] = tuple(entries)
    return MappingProxyType(frozen)


def _messages_ok(name: str, messages: Iterable[object]) -> None:
    from polyloop.types import Message

    for message in messages:
        if not isinstance(message, Message):
            raise ConfigurationError(
                f"RunRequest.context.{name} holds a {type(message).__name__}, not a Message."
            )


@dataclass(frozen=True, slots=True)
class RunRequest:
    """Everything specific to one run. Construction is cheap: no I/O, no hashing, no network.

    Checks made here: both templates carry their token (the tool-section one only when there
    are tools that do not go natively), the budget and replay policy have the right types, and an executor derived from
    a registry comes from the very ``tools`` object this request carries.
    """

    #: Opaque to the library; the store keys the log by it.
    run_id: str
    budget: Budget
    action_executor: ActionExecutor
    #: The (possibly restricted) registry the model sees in this run.
    tools: ToolRegistry
    context: Context
    #: Entries pasted into the prompt, grouped by channel, channels in mapping order.
    injections: Mapping[str, tuple[Injection, ...]]
    #: The project's own keys, passed through to every model call and into the snapshot.
    model_binding: Mapping[str, str]
    #: Whether an interrupted model call may be made again on resume. Required.
    model_replay_policy: ReplayPolicy
    #: Wraps each observation in history; must contain ``{observation}``.
    observation_template: str
    #: Presents the tools to the model; must contain ``{tools}`` when there are tools.
    tool_section_template: str
    #: Seconds allowed, after cancellation, for writing the ``cancelled`` finish record.
    cancel_grace_seconds: float
    #: The tools go to the model natively (the model client sends ``ModelCall.tools``; added
    #: after the seed, design 0046). ``tool_section_template`` then need not contain
    #: ``{tools}`` (the schema text is left out of the prompt unless the template asks for it;
    #: an empty template adds no message), and a step that made a tool call goes back into
    #: history as an assistant tool-call message and a ``TOOL`` message with the same
    #: ``tool_call_id``. In the snapshot only when set.
    native_tools: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.run_id, str):
            raise ConfigurationError(f"RunRequest.run_id must be a string, got {self.run_id!r}.")
        if not isinstance(self.budget, Budget):
            raise ConfigurationError("RunRequest.budget must be a Budget.")
        if not isinstance(self.tools, ToolRegistry):
            raise ConfigurationError(
                "RunRequest.tools must be a ToolRegistry; pass ToolRegistry() for a tool-less agent."
            )
        if not isinstance(self.action_executor, ActionExecutor):
            raise ConfigurationError(
                f"RunRequest.action_executor ({type(self.action_executor).__name__}) does not "
                "implement ActionExecutor (async execute(action) and parameters())."
            )
        if (
            isinstance(self.action_executor, RegistryExecutor)
            and self.action_executor.registry is not self.tools
        ):
            raise ConfigurationError(
                "RunRequest.action_executor was derived from a different ToolRegistry than "
                "RunRequest.tools; the model would see one set of tools while calls dispatch to "
                "another. Pass tools.executor() for the same tools object."
            )
        if not isinstance(self.context, Context):
            raise ConfigurationError("RunRequest.context must be a Context.")
        _messages_ok("run_level", self.context.run_level)
        _messages_ok("goal_level", self.context.goal_level)
        object.__setattr__(self, "injections", _freeze_injections(self.injections))
        if not isinstance(self.model_binding, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.model_binding.items()
        ):
            raise ConfigurationError(
                "RunRequest.model_binding must map str to str; convert every value to a string."
            )
        object.__setattr__(self, "model_binding", MappingProxyType(dict(self.model_binding)))
        if not isinstance(self.model_replay_policy, ReplayPolicy):
            raise ConfigurationError(
                "RunRequest.model_replay_policy must be ReplayPolicy.SAFE or ReplayPolicy.NEVER; "
                "it has no default on purpose: say whether a model call may be repeated on resume."
            )
        if (
            not isinstance(self.observation_template, str)
            or OBSERVATION_TOKEN not in self.observation_template
        ):
            raise ConfigurationError(
                f"RunRequest.observation_template must contain the token {OBSERVATION_TOKEN!r}; "
                f"got {self.observation_template!r}. Without it the model would never see the "
                "observation."
            )
        if not isinstance(self.tool_section_template, str):
            raise ConfigurationError("RunRequest.tool_section_template must be a string.")
        if not isinstance(self.native_tools, bool):
            raise ConfigurationError(
                f"RunRequest.native_tools must be True or False, got {self.native_tools!r}."
            )
        if self.tools and not self.native_tools and TOOLS_TOKEN not in self.tool_section_template:
            raise ConfigurationError(
                f"RunRequest.tool_section_template must contain the token {TOOLS_TOKEN!r} when "
                f"tools are given; got {self.tool_section_template!r}. If the model client sends "
                "the tools natively, pass native_tools=True (the template may then leave the "
                "schema out)."
            )
        grace = self.cancel_grace_seconds
        if (
            isinstance(grace, bool)
            or not isinstance(grace, int | float)
            or not math.isfinite(grace)
            or grace < 0
        ):
            raise ConfigurationError(
                f"RunRequest.cancel_grace_seconds must be a finite number >= 0, got {grace!r}."
            )

    def parameter_snapshot(self) -> Mapping[str, str]:
        """This request's parameters (``request.``) plus its executor's (``action_executor.``).

        Each tool contributes its replay policy, its ``completes_run`` flag and SHA-256 digests
        of its JSON Schema (canonical JSON) and description, and ``requires_approval`` /
        ``asks_user`` only when set (design 0037).
        """
        budget = self.budget
        own: dict[str, str] = {
            "budget.max_steps": str(budget.max_steps),
            "budget.max_actions": str(budget.max_actions),
            "budget.max_consecutive_parse_failures": str(budget.max_consecutive_parse_failures),
            "budget.max_prompt_chars": str(budget.max_prompt_chars),
            "model_replay_policy": self.model_replay_policy.value,
            "observation_template": self.observation_template,
            "tool_section_template": self.tool_section_template,
            "cancel_grace_seconds": repr(float(self.cancel_grace_seconds)),
            "tools": json.dumps(list(self.tools.names()), ensure_ascii=False),
        }
        if self.native_tools:
            own["native_tools"] = "true"  # only when set: snapshots recorded before stay valid
        for name in self.tools.names():
            spec = self.tools.spec_for(name)
            assert spec is not None
            own[f"tools.{name}.replay_policy"] = spec.replay_policy.value
            own[f"tools.{name}.completes_run"] = "true" if spec.completes_run else "false"
            # What the model is shown, and what a call is validated against: a resume under
            # another schema could record a step that the log's own rules refuse.
            own[f"tools.{name}.schema_sha256"] = _sha256(canonical_arguments(spec.parameters))
            own[f"tools.{name}.description_sha256"] = _sha256(spec.description)
            # Gating keys exist only when set: an ungated run's snapshot is what it always was.
            if spec.requires_approval:
                own[f"tools.{name}.requires_approval"] = "true"
            if spec.asks_user:
                own[f"tools.{name}.asks_user"] = "true"
        binding = {f"model_binding.{key}": value for key, value in self.model_binding.items()}
        return merge_snapshots(
            ("request.", own),
            ("request.", binding),
            ("action_executor.", self.action_executor.parameters()),
        )
