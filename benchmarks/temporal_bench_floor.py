"""The floor under bench_temporal.py's Temporal steps: a bare workflow of the same shape (not a benchmark).

Per step, what a stateward step asks of Temporal at the least: a "propose" activity and a "call" activity, each a
no-op returning a small dict, scheduled from the workflow one after the other; nothing else (no search attributes,
no memo, no state carried in or out). Hosted like the run workflow: the SDK's sandbox with every module passed
through, the same slot limits.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

FLOOR_WORKFLOW = "bench.bare_steps"
TIMEOUT = timedelta(seconds=60)


@activity.defn(name="bench.propose")
async def propose(step: int) -> dict[str, int]:
    """A no-op in place of the controller's proposal."""
    return {"step": step}


@activity.defn(name="bench.call")
async def call(step: int) -> dict[str, int]:
    """A no-op in place of the tool call."""
    return {"step": step}


@workflow.defn(name=FLOOR_WORKFLOW)
class BareSteps:
    """``steps`` steps of two activities each, then one more "propose" (the finish step); returns the steps."""

    @workflow.run
    async def run(self, steps: int) -> int:
        for step in range(steps):
            await workflow.execute_activity(propose, step, start_to_close_timeout=TIMEOUT)
            await workflow.execute_activity(call, step, start_to_close_timeout=TIMEOUT)
        await workflow.execute_activity(propose, steps, start_to_close_timeout=TIMEOUT)
        return steps + 1


def serve_floor_worker(address: str, namespace: str, task_queue: str, concurrency: int, ready: threading.Event) -> None:
    """Poll ``task_queue`` with the bare workflow until the process ends; ``ready`` is set once it polls."""

    async def main() -> None:
        client = await Client.connect(address, namespace=namespace)
        worker = Worker(
            client,
            task_queue=task_queue,
            workflows=[BareSteps],
            activities=[propose, call],
            workflow_runner=SandboxedWorkflowRunner(
                restrictions=SandboxRestrictions.default.with_passthrough_all_modules()
            ),
            max_concurrent_activities=concurrency,
            max_concurrent_workflow_tasks=max(2, concurrency),
        )
        async with worker:
            ready.set()
            await asyncio.Event().wait()

    asyncio.run(main())
