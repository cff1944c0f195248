"""The scheduler loop for one leased run: ``while status is RUNNING: decide -> handle -> persist``.

Every write carries the lease's fencing token. Between steps the loop honours a pause or cancel
request; nothing else changes its course, and it exits on any status but RUNNING.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn

from stateward.core.contract import DecisionContext, ObservationLog, Proposal
from stateward.core.decision import ControlDecision, DecisionType, SignalSource
from stateward.core.errors import ErrorCode, IllegalTransitionError, StatewardError
from stateward.core.events import EventType, NewEvent
from stateward.core.interrupt import CallCancelled, pause_token
from stateward.core.setback import Setback, SetbackKind, next_setback
from stateward.core.state import RunState
from stateward.core.status import RunStatus, TransitionKind
from stateward.models.base import ActionSpec, model_attempt_sink, model_call_sink
from stateward.models.errors import ModelCallError
from stateward.observability.payloads import DEFAULT_THRESHOLD as DEFAULT_PAYLOAD_THRESHOLD
from stateward.observability.payloads import MEDIA_TYPE, Offloader, artifact_name
from stateward.observability.tracing import Telemetry
from stateward.runtime import transition
from stateward.runtime import write as write_ops
from stateward.runtime.agent import Agent
from stateward.runtime.control import ControlRequest
from stateward.runtime.faults import NO_FAULTS, FaultInjector
from stateward.runtime.leases import LeaseKeeper, LeasePolicy
from stateward.runtime.observed import observations_of
from stateward.runtime.pause_watch import DEFAULT_POLL_S, PauseWatch
from stateward.runtime.recovery import RecoveryPolicy, describe, error_code, is_store_refusal
from stateward.runtime.tool_step import ToolStep, execute_tool
from stateward.runtime.transition import Transition, cancel, handle, pause
from stateward.runtime.write import Write, accepted_step
from stateward.store.base import Store
from stateward.store.records import Lease, NewArtifact, StepWrite
from stateward.tools.gateway import ToolGateway

if TYPE_CHECKING:
    from stateward.observability.spans import Segment

Clock = Callable[[], datetime]
SetbackObserver = Callable[[Setback, RunState], None]
DRIVABLE = (RunStatus.RUNNING, RunStatus.PAUSING)

log = logging.getLogger("stateward.driver")


@dataclass
class _Head:
    """The run as last committed: what every write builds on."""

    state: RunState
    seq: int
    on_setback: SetbackObserver | None = field(default=None, kw_only=True)  # e.g. a worker's counters
    segment: Segment | None = field(default=None, kw_only=True)  # telemetry of this drive
    keeper: LeaseKeeper | None = field(default=None, kw_only=True)  # the drive's heartbeat

    def setback_recorded(self) -> None:
        if self.on_setback is not None and self.state.setback is not None:
            self.on_setback(self.state.setback, self.state)


@dataclass
class _Run(_Head):
    """What one drive keeps in memory: rebuilt from the store whenever a drive starts."""

    agent: Agent
    gateway: ToolGateway
    actions: Mapping[str, ActionSpec]
    observations: ObservationLog = field(default_factory=ObservationLog)
    watch: PauseWatch | None = None  # notices a pause asked while a step's calls are in flight


class ActionSpecs(Mapping[str, ActionSpec]):
    """The agent's actions, each described (JSON schema and all) only when a model is shown it.

    Generating a schema costs milliseconds; a workflow or plan step that shows no model any action
    should not pay for every tool on every resume.
    """

    def __init__(self, agent: Agent):
        self._tools = agent.tools
        self._names = tuple(agent.tools.names())
        self._built: dict[str, ActionSpec] = {}

    def __getitem__(self, name: str) -> ActionSpec:
        spec = self._built.get(name)
        if spec is None:
            tool = self._tools.get(name) if name in self._names else None
            if tool is None:
                raise KeyError(name)
            spec = self._built[name] = ActionSpec(
                name=name, description=tool.description, input_schema=tool.input_schema()
            )
        return spec

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._names


def action_specs(agent: Agent) -> ActionSpecs:
    """The actions the agent's model may propose (its tools' schemas), as the model request offers them."""
    return ActionSpecs(agent)


class Driver:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        policy: LeasePolicy,
        faults: FaultInjector = NO_FAULTS,
        recovery: RecoveryPolicy | None = None,
        keeper: type[LeaseKeeper] = LeaseKeeper,
        telemetry: Telemetry | None = None,
    ):
        """``keeper``: what renews the lease while a run is driven (a task on the loop for the async Runtime);
        ``telemetry``: where spans and metrics go (default: the OpenTelemetry global providers)."""
        self.keeper = keeper
        self.telemetry = telemetry or default_telemetry()
        self.payload_threshold = DEFAULT_PAYLOAD_THRESHOLD
        self.pause_poll_s = DEFAULT_POLL_S  # how often an in-flight step looks for a pause request
        self.store = store
        self.clock = clock
        self.policy = policy
        self.faults = faults
        self.recovery = recovery or RecoveryPolicy()

    def drive(
        self,
        lease: Lease,
        agent_for: Callable[[RunState], Agent],
        stop: threading.Event | None = None,
        *,
        claimed: bool = False,
        on_setback: SetbackObserver | None = None,
        max_steps: int | None = None,
    ) -> RunState:
        """Step the leased run until it stops (or ``max_steps`` steps were taken); always release the
        lease (unless it was lost).

        ``stop`` (a worker shutting down) ends the loop after the current step, leaving the run
        RUNNING for another worker. A step that raises is recorded on the run and retried later
        (see recovery.py); only a lost lease or a store refusal reaches the caller. An agent this
        process cannot build is a setback for a ``claimed`` run (a worker's) and the caller's error
        otherwise: an answer or a resume from a process without the agent says nothing about workers.
        """
        keeper = self.keeper(self.store, lease, self.policy, self.faults)
        try:
            state, seq = self.store.load_run_at(lease.run_id)
            if state.status not in DRIVABLE:
                return state
            head = _Head(state, seq, on_setback=on_setback, keeper=keeper)
            try:
                run = self._prepare(head, agent_for)
            except Exception as exc:
                if not claimed or is_store_refusal(exc):
                    raise
                if error_code(exc) == ErrorCode.AGENT_VERSION_UNAVAILABLE:
                    # Another build's run (claims skip them; this one slipped past): left exactly as it is.
                    log.warning("run %s: not this build's: %s", head.state.run_id, exc)
                    return head.state
                self._agent_unavailable(head, keeper.lease, exc)
                return head.state
            agent = run.agent
            segment = run.segment = self.telemetry.segment(run.state, agent.agent_ref.name, agent.controller.mode)
            if segment is not None and segment.trace is not None:  # kept with the run: a resume elsewhere continues it
                run.state = run.state.model_copy(update={"trace": segment.trace})
            run.watch = PauseWatch(self.store, run.state.run_id, self.pause_poll_s)
            try:
                self._loop(run, keeper, stop, max_steps)
            finally:
                run.watch.stop()
                if segment is not None:
                    segment.end(run.state)
            return run.state
        finally:
            keeper.stop()

    def _loop(self, run: _Run, keeper: LeaseKeeper, stop: threading.Event | None, max_steps: int | None) -> None:
        taken = 0
        while run.state.status in DRIVABLE and not (stop is not None and stop.is_set()):
            if max_steps is not None and taken >= max_steps:
                break
            taken += 1
            keeper.check()
            try:
                self._next(run, keeper.lease)
            except Exception as exc:
                # A lease lost meanwhile, or handed back by the step's own (committed, final) write:
                # nothing more can be recorded on the run; the next holder decides.
                if is_store_refusal(exc) or keeper.returned:
                    raise
                keeper.check()
                self._crashed(run, keeper.lease, exc)
                break

    def _prepare(self, head: _Head, agent_for: Callable[[RunState], Agent]) -> _Run:
        agent = agent_for(head.state)
        return _Run(
            head.state,
            head.seq,
            agent,
            ToolGateway(agent.tools, self.store),
            action_specs(agent),
            self._observations(head.state),
            on_setback=head.on_setback,
            keeper=head.keeper,
        )

    def _next(self, run: _Run, lease: Lease) -> None:
        """Honour a pause or cancel request, or take one step."""
        control = ControlRequest.decode(self.store.get_control(run.state.run_id))
        if control is not None and control.kind == "cancel":
            self._cancel(run, lease, control)
        elif control is not None or run.state.status is RunStatus.PAUSING:
            self._pause(run, lease, control)
        else:
            self.step(run, lease)

    # -- one step -------------------------------------------------------------------------------
    def step(self, run: _Run, lease: Lease) -> None:
        """One decision: budget check, decide, handle, act, persist — one transaction. A pause asked while a
        model call or a read-only tool call is in flight cancels that call and pauses the run instead."""
        state = run.state
        # A person's reconciliation answer is recorded whatever the budget says (recording it spends nothing; a
        # retry it allows reserves its own call): the run then ends budget_exhausted on the recorded outcome.
        settling = state.next_call is not None and state.next_call.reconciled is not None
        exhausted = None if settling else state.budget.exhausted_by(state.usage)
        if exhausted is not None:
            self._exhaust(run, lease, exhausted)
            return
        token = pause_token.set(None if run.watch is None else run.watch.arm())
        try:
            self._decide_and_act(run, lease)
        except CallCancelled as cancelled:
            self._gave_way(run, lease, cancelled)
        finally:
            pause_token.reset(token)
            if run.watch is not None:
                run.watch.disarm()

    def _decide_and_act(self, run: _Run, lease: Lease) -> None:
        state = run.state
        if state.next_call is not None:
            proposal = approved_call_proposal(state)
        else:
            ctx = DecisionContext(
                state=state, observations=run.observations, inventory=run.agent.inventory, actions=run.actions
            )
            token = model_attempt_sink.set(self._attempt_recorder(run, lease))
            calls = model_call_sink.set(None if run.segment is None else run.segment.model_call)
            try:
                proposal = run.agent.controller.decide(ctx)
            except ModelCallError as exc:
                if exc.retryable:
                    self._model_unavailable(run, lease, exc)
                else:
                    self._end(run, lease, exc.code.lower(), message=exc.message)
                return
            except StatewardError as exc:
                self._end(run, lease, exc.code.lower(), message=exc.message)
                return
            finally:
                model_call_sink.reset(calls)
                model_attempt_sink.reset(token)
        state = run.state  # failed model attempts recorded meanwhile have advanced it
        try:
            decided = handle(
                proposal.signal,
                state,
                run.agent,
                source=proposal.source,
                visible_actions=proposal.visible_actions,
                model_usage=proposal.model_usage,
                now=self.clock(),
                wait=proposal.wait,
            )
        except IllegalTransitionError as exc:
            self._record_illegal(run, lease, exc)
        self._apply(run, lease, proposal, decided)

    def _attempt_recorder(self, run: _Run, lease: Lease) -> Callable[[dict[str, Any]], None]:
        """Make a failed model attempt durable (and counted against the budget) before any retry."""

        def record(attempt: dict[str, Any]) -> None:
            self._persist(run, lease, write_ops.model_attempt_failed(run.state, attempt).stored())

        return record

    def _apply(self, run: _Run, lease: Lease, proposal: Proposal, decided: Transition) -> None:
        write = accepted_step(decided, proposal)
        decision = decided.decision
        acts = decided.kind is TransitionKind.CONTINUE  # a guarded call the Runtime asked about waits
        if not (acts and decided.accepted and decision is not None and decision.type is DecisionType.EXECUTE_TOOL):
            self._persist(run, lease, write.stored())
            return
        try:
            done = self._tool(run, lease, write.state, decision, write.events)
        except CallCancelled as cancelled:
            cancelled.model_usage = tuple(proposal.model_usage)  # the decision's model calls were made
            raise
        self.faults.point("after_tool_before_record")
        run.observations.record(done.observation, done.observed)
        stored = write.then(done.write).stored(artifacts=done.artifacts, attempts=done.attempts)
        self._persist(run, lease, stored, observed=len(write.events))

    def _tool(
        self, run: _Run, lease: Lease, state: RunState, decision: ControlDecision, events: Sequence[NewEvent]
    ) -> ToolStep:
        """The accepted call through the gateway, inside its ``execute_tool`` span (the step's notes first:
        a work item they start is the span's parent)."""
        segment = run.segment
        if segment is None:
            return execute_tool(run.gateway, run.agent, state, decision, now=self.clock(), fencing_token=lease.version)
        segment.observe(events)
        tool = decision.action or ""
        spec = run.agent.tools.get(tool)
        with segment.tool_call(tool, decision.args or {}, None if spec is None else spec.redact) as span:
            done = execute_tool(run.gateway, run.agent, state, decision, now=self.clock(), fencing_token=lease.version)
            if done.outcome is not None:
                span.done(done.outcome, done.outcome.idempotency_key or f"{state.run_id}:{state.usage.steps}")
        return done

    def _persist(self, run: _Head, lease: Lease | None, write: StepWrite, *, observed: int = 0) -> None:
        """Commit one step (fenced by the lease); telemetry sees the events it has not seen yet, once committed.

        The write that stops the drive (the run leaves RUNNING/PAUSING) also releases the lease, in the
        same transaction: the run is claimable once it commits, with no release of its own."""
        write = self._offloaded(run.state.run_id, write)
        keeper = run.keeper if lease is not None and write.state.status not in DRIVABLE else None
        if keeper is not None:
            keeper.handing_back()
            write = write.model_copy(update={"release_lease": True})
        self.faults.point("before_commit")
        run.seq = self.store.commit_step(run.state.run_id, run.seq, write, lease)
        if keeper is not None:
            keeper.handed_back()
        self.faults.point("after_commit")
        run.state = write.state
        if run.segment is not None:
            run.segment.observe(write.events[observed:] if observed else write.events)

    def _offloaded(self, run_id: str, write: StepWrite) -> StepWrite:
        """Events compacted, large values leaving for artifacts named by their hash (observability/payloads.py)."""
        offloader = Offloader(self.payload_threshold)
        events = offloader.events(write.events)
        if not offloader.blobs:
            return write.model_copy(update={"events": events})
        blobs = [
            NewArtifact(name=artifact_name(digest), version=1, content=text, media_type=MEDIA_TYPE)
            for digest, text in offloader.blobs.items()
            if self.store.get_artifact(run_id, artifact_name(digest), 1) is None
        ]
        return write.model_copy(update={"events": events, "artifacts": [*write.artifacts, *blobs]})

    # -- endings and control --------------------------------------------------------------------
    def _exhaust(self, run: _Run, lease: Lease, dimension: str) -> None:
        """Out of budget: a real terminal state, ending with budget_exhausted rather than run_exited."""
        self._persist(run, lease, transition.exhaust(run.state, dimension).stored())

    def _end(self, run: _Run, lease: Lease, reason: str, *, message: str) -> None:
        """A signal source broke (e.g. a provider error): fail the run explicitly, never leave it RUNNING."""
        self._persist(run, lease, transition.end(run.state, TransitionKind.FAIL, reason, message=message).stored())

    def _pause(self, run: _Head, lease: Lease, asked: ControlRequest | None) -> None:
        """Between steps nothing is in flight, so PAUSING settles into PAUSED at once, with a checkpoint;
        both moves name who asked."""
        self._persist(run, lease, self._paused(run.state, asked).stored())

    @staticmethod
    def _paused(state: RunState, asked: ControlRequest | None) -> Write:
        """The pause a request asked for (or a PAUSING run settles into), acknowledging the request."""
        asked = asked or ControlRequest("pause")
        return pause(state, "paused", requested="pause_requested", by=asked.by, roles=asked.roles, clear_control=True)

    def _gave_way(self, run: _Run, lease: Lease, cancelled: CallCancelled) -> None:
        """A call in flight gave way to a pause (or cancel) request: nothing of the step is kept but what was
        spent (the model calls that answered), the cancelled call is recorded - not a failure, no attempt or
        retry charged, its late result discarded - and the run pauses (or is cancelled). A resume decides the
        step again, so the call is made again."""
        spent = write_ops.charge(run.state, cancelled.model_usage)
        control = ControlRequest.decode(self.store.get_control(run.state.run_id))
        note = NewEvent(
            type=EventType.CALL_CANCELLED,
            payload={
                "kind": cancelled.kind,
                "name": cancelled.name,
                "reason": "cancel_requested" if control is not None and control.kind == "cancel" else "pause_requested",
                "after_s": round(cancelled.elapsed_s, 3),
                "late_result": "discarded",
            },
        )
        if control is not None and control.kind == "cancel":
            stop = cancel(spent.state, by=control.by, roles=control.roles, now=self.clock())
        else:
            stop = self._paused(spent.state, control)
        self._persist(run, lease, spent.then(stop).after(note).stored())

    def _cancel(self, run: _Head, lease: Lease, asked: ControlRequest) -> None:
        write = cancel(run.state, by=asked.by, roles=asked.roles, now=self.clock())
        self._persist(run, lease, write.stored())

    # -- setbacks: record, back off, end when the retries are spent (recovery.py) ---------------
    def _crashed(self, run: _Head, lease: Lease, exc: Exception) -> None:
        """An unexpected exception inside a step: recorded, the run held back, or FAILED at the bound."""
        log.warning("run %s: step crashed", run.state.run_id, exc_info=exc)
        kind = SetbackKind.STEP_CRASHED
        setback, event = self._setback(run.state, kind, exc)
        before = run.state.model_copy(update={"setback": setback})
        if setback.retry_at is not None:
            self._persist(run, lease, Write(before, (event,)).stored(not_before=setback.retry_at))
        else:
            ended = transition.end(before, TransitionKind.FAIL, kind.value, message=event.payload["message"])
            self._persist(run, lease, ended.after(event).stored())
        run.setback_recorded()

    def _agent_unavailable(self, run: _Head, lease: Lease, exc: Exception) -> None:
        """A worker cannot build the run's agent: cancel or pause as asked, else back off, then park."""
        control = ControlRequest.decode(self.store.get_control(run.state.run_id))
        if control is not None and control.kind == "cancel":
            self._cancel(run, lease, control)
            return
        if control is not None or run.state.status is RunStatus.PAUSING:
            self._pause(run, lease, control)
            return
        log.warning("run %s: cannot build its agent: %s", run.state.run_id, exc)
        self._hold_or_park(run, lease, SetbackKind.AGENT_UNAVAILABLE, exc)
        run.setback_recorded()

    def _model_unavailable(self, run: _Run, lease: Lease, exc: ModelCallError) -> None:
        """The provider stayed down past the model's own retries: PAUSED until a retry time, never FAILED."""
        self._hold_or_park(run, lease, SetbackKind.MODEL_UNAVAILABLE, exc, at_least_s=exc.retry_after_s or 0.0)
        run.setback_recorded()

    def _hold_or_park(
        self, run: _Head, lease: Lease, kind: SetbackKind, exc: Exception, *, at_least_s: float = 0.0
    ) -> None:
        """Agent: held RUNNING until the retry time. Model: PAUSED with that time (the retry sweep
        resumes it). Past the bound, both PAUSED with no retry time: an operator decides."""
        setback, event = self._setback(run.state, kind, exc, at_least_s=at_least_s)
        before = run.state.model_copy(update={"setback": setback})
        if kind is SetbackKind.AGENT_UNAVAILABLE and setback.retry_at is not None:
            self._persist(run, lease, Write(before, (event,)).stored(not_before=setback.retry_at))
            return
        self._persist(run, lease, park(before, kind.value, event).stored(not_before=setback.retry_at))

    def _setback(
        self, state: RunState, kind: SetbackKind, exc: BaseException, *, at_least_s: float = 0.0
    ) -> tuple[Setback, NewEvent]:
        """The run's next setback of ``kind`` (with a retry time while retries remain) and its event."""
        code = error_code(exc)
        count = (state.setback.count(kind) if state.setback is not None else 0) + 1
        retries = self.recovery.retries(kind)
        retry_at = self.clock() + self.recovery.delay(kind, count, at_least_s) if count <= retries else None
        setback = next_setback(state.setback, kind, code, retry_at)
        event = NewEvent(
            type=EventType(kind.value),
            payload={
                "error": code,
                "message": describe(exc),
                "count": count,
                "retries": retries,
                "retry_at": None if retry_at is None else retry_at.isoformat(),
            },
        )
        return setback, event

    def _record_illegal(self, run: _Run, lease: Lease, exc: IllegalTransitionError) -> NoReturn:
        """An illegal move is a bug somewhere: record and count it, then raise it to the caller."""
        self._persist(run, lease, write_ops.illegal(run.state, exc).stored())
        raise exc

    def _observations(self, state: RunState) -> ObservationLog:
        """Read once per drive; each step then records its own observation (see runtime/observed.py)."""
        return observations_of(self.store, state)


_DEFAULT: list[Telemetry] = []


def default_telemetry() -> Telemetry:
    """One Telemetry on the OpenTelemetry global providers, shared by the Runtimes that are given none."""
    if not _DEFAULT:
        _DEFAULT.append(Telemetry())
    return _DEFAULT[0]


def approved_call_proposal(state: RunState) -> Proposal:
    """The call a person just approved, proposed by the Runtime itself: it runs before any model call."""
    call = state.next_call
    assert call is not None
    decision = ControlDecision(type=DecisionType.EXECUTE_TOOL, action=call.action.tool, args=call.action.args)
    return Proposal(signal=decision, source=SignalSource.RUNTIME, visible_actions=frozenset({call.action.tool}))


def park(state: RunState, reason: str, setback: NewEvent) -> Write:
    """RUNNING (or PAUSING) -> PAUSED with ``reason`` after ``setback``, with a checkpoint; a pending pause or
    cancel request stays for whoever resumes the run to honour."""
    return pause(state, reason).after(setback)
