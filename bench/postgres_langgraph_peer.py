"""W3's LangGraph peer for ``bench/postgres_bench.py``: a PostgresSaver thread of N steps.

Not part of the workspace: LangGraph is not a dependency of any distribution, and this file is
never imported by the workspace's code or tests. ``postgres_bench.py`` runs it in a child
process with the packages taken from PyPI for that one command and not written into uv.lock:

    uv run --no-sync --with langgraph-checkpoint-postgres --with langgraph \\
        python bench/postgres_langgraph_peer.py URL build|resume SCHEMA STEPS THREADS|THREAD

The graph is the agent loop in LangGraph's usual shape: a ``messages`` channel
(``add_messages``) and a step counter; one node per step, which takes the model's reply (an
``AIMessage`` calling a ``noop`` tool) and the tool's answer (a ``ToolMessage``), as PolyLoop's
``NoopCaller`` agent does. ``build`` writes THREADS threads of STEPS steps each (only its final checkpoint
is written, ``durability="exit"``, to keep the set-up short; the thread is the same as one
written step by step, since the latest checkpoint holds the whole state). ``resume`` is the
measured part, in a fresh process with imports done before the clock starts: open the saver
(one connection), then ``invoke`` with a limit one higher, which reads the latest checkpoint,
runs one more step and commits its checkpoints (``durability="sync"``: each before going on),
and prints the milliseconds. The tables live in schema SCHEMA (``search_path``).
"""

from __future__ import annotations

import sys
import time
from typing import Annotated, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from psycopg import Connection, sql
from psycopg.rows import dict_row


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    steps: int
    limit: int


def step(state: State) -> dict[str, object]:
    n = state.get("steps", 0)
    call = {"name": "noop", "args": {}, "id": f"call-{n}", "type": "tool_call"}
    return {
        "messages": [
            AIMessage(content=f"step {n}: calling noop", tool_calls=[call]),
            ToolMessage(content="ok", tool_call_id=f"call-{n}"),
        ],
        "steps": n + 1,
    }


def route(state: State) -> str:
    return END if state["steps"] >= state["limit"] else "step"


def graph(saver: PostgresSaver):  # type: ignore[no-untyped-def]
    builder = StateGraph(State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", route)
    return builder.compile(checkpointer=saver)


def connection(url: str, schema: str) -> Connection[dict[str, object]]:
    c = Connection.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row)
    c.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    return c


def config(thread: int, steps: int) -> dict[str, object]:
    return {"configurable": {"thread_id": f"w3-{thread}"}, "recursion_limit": steps * 2 + 10}


def main(url: str, mode: str, schema: str, steps: int, number: int) -> None:
    if mode == "build":
        with Connection.connect(url, autocommit=True) as c:
            c.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        with connection(url, schema) as c:
            saver = PostgresSaver(c)  # type: ignore[arg-type]
            saver.setup()
            agent = graph(saver)
            for thread in range(number):
                result = agent.invoke(
                    {"messages": [], "steps": 0, "limit": steps},
                    config(thread, steps),  # type: ignore[arg-type]
                    durability="exit",
                )
                assert result["steps"] == steps
        print("built", flush=True)
        return
    began = time.perf_counter()
    with connection(url, schema) as c:
        saver = PostgresSaver(c)  # type: ignore[arg-type]
        result = graph(saver).invoke(
            {"limit": steps + 1},
            config(number, steps),  # type: ignore[arg-type]
            durability="sync",
        )
    elapsed = time.perf_counter() - began
    assert result["steps"] == steps + 1, result["steps"]
    assert len(result["messages"]) == 2 * (steps + 1)
    print(f"resumed {elapsed * 1e3:.2f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
