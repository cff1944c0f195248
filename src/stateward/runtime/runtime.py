"""The Runtime: starts runs, drives them to their next stop, and continues them after an answer.

The scheduler loop reads only the status: ``while status is RUNNING: decide -> handle -> persist``.
Every step is one store transaction guarded by the run's last event number, so two processes can
never both commit the same step.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from stateward.controllers.base import DecisionContext, Observation, Proposal
from stateward.core.budget import Budget
from stateward.core.decision import DecisionType
from stateward.core.errors import IllegalTransitionError, StatewardError
from stateward.core.events import EventType, NewEvent
from stateward.core.state import RunState
from stateward.core.status import RunStatus, TransitionKind, next_status
from stateward.models.base import ActionSpec
from stateward.runtime.agent import Agent, resolve_agent
from stateward.runtime.continuation import AnswerResult, answer_request
from stateward.runtime.tool_step import execute_tool
from stateward.runtime.transition import Transition, handle
from stateward.store.base import Store, open_store
from stateward.store.records import StepWrite
from stateward.tools.gateway import ToolGateway

Clock = Callable[[], datetime]


def _utcnow() -> datetime:
    return datetime.now(UTC)


def new_run_id() -> str:
    return f"run_{uuid.uuid4().hex[:16]}"


class Runtime:
    def __init__(self, store: Store, *, clock: Clock = _utcnow):
        self.store = store
        self.clock = clock
        self._agents: dict[str, Agent] = {}

    @classmethod
    def open(cls, url: str = "stateward.db") -> Runtime:
        return cls(open_store(url))

    def close(self) -> None:
        self.store.close()

    # -- starting and reading -------------------------------------------------------------------
    def start(self, agent: Agent, goal: str, *, run_id: str | None = None, budget: Budget | None = None) -> RunState:
        """Create a run and drive it to its next stop in this process."""
        state = RunState(run_id=run_id or new_run_id(), agent=agent.ref, goal=goal, budget=budget or agent.budget)
        self.store.create_run(
            state,
            [
                NewEvent(
                    type=EventType.RUN_STARTED,
                    payload={
                        "agent": agent.name,
                        "factory": agent.ref.factory,
                        "params": agent.ref.params,
                        "mode": agent.controller.mode,
                        "goal": goal,
                        "budget": state.budget.model_dump(),
                    },
                )
            ],
        )
        self._agents[state.run_id] = agent
        return self.drive(state.run_id)

    def get(self, run_id: str) -> RunState:
        return self.store.load_run(run_id)

    def agent_for(self, state: RunState) -> Agent:
        agent = self._agents.get(state.run_id)
        if agent is None:
            agent = self._agents[state.run_id] = resolve_agent(state.agent)
        return agent

    # -- the scheduler loop ---------------------------------------------------------------------
    def drive(self, run_id: str) -> RunState:
        """Step the run while it is RUNNING; return the state it stopped in."""
        state, seq = self.store.load_run_at(run_id)
        if state.status is not RunStatus.RUNNING:
            return state
        agent = self.agent_for(state)
        gateway = ToolGateway(agent.tools, self.store)
        observations = self._observations(run_id)
        while state.status is RunStatus.RUNNING:
            state, seq = self.step(state, seq, agent, gateway, observations)
        return state

    def step(
        self,
        state: RunState,
        expected_seq: int,
        agent: Agent,
        gateway: ToolGateway,
        observations: list[Observation],
    ) -> tuple[RunState, int]:
        """One decision: budget check, decide, handle, act, persist — one transaction.

        Returns the new state and the number of its last event.
        """
        exhausted = state.budget.exhausted_by(state.usage)
        if exhausted is not None:
            return self._exhaust(state, exhausted, expected_seq)
        ctx = DecisionContext(
            state=state, observations=observations, inventory=agent.inventory, actions=action_specs(agent)
        )
        try:
            proposal = agent.controller.decide(ctx)
        except StatewardError as exc:
            return self._fail(state, expected_seq, exc.code, exc.message)
        try:
            transition = handle(
                proposal.signal,
                state,
                agent,
                source=proposal.source,
                visible_actions=proposal.visible_actions,
                model_usage=proposal.model_usage,
                now=self.clock(),
            )
        except IllegalTransitionError as exc:
            self._record_illegal(state, expected_seq, exc)
        return self._commit(state, agent, gateway, proposal, transition, observations, expected_seq)

    def _commit(
        self,
        before: RunState,
        agent: Agent,
        gateway: ToolGateway,
        proposal: Proposal,
        transition: Transition,
        observations: list[Observation],
        expected_seq: int,
    ) -> tuple[RunState, int]:
        state = transition.state
        if transition.accepted and proposal.memo is not None:
            state = state.model_copy(update={"memo": proposal.memo})
        events = [*proposal.notes, *transition.events]
        write: dict[str, Any] = {"open_request": transition.pending}
        decision = transition.decision
        if transition.accepted and decision is not None and decision.type is DecisionType.EXECUTE_TOOL:
            done = execute_tool(gateway, agent, state, decision, now=self.clock())
            state = done.state
            events.extend(done.events)
            write.update(artifacts=done.artifacts, attempts=done.attempts, open_request=done.pending)
            observations.append(done.observation)
        if state.status is not RunStatus.RUNNING:
            events.append(_exit_event(state))
        return self._persist(before.run_id, expected_seq, StepWrite(state=state, events=events, **write))

    def _persist(self, run_id: str, expected_seq: int, write: StepWrite) -> tuple[RunState, int]:
        written = self.store.commit_step(run_id, expected_seq, write)
        return write.state, written[-1].seq if written else expected_seq

    def _exhaust(self, state: RunState, dimension: str, expected_seq: int) -> tuple[RunState, int]:
        """Out of budget: a real terminal state, ending with budget_exhausted rather than run_exited."""
        new = _ended(state, "budget_exhausted")
        return self._persist(
            state.run_id,
            expected_seq,
            StepWrite(
                state=new,
                events=[
                    _transition_event(state, new),
                    NewEvent(
                        type=EventType.BUDGET_EXHAUSTED,
                        payload={
                            "dimension": dimension,
                            "usage": state.usage.model_dump(),
                            "budget": state.budget.model_dump(),
                        },
                    ),
                ],
            ),
        )

    def _fail(self, state: RunState, expected_seq: int, code: str, message: str) -> tuple[RunState, int]:
        """A signal source broke (e.g. a provider error): fail the run explicitly, never leave it RUNNING."""
        new = _ended(state, code.lower())
        return self._persist(
            state.run_id,
            expected_seq,
            StepWrite(
                state=new,
                events=[
                    _transition_event(state, new, message=message),
                    _exit_event(new),
                ],
            ),
        )

    def _record_illegal(self, state: RunState, expected_seq: int, exc: IllegalTransitionError) -> RunState:
        """An illegal move is a bug somewhere: record and count it, then raise it to the caller."""
        usage = state.usage.model_copy(update={"illegal_transitions": state.usage.illegal_transitions + 1})
        self._persist(
            state.run_id,
            expected_seq,
            StepWrite(
                state=state.model_copy(update={"usage": usage}),
                events=[NewEvent(type=EventType.ILLEGAL_TRANSITION, payload=exc.to_dict())],
            ),
        )
        raise exc

    def _observations(self, run_id: str) -> list[Observation]:
        return [
            Observation.model_validate(ev.payload["observation"])
            for ev in self.store.read_events(run_id)
            if ev.type is EventType.TOOL_ATTEMPTED
        ]

    # -- continuation ---------------------------------------------------------------------------
    def approve(self, run_id: str, request_id: str, *, by: str, comment: str | None = None) -> AnswerResult:
        return self._answer(run_id, request_id, "approved", by=by, text=comment)

    def reject(self, run_id: str, request_id: str, *, by: str, comment: str | None = None) -> AnswerResult:
        return self._answer(run_id, request_id, "rejected", by=by, text=comment)

    def reply(self, run_id: str, request_id: str, *, by: str, text: str) -> AnswerResult:
        return self._answer(run_id, request_id, "replied", by=by, text=text)

    def _answer(self, run_id: str, request_id: str, verdict: str, *, by: str, text: str | None) -> AnswerResult:
        result = answer_request(self.store, run_id, request_id, verdict, by=by, text=text, now=self.clock())
        if result.already_answered:
            return result
        return AnswerResult(state=self.drive(run_id), already_answered=False, answer=result.answer)


def action_specs(agent: Agent) -> dict[str, ActionSpec]:
    specs: dict[str, ActionSpec] = {}
    for name in agent.tools.names():
        spec = agent.tools.get(name)
        if spec is not None:
            specs[name] = ActionSpec(name=name, description=spec.description, input_schema=spec.input_schema())
    return specs


def _ended(state: RunState, reason: str) -> RunState:
    return state.model_copy(
        update={
            "status": next_status(state.status, TransitionKind.FAIL),
            "terminal_reason": reason,
        }
    )


def _transition_event(before: RunState, after: RunState, **extra: Any) -> NewEvent:
    return NewEvent(
        type=EventType.STATE_TRANSITION,
        payload={
            "state_before": before.status.value,
            "state_after": after.status.value,
            "reason": after.terminal_reason,
            **extra,
        },
    )


def _exit_event(state: RunState) -> NewEvent:
    return NewEvent(
        type=EventType.RUN_EXITED,
        payload={
            "status": state.status.value,
            "terminal_reason": state.terminal_reason,
        },
    )
