"""A GovDoc-style tool agent: one document workflow in three phases, each a run of its own.

Every phase sees a narrower tool set, made with ``ToolRegistry.restrict_to`` from one registry:

1. research (4 tools): search the archive, read documents, record findings, submit them;
2. drafting (3 tools): read documents, write sections, submit the draft;
3. approval (2 tools): check compliance, publish.

Each phase ends when the model calls that phase's tool marked ``completes_run``
(``submit_findings``, ``submit_draft``, ``publish_document``): the stop reason is
``task_completed``, the environment's confirmation, not the model's own claim. A call to a tool
outside the phase's set is rejected by the registry and fed back as a synthetic observation
(the scripted model tries it once in phase 3). The model is scripted, so this runs offline.

Run: ``uv run python examples/govdoc_agent.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from polyloop.session import AgentDefinition, RunRequest, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import LineDecisionParser, NullEventSink, ScriptedModelClient, reply
from polyloop.tools import Tool, ToolHandler, ToolRegistry, ToolSpec
from polyloop.types import (
    Budget,
    Context,
    Message,
    ReplayPolicy,
    Role,
    RunResult,
    SyntheticObservations,
    TextBlock,
)

ARCHIVE: Mapping[str, str] = {
    "circ-2019-04": "Circular 2019/04: permits for street markets are issued by the district.",
    "circ-2023-11": "Circular 2023/11: market permits now need a waste-disposal plan.",
    "memo-2024-02": "Memo 2024/02: the waste-disposal plan form is W-7.",
}

PHASES: Mapping[str, tuple[str, ...]] = {
    "research": ("search_archive", "read_document", "record_finding", "submit_findings"),
    "drafting": ("read_document", "write_section", "submit_draft"),
    "approval": ("check_compliance", "publish_document"),
}

SCRIPTS: Mapping[str, tuple[str, ...]] = {
    "research": (
        'CALL search_archive {"query": "market permit"}',
        'CALL read_document {"doc_id": "circ-2023-11"}',
        'CALL record_finding {"text": "Permits need a waste-disposal plan (Circular 2023/11)."}',
        'CALL read_document {"doc_id": "memo-2024-02"}',
        'CALL record_finding {"text": "The plan is filed on form W-7 (Memo 2024/02)."}',
        "CALL submit_findings {}",
    ),
    "drafting": (
        'CALL write_section {"title": "Who issues permits", "body": "The district office."}',
        'CALL write_section {"title": "What to file", "body": "A waste-disposal plan, form W-7."}',
        "CALL submit_draft {}",
    ),
    "approval": (
        # Not in this phase's tools: rejected, and the model is told so.
        'CALL write_section {"title": "Late addition", "body": "..."}',
        "CALL check_compliance {}",
        'CALL publish_document {"title": "Street market permits: what to file"}',
    ),
}


@dataclass
class Workspace:
    """The environment the tools act on."""

    findings: list[str] = field(default_factory=list)
    sections: list[tuple[str, str]] = field(default_factory=list)
    published: list[str] = field(default_factory=list)
    submitted: list[str] = field(default_factory=list)


def _schema(**properties: str) -> dict[str, object]:
    return {
        "type": "object",
        "properties": {name: {"type": kind} for name, kind in properties.items()},
        "required": sorted(properties),
        "additionalProperties": False,
    }


def registry(ws: Workspace) -> ToolRegistry:
    """All the workflow's tools in one registry; each phase restricts it."""

    def search_archive(args: Mapping[str, object]) -> str:
        words = str(args["query"]).lower().split()
        hits = [doc for doc, text in ARCHIVE.items() if any(w in text.lower() for w in words)]
        return json.dumps(hits)

    def read_document(args: Mapping[str, object]) -> str:
        return ARCHIVE.get(str(args["doc_id"]), f"No document {args['doc_id']!r}.")

    def record_finding(args: Mapping[str, object]) -> str:
        ws.findings.append(str(args["text"]))
        return f"Finding {len(ws.findings)} recorded."

    def write_section(args: Mapping[str, object]) -> str:
        ws.sections.append((str(args["title"]), str(args["body"])))
        return f"Section {len(ws.sections)} written."

    def submit(phase: str) -> ToolHandler:
        def handler(args: Mapping[str, object]) -> str:
            ws.submitted.append(phase)
            return f"{phase} submitted."

        return handler

    def check_compliance(args: Mapping[str, object]) -> str:
        missing = [] if ws.sections else ["no sections"]
        return "compliant" if not missing else f"not compliant: {missing}"

    def publish_document(args: Mapping[str, object]) -> str:
        ws.published.append(str(args["title"]))
        return f"Published {args['title']!r} with {len(ws.sections)} sections."

    never, safe = ReplayPolicy.NEVER, ReplayPolicy.SAFE
    return ToolRegistry(
        [
            Tool(ToolSpec("search_archive", "Find documents.", _schema(query="string"), safe),
                 search_archive),
            Tool(ToolSpec("read_document", "Read one document.", _schema(doc_id="string"), safe),
                 read_document),
            Tool(ToolSpec("record_finding", "Note a finding.", _schema(text="string"), never),
                 record_finding),
            Tool(ToolSpec("submit_findings", "Hand the findings to drafting.", _schema(), never,
                          completes_run=True), submit("findings")),
            Tool(ToolSpec("write_section", "Write a section.",
                          _schema(title="string", body="string"), never), write_section),
            Tool(ToolSpec("submit_draft", "Hand the draft to approval.", _schema(), never,
                          completes_run=True), submit("draft")),
            Tool(ToolSpec("check_compliance", "Check the draft.", _schema(), safe),
                 check_compliance),
            Tool(ToolSpec("publish_document", "Publish the document.", _schema(title="string"),
                          never, completes_run=True), publish_document),
        ]
    )  # fmt: skip


def _goal(phase: str, ws: Workspace) -> str:
    if phase == "research":
        return "Find what an applicant must file for a street-market permit."
    if phase == "drafting":
        return "Draft the guidance from these findings: " + " ".join(ws.findings)
    return "Approve and publish this draft: " + json.dumps(ws.sections)


async def run_phase(
    phase: str, tools: ToolRegistry, ws: Workspace, store: MemoryRunStore
) -> RunResult:
    narrowed = tools.restrict_to(PHASES[phase])
    definition = AgentDefinition(
        model_client=ScriptedModelClient([reply(t) for t in SCRIPTS[phase]], name=phase),
        decision_parser=LineDecisionParser(),
        store=store,
        event_sink=NullEventSink(),
        synthetic_observations=SyntheticObservations(
            action_rejected="That tool is not available in this phase or its arguments are wrong.",
            env_failed="The document system failed.",
            model_call_failed="The model call failed.",
        ),
    )
    request = RunRequest(
        run_id=f"govdoc-permits-{phase}",
        budget=Budget(
            max_steps=10, max_actions=8, max_consecutive_parse_failures=2, max_prompt_chars=40_000
        ),
        action_executor=narrowed.executor(),
        tools=narrowed,
        context=Context(
            run_level=(Message(Role.SYSTEM, (TextBlock(f"You are in the {phase} phase."),)),),
            goal_level=(Message(Role.USER, (TextBlock(_goal(phase, ws)),)),),
        ),
        injections={},
        model_binding={"workflow": "govdoc", "phase": phase},
        model_replay_policy=ReplayPolicy.SAFE,
        observation_template="Result: {observation}",
        tool_section_template="Tools you may call in this phase: {tools}",
        cancel_grace_seconds=2.0,
    )
    return await run(definition, request)


async def main() -> tuple[dict[str, RunResult], Workspace]:
    ws = Workspace()
    tools = registry(ws)
    store = MemoryRunStore()
    results = {}
    for phase in PHASES:
        results[phase] = await run_phase(phase, tools, ws, store)
    return results, ws


if __name__ == "__main__":
    results, ws = asyncio.run(main())
    for phase, result in results.items():
        print(f"== {phase}: {result.stop_reason.value} tools={list(PHASES[phase])}")
        for step in result.steps:
            status = step.action_status.value if step.action_status else "-"
            print(f"  {step.step_idx} {step.tool_name} [{status}] {step.observation}")
    print("published:", ws.published)
