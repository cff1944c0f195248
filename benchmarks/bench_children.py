"""Child runs: the overhead of a call to another agent against a plain tool call doing the same work.

Sequential: one parent makes 100 calls, each to a refund agent (a child run that looks an order up and
finishes), against one parent making 100 plain ``lookup`` calls. Concurrent: 100 parents of one call each,
driven by a threaded worker (8 slots), and by an async worker (one event loop, 100 in flight), against 100
parents of one plain call under the same worker. SQLite, a ScriptedModel; the
ratio is the child calls' wall time over the plain calls', both measured in this run.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchkit import emit, machine, parse_args, table
from stateward import Agent, AgentRegistry, Budget, ReActController, Runtime, ToolRegistry, tool
from stateward.runtime.async_worker import AsyncWorker
from stateward.runtime.worker import Worker
from stateward.testing import ScriptedModel
from stateward.tools import agent_tool

CALLS = 100


@tool
def lookup(order: str) -> dict[str, Any]:
    """Look an order up."""
    return {"order": order}


def _child(request: Any) -> dict[str, Any]:
    if request.observations:
        return {"type": "FINISH", "reason": "done"}
    return {"type": "EXECUTE_TOOL", "action": "lookup", "args": {"order": request.goal}}


def _parent(action: str, calls: int) -> Any:
    def decide(request: Any) -> dict[str, Any]:
        n = len(request.observations)
        if n >= calls:
            return {"type": "FINISH", "reason": "all done"}
        args = {"goal": f"order-{n}"} if action == "refund_agent" else {"order": f"order-{n}"}
        return {"type": "EXECUTE_TOOL", "action": action, "args": args}

    return decide


def _registry(calls: int) -> AgentRegistry:
    agents = AgentRegistry()
    agents.register(
        "refund-agent",
        lambda: Agent(
            name="refund-agent", controller=ReActController(ScriptedModel(_child)), tools=ToolRegistry([lookup])
        ),
    )
    for action in ("refund_agent", "lookup"):
        tools = ToolRegistry([agent_tool("refund-agent"), lookup])
        agents.register(
            f"parent-{action}",
            lambda action=action, tools=tools: Agent(
                name=f"parent-{action}",
                controller=ReActController(ScriptedModel(_parent(action, calls))),
                tools=tools,
                budget=Budget(max_steps=4 * calls + 10),
            ),
        )
    return agents


def sequential(action: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        rt = Runtime.open(str(Path(tmp) / "b.db"), agents=_registry(CALLS))
        began = time.perf_counter()
        rt.start(rt.agents.create(f"parent-{action}"), goal="calls")
        took = time.perf_counter() - began
        rt.close()
    return took


def concurrent(action: str, workers: type[Worker] = Worker, slots: int = 8) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        rt = Runtime.open(str(Path(tmp) / "b.db"), agents=_registry(1))
        for i in range(CALLS):
            rt.submit(rt.agents.create(f"parent-{action}"), goal=f"call {i}")
        began = time.perf_counter()
        workers(rt, concurrency=slots, poll_s=0.01, expire_every_s=0.05).run(idle_exit_s=0.3)
        took = time.perf_counter() - began - 0.3  # the idle exit's wait is no work
        rt.close()
    return took


def main() -> None:
    args = parse_args(__doc__)
    rows, result = [], {"machine": machine(), "calls": CALLS}
    modes: tuple[tuple[str, Callable[[str], float]], ...] = (
        ("sequential", sequential),
        ("concurrent", concurrent),
        ("concurrent async", lambda action: concurrent(action, AsyncWorker, CALLS)),
    )
    for name, measure in modes:
        child, plain = measure("refund_agent"), measure("lookup")
        ratio = child / plain
        rows.append((name, f"{plain * 1e3 / CALLS:.2f}", f"{child * 1e3 / CALLS:.2f}", f"{ratio:.2f}x"))
        result[name] = {
            "plain_ms_per_call": plain * 1e3 / CALLS,
            "child_ms_per_call": child * 1e3 / CALLS,
            "ratio": ratio,
        }
    header = ("mode", "plain call ms", "child call ms", "ratio")
    emit(args.json, result, [table(f"{CALLS} calls: a child run vs a plain tool call", header, rows)])


if __name__ == "__main__":
    main()
