"""The activities of a run: the controller's proposal, one tool call through the Tool Gateway, and the webhook
notices a step caused written to the service store's outbox.

Both build the run's agent from this worker's registry (a run names its agent, it never chooses code) and
neither decides anything: a proposal is data for the workflow's Runtime, a tool call's outcome is what the
gateway says happened. The gateway runs over the journal the workflow hands in, so the idempotency key, the
write-ahead entry, reconciliation and the breaker are the gateway's own, unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import TypeVar

from temporalio import activity

from stateward.core.contract import DecisionContext, ObservationLog
from stateward.core.errors import StatewardError
from stateward.core.journal import BreakerState, SideEffectRecord, approval_consumed
from stateward.models.errors import ModelCallError
from stateward.runtime.agent import Agent
from stateward.runtime.agent_registry import AgentRegistry
from stateward.runtime.driver import action_specs
from stateward.store.outbox import WebhookStore
from stateward.temporal.messages import (
    NotifyInput,
    ProposeFailure,
    ProposeInput,
    ProposeResult,
    ToolInput,
    ToolResult,
)
from stateward.tools.gateway import ToolGateway

PROPOSE = "stateward.propose"
CALL_TOOL = "stateward.call_tool"
NOTIFY = "stateward.notify"
HEARTBEAT = timedelta(seconds=4)  # an activity silent this long is lost (its worker died): the workflow learns fast
_BEAT_S = 1.0
T = TypeVar("T")
_log = logging.getLogger(__name__)


class Journal:
    """A ``GatewayStore`` over the records the workflow keeps: what a call writes is handed back with its
    outcome (and, for a lost attempt, the workflow records STARTED under the key itself)."""

    def __init__(self, records: Iterable[SideEffectRecord] = (), breakers: Iterable[BreakerState] = ()):
        self._side_effects = {r.idempotency_key: r for r in records}
        self._breakers = {b.tool: b for b in breakers}

    def get_breaker(self, tool: str) -> BreakerState | None:
        """The tool's breaker state, or None if it never tripped."""
        return self._breakers.get(tool)

    def put_breaker(self, state: BreakerState) -> None:
        """Keep a tool's breaker state (handed back with the outcome)."""
        self._breakers[state.tool] = state

    def get_side_effect(self, idempotency_key: str) -> SideEffectRecord | None:
        """The journal record under an idempotency key, or None."""
        return self._side_effects.get(idempotency_key)

    def put_side_effect(self, record: SideEffectRecord) -> None:
        """Keep a journal record; a second key for a grant the run already spent is refused (APPROVAL_CONSUMED)."""
        if record.grant_id is not None and any(
            other.grant_id == record.grant_id and other.idempotency_key != record.idempotency_key
            for other in self._side_effects.values()
        ):
            raise approval_consumed(record)
        self._side_effects[record.idempotency_key] = record

    def records(self) -> list[SideEffectRecord]:
        """Every journal record."""
        return list(self._side_effects.values())

    def breakers(self) -> list[BreakerState]:
        """Every breaker state."""
        return list(self._breakers.values())


class Activities:
    """The activities one worker hosts, over the agents its operator registered.

    Each runs its (blocking) work in a thread while the activity heartbeats: a worker killed mid-call is known
    lost within ``HEARTBEAT``, not after the call's whole timeout."""

    def __init__(self, agents: AgentRegistry, outbox: WebhookStore | None = None):
        """``outbox``: the service store whose webhook subscriptions the notices fan out to (the store ``stateward
        serve --service-db`` names); without one, notices are dropped, and the worker says so when it starts."""
        self._agents = agents
        self._outbox = outbox

    def _agent(self, input_state: ProposeInput | ToolInput) -> Agent:
        return self._agents.build(input_state.state.agent)

    @activity.defn(name=PROPOSE)
    async def propose(self, request: ProposeInput) -> ProposeResult:
        """The controller (and its model) propose the run's next step; nothing is decided here."""
        return await _beating(lambda: self._propose(request))

    def _propose(self, request: ProposeInput) -> ProposeResult:
        agent = self._agent(request)
        ctx = DecisionContext(
            state=request.state,
            observations=ObservationLog(request.observations),
            inventory=agent.inventory,
            actions=action_specs(agent),
        )
        try:
            proposal = agent.controller.decide(ctx)
        except ModelCallError as exc:
            return ProposeResult(failure=ProposeFailure(code=exc.code, message=exc.message, retryable=exc.retryable))
        except StatewardError as exc:
            return ProposeResult(failure=ProposeFailure(code=exc.code, message=exc.message))
        return ProposeResult(
            signal=proposal.signal,
            source=proposal.source,
            visible_actions=sorted(proposal.visible_actions),
            model_usage=list(proposal.model_usage),
            memo=proposal.memo,
            notes=list(proposal.notes),
            wait=proposal.wait,
        )

    @activity.defn(name=CALL_TOOL)
    async def call_tool(self, request: ToolInput) -> ToolResult:
        """One call through the Tool Gateway (every admission stage, the key, the journal, the breaker)."""
        return await _beating(lambda: self._call_tool(request))

    def _call_tool(self, request: ToolInput) -> ToolResult:
        agent = self._agent(request)
        journal = Journal(request.journal, request.breakers)
        outcome = ToolGateway(agent.tools, journal).invoke(request.call, request.ctx)
        return ToolResult(outcome=outcome, journal=journal.records(), breakers=journal.breakers())

    @activity.defn(name=NOTIFY)
    async def notify(self, request: NotifyInput) -> int:
        """The deliveries a step's notices cause, in the outbox (a retry writes none twice: each has the id of its
        event and subscription); the service's dispatcher sends them. How many it wrote."""
        if self._outbox is None:
            _log.debug(
                "no service store: %d webhook notice(s) of %s dropped", len(request.notices), request.state.run_id
            )
            return 0
        outbox = self._outbox
        return await asyncio.to_thread(lambda: outbox.record_notices(request.state, request.notices, time.time()))

    def all(self) -> list[Callable[..., object]]:
        """The activities a worker registers."""
        return [self.propose, self.call_tool, self.notify]


async def _beating(work: Callable[[], T]) -> T:
    """``work`` in a thread, heartbeating until it returns."""
    task = asyncio.ensure_future(asyncio.to_thread(work))
    while True:
        done, _ = await asyncio.wait({task}, timeout=_BEAT_S)
        if done:
            return task.result()
        activity.heartbeat()
