"""Every public name stays importable where it is: names may be added, never removed or moved.

The lists below are written out (generated once from each module's ``__all__`` at commit
1dca546, before issue 18's restructuring), not read from ``__all__`` at run time: a list computed
from the code would shrink with it and prove nothing. When a module gains a public name, add it
here; a name that disappears fails this test, whatever moved it. Entry points that other tools
load by name (the ``polyloop`` console script, the pytest plugin) are checked too.
"""

from __future__ import annotations

import importlib

import pytest

#: Module → the public names it offered (its ``__all__``) at commit 1dca546.
PUBLIC_NAMES: dict[str, tuple[str, ...]] = {
    "polyloop": (
        "ports",
        "serialization",
        "session",
        "tools",
        "types",
    ),
    "polyloop.types": (
        "CURRENT_SCHEMA_VERSION",
        "ActionOutcome",
        "ActionStatus",
        "Budget",
        "ContentBlock",
        "Context",
        "Injection",
        "Intent",
        "IntentKind",
        "Message",
        "ModelCallResult",
        "ModelReply",
        "ReplayPolicy",
        "Role",
        "RunFinished",
        "RunResult",
        "RunStarted",
        "StepCompleted",
        "StepRecord",
        "StopReason",
        "SyntheticObservations",
        "TextBlock",
    ),
    "polyloop.ports": (
        "Action",
        "ActionExecutor",
        "Decision",
        "DecisionParser",
        "Event",
        "EventKind",
        "EventSink",
        "FinalAnswer",
        "InvalidDecision",
        "LeaseHolder",
        "ModelCall",
        "ModelClient",
        "ParsedReply",
        "RunLease",
        "RunLeasing",
        "RunListing",
        "RunLog",
        "RunStore",
        "StoreClosing",
        "ToolCall",
    ),
    "polyloop.tools": (
        "RegistryExecutor",
        "Tool",
        "ToolHandler",
        "ToolRegistry",
        "ToolSpec",
        "canonical_arguments",
    ),
    "polyloop.serialization": (
        "LOG_RECORD_TYPES",
        "READABLE_SCHEMA_VERSIONS",
        "LogRecord",
        "dumps",
        "dumps_log_record",
        "from_dict",
        "loads",
        "loads_log_record",
        "log_record_from_dict",
        "log_record_tag",
        "to_dict",
    ),
    "polyloop.session": (
        "DEFAULT_EVENT_TIMEOUT_SECONDS",
        "OBSERVATION_TOKEN",
        "TOOLS_TOKEN",
        "AgentDefinition",
        "ResumeMove",
        "ResumePlan",
        "RunRequest",
        "TailState",
        "action_result_id",
        "merge_snapshots",
        "model_result_id",
        "plan_resume",
        "resume",
        "run",
        "run_snapshot",
        "stop_after_step",
        "validate_log",
    ),
    "polyloop.leasing": (
        "ForgetsAfterFork",
        "LeaseTable",
        "ReleasedOnce",
        "forget_in_forked_child",
    ),
    "polyloop.recovery": (
        "PARSE_FAILURE_LIMIT_KEY",
        "ResumeMove",
        "ResumePlan",
        "SnapshotFacts",
        "TailState",
        "WriteOrderCheck",
        "action_result_id",
        "budget_stop",
        "is_parse_failure",
        "model_result_id",
        "plan_resume",
        "snapshot_facts",
        "stop_after_step",
        "stop_reasons_allowed",
        "trailing_parse_failures",
        "validate_log",
        # Added by issue 28 (the one rule of an action's terms).
        "TOOL_LESS_TERMS",
        "ActionTerms",
        "ToolTerms",
        "action_terms",
    ),
    "polyloop.errors": (
        "ConfigurationError",
        "CorruptLogError",
        "DuplicateRecordError",
        "EnvironmentFailure",
        "LeaseLostError",
        "PolyLoopError",
        "RunAlreadyStartedError",
        "RunLeaseHeldError",
        "RunNotFoundError",
        "SchemaVersionError",
        "SerializationError",
        "SnapshotMismatchError",
        "StoreError",
        "ToolCallRejected",
    ),
    "polyloop.testing": (
        "LineDecisionParser",
        "NullEventSink",
        "RecordingEventSink",
        "ScriptExhaustedError",
        "ScriptedExecutor",
        "ScriptedModelClient",
        "reply",
        # added with the record builders (issue 18 item 4)
        "StepWrites",
        "code_step",
        "final_step",
        "model_failure_step",
        "parse_failure_step",
        "run_finished",
        "run_log_from",
        "run_started",
        "tool_step",
        "write_records",
    ),
    "polyloop.stores.memory": ("MemoryRunStore",),
    "polyloop.stores.jsonl": ("JsonlRunStore",),
    "polyloop.stores.sqlite": ("SqliteRunStore",),
    # A package of one-job private modules since issue 28; its two names stay where they were.
    "polyloop.stores.postgres": ("PostgresRunLease", "PostgresRunStore"),
    # Added with the store URLs and their entry-point group (design 0034).
    "polyloop.stores.urls": (
        "ENTRY_POINT_GROUP",
        "StoreFactory",
        "local_store_path",
        "open_jsonl_url",
        "open_postgres_url",
        "open_sqlite_url",
        "open_store_url",
        "shown_url",
        "store_factories",
        "url_scheme",
        "url_secrets",
    ),
    "polyloop.adapters.gateway": (
        "BINDING_HEADER",
        "CALL_INDEX_HEADER",
        "RESULT_ID_HEADER",
        "RUN_ID_HEADER",
        "GatewayConnectionError",
        "GatewayEmptyChoicesError",
        "GatewayError",
        "GatewayMalformedResponseError",
        "GatewayModelClient",
        "GatewayStatusError",
        "GatewayTimeoutError",
    ),
    # design 0064 (issue 37)
    "polyloop.adapters.openai_client": ("OpenAIModelClient",),
    "polyloop.adapters.litellm_client": ("LiteLLMModelClient",),
    # design 0065 (issue 37)
    "polyloop.adapters.retry": (
        "ModelCallRetriesError",
        "Pacer",
        "Permit",
        "RateLimiter",
        "RetryPolicy",
        "RetryingModelClient",
        "is_transient",
        "retry_after_of",
    ),
    "polyloop.adapters.mcp": (
        "ALL_TOOLS",
        "AllTools",
        "McpBindError",
        "McpError",
        "McpExecutor",
        "McpServer",
        "McpServerStartError",
        "McpServerUnavailable",
        "McpToolBinder",
        "McpToolFailed",
        "McpToolNotOffered",
        "McpToolSet",
    ),
    "polyloop.adapters.container": (
        "DEFAULT_DOCKER_IMAGE",
        "BackendUnavailableError",
        "BubblewrapBackend",
        "ContainerError",
        "ContainerExecutor",
        "DockerBackend",
        "FirstCodeBlockParser",
        "ImageBuildError",
        "LaunchSpec",
        "Limits",
        "Sandbox",
        "SandboxBackend",
        "SessionDeadError",
        "build_rootfs",
        "ensure_docker_image",
        "remove_orphan_containers",
    ),
    "polyloop.batch": (
        "RESULTS_SCHEMA_VERSION",
        "BatchControl",
        "BatchError",
        "BatchSummary",
        "BatchTally",
        "Episode",
        "EpisodeAgent",
        "EpisodeDriver",
        "EpisodeError",
        "EpisodeFactory",
        "EpisodeReport",
        "EpisodeStatus",
        "EpisodesFile",
        "EpisodesFileError",
        "FactoryError",
        "FactoryResult",
        "LocalEpisodeDriver",
        "ReportObserver",
        "ResultsFile",
        "WorkerSetupError",
        "check_episodes_file",
        "load_factory",
        "open_agent",
        "run_batch",
        "run_episodes",
    ),
    "polyloop_contract": (
        "RefusedStore",
        "STORE_CAPABILITIES",
        "StoreCapabilities",
        "find_secret",
    ),
}

#: Names other tools load from these modules (console script, pytest11 and store entry points).
ENTRY_POINTS: dict[str, tuple[str, ...]] = {
    "polyloop_cli.main": ("main", "cli"),
    "polyloop_cli.commands.batch": ("batch",),
    "polyloop_contract.plugin": ("pytest_addoption",),
    # The factories of the shipped stores' `polyloop.stores` entry points.
    "polyloop.stores.urls": ("open_jsonl_url", "open_postgres_url", "open_sqlite_url"),
}


@pytest.mark.parametrize(("module_name", "names"), PUBLIC_NAMES.items(), ids=list(PUBLIC_NAMES))
def test_every_public_name_is_still_offered_where_it_was(
    module_name: str, names: tuple[str, ...]
) -> None:
    """Each listed name is still an attribute of its module and still listed in its `__all__`."""
    module = importlib.import_module(module_name)
    assert [] == [name for name in names if not hasattr(module, name)]
    assert [] == [name for name in names if name not in module.__all__]


@pytest.mark.parametrize(("module_name", "names"), ENTRY_POINTS.items(), ids=list(ENTRY_POINTS))
def test_entry_points_still_resolve(module_name: str, names: tuple[str, ...]) -> None:
    """The objects that the console script and the pytest plugin entry point name still exist."""
    module = importlib.import_module(module_name)
    assert [] == [name for name in names if not callable(getattr(module, name, None))]
