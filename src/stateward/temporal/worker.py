"""A Temporal worker for stateward runs: it hosts the run workflow and its activities for one task queue.

The workflow runs in the SDK's sandbox (its globals isolated per run, its clock and ids the workflow's). Every
module is passed through the sandbox rather than re-imported: stateward's core is pure, and an agent factory
the operator registered runs with the modules it was imported with.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass

from temporalio.converter import PayloadCodec
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from stateward.runtime.agent_registry import AgentRegistry
from stateward.store.outbox import WebhookStore
from stateward.temporal.activities import Activities
from stateward.temporal.agents import host_agents
from stateward.temporal.connection import Connection
from stateward.temporal.target import TemporalTarget, version_queue
from stateward.temporal.workflow import RunWorkflow

DEFAULT_ACTIVITIES = 64  # activities one worker runs at once (model and tool calls, each in a thread)


@dataclass(frozen=True)
class WorkerLimits:
    """How much one worker takes on at once."""

    activities: int = DEFAULT_ACTIVITIES
    workflow_tasks: int = 64


def sandbox() -> SandboxedWorkflowRunner:
    """The SDK's sandbox for the run workflow, every module passed through (a replayer uses the same)."""
    return SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default.with_passthrough_all_modules())


def queues(base: str, agents: AgentRegistry) -> list[str]:
    """The task queues a worker hosting ``agents`` polls: the URL's own (runs recorded without a version) and one
    per agent version it builds, compatible versions included. A run of any other version is never handed to it:
    v1 and v2 workers side by side each drive their own, and none takes a run only to refuse it."""
    versioned = {version_queue(base, name, v) for name, versions in agents.claimable().items() for v in versions}
    return [base, *sorted(versioned - {base})]


def build_workers(
    connection: Connection,
    agents: AgentRegistry,
    limits: WorkerLimits = WorkerLimits(),
    outbox: WebhookStore | None = None,
) -> list[Worker]:
    """The SDK workers for the queues of ``agents`` (call it on the connection's loop); ``outbox``: where the runs'
    webhook notices go (the service store)."""
    host_agents(agents)
    activities = Activities(agents, outbox).all()
    runner = sandbox()
    return [
        Worker(
            connection.client,
            task_queue=queue,
            workflows=[RunWorkflow],
            activities=activities,
            workflow_runner=runner,
            max_concurrent_activities=limits.activities,
            max_concurrent_workflow_tasks=limits.workflow_tasks,
        )
        for queue in queues(connection.target.task_queue, agents)
    ]


def run_worker(
    url: str,
    agents: AgentRegistry,
    *,
    stop: threading.Event | None = None,
    ready: Callable[[], object] | None = None,
    limits: WorkerLimits = WorkerLimits(),
    outbox: WebhookStore | None = None,
    codec: PayloadCodec | None = None,
) -> None:
    """Poll the task queues of ``url`` for the agent versions ``agents`` builds (see :func:`queues`) until ``stop``
    is set (or forever), on a loop of its own; ``ready`` is called once every queue is polled. STORE_UNAVAILABLE
    when no Temporal frontend answers there. ``outbox``: the service store the runs' webhook notices go to;
    ``codec``: what payloads pass through (else the one ``STATEWARD_TEMPORAL_CODEC`` names)."""
    connection = Connection.open(TemporalTarget.parse(url), codec)
    try:
        connection.run(_poll(connection, agents, limits, stop, ready, outbox))
    finally:
        connection.close()


async def _poll(
    connection: Connection,
    agents: AgentRegistry,
    limits: WorkerLimits,
    stop: threading.Event | None,
    ready: Callable[[], object] | None,
    outbox: WebhookStore | None,
) -> None:
    async with AsyncExitStack() as running:
        for worker in build_workers(connection, agents, limits, outbox):  # the SDK builds a worker on its running loop
            await running.enter_async_context(worker)
        if ready is not None:
            ready()
        while stop is None or not stop.is_set():
            await asyncio.sleep(0.1)
