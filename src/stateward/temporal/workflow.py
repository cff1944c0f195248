"""A run as a Temporal workflow: stateward's driver loop, the Runtime deciding every step inside it.

Each step is the driver's (``runtime/driver.py``): a pause or cancel asked is honoured at the step boundary;
a run out of budget ends ``budget_exhausted``; the controller proposes (an activity); ``transition.handle``
decides, here, with the workflow's clock; an accepted call goes through the gateway (an activity) and
``tool_step.execute_tool`` makes the step's write from its outcome. The workflow keeps what a store would:
the state, the events, the requests and their answers, the side-effect journal.

A tool activity is never retried by Temporal (``maximum_attempts=1``): an attempt that did not report back may
have had its effect, so the workflow journals STARTED under the call's idempotency key and asks the gateway
again, which reconciles (the tool's lookup, else a person) before anything could run twice.

A step that makes the run wait or end starts the notify activity beside the loop (never holding the run up):
it writes the step's webhook notices to the service store's outbox, retried, each delivery under the id of its
event and subscription, so a retry doubles nothing. The workflow ends, or continues as new, once they are written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from stateward.core.canonical import sha256_hex
    from stateward.core.contract import Proposal, SignalFailure
    from stateward.core.decision import DecisionType
    from stateward.core.errors import ErrorCode, IllegalTransitionError, RunError, StatewardError
    from stateward.core.events import Event, EventType, NewEvent
    from stateward.core.journal import BreakerState, SideEffectRecord, SideEffectStatus
    from stateward.core.state import RunState
    from stateward.core.status import RunStatus, TransitionKind
    from stateward.runtime import transition
    from stateward.runtime import write as write_ops
    from stateward.runtime.agent import Agent
    from stateward.runtime.continuation import decide_answer
    from stateward.runtime.control import ControlRequest
    from stateward.runtime.driver import DRIVABLE, approved_call_proposal, park
    from stateward.runtime.expiry import expiry_write, retry_write
    from stateward.runtime.observed import observations_in
    from stateward.runtime.tool_step import execute_tool
    from stateward.runtime.write import Write
    from stateward.store.outbox import notices_of
    from stateward.store.records import ArtifactRecord, NewArtifact, PendingRecord, RequestAnswer
    from stateward.temporal import search
    from stateward.temporal.activities import CALL_TOOL, HEARTBEAT, NOTIFY, PROPOSE
    from stateward.temporal.agents import hosted_agents
    from stateward.temporal.captured import Answered, Asked, Capture, key_of
    from stateward.temporal.messages import (
        AnswerInput,
        AnswerReply,
        Book,
        ControlInput,
        ControlKind,
        NotifyInput,
        ProposeInput,
        ProposeResult,
        StartRun,
        ToolInput,
        ToolResult,
    )
    from stateward.tools.types import CallContext, ToolCall, ToolOutcome

WORKFLOW = "stateward.run"
PROPOSE_TIMEOUT = timedelta(minutes=5)
# A proposal has no side effect: a lost one is asked again; an agent this worker cannot build is not retried.
PROPOSE_RETRY = RetryPolicy(
    maximum_attempts=5,
    non_retryable_error_types=["AGENT_NOT_REGISTERED", "AGENT_VERSION_UNAVAILABLE", "AGENT_UNAVAILABLE"],
)
NO_RETRY = RetryPolicy(maximum_attempts=1)  # a tool call is never retried blind
TOOL_MARGIN_S = 10.0  # beyond the tool's own timeouts and retries, before an attempt counts as lost
LOST_ATTEMPTS = 5  # lost attempts of one call the gateway reconciles before the step is given up
NOTIFY_TIMEOUT = timedelta(seconds=30)
# The outbox write has no effect but its rows (a retry writes none twice): retried about a quarter of an hour.
NOTIFY_RETRY = RetryPolicy(maximum_interval=timedelta(seconds=60), maximum_attempts=20)
NOTIFY_PATCH = "stateward.notify"  # histories from before notices replay without the activity
# A ``settled`` waiter is answered before the execution continues as new (it asks the next one): histories from
# before this replay as they ran.
SETTLE_PATCH = "stateward.settle-before-continue"
BOOK_PATCH = "stateward.book-full"  # histories from before the book's bound replay as they ran


@workflow.defn(name=WORKFLOW)
class RunWorkflow:
    """One run, driven to its end; queries read its book, Updates answer and control it."""

    @workflow.init
    def __init__(self, start: StartRun) -> None:
        now = workflow.now()
        book = start.book or Book(state=start.state, created_at=now, updated_at=now)  # a new run: an empty book
        self._state: RunState = book.state
        self._events: list[Event] = list(book.events)
        self._requests: dict[str, PendingRecord] = {r.request.request_id: r for r in book.requests}
        self._artifacts: list[ArtifactRecord] = list(book.artifacts)
        self._journal: dict[str, SideEffectRecord] = {r.idempotency_key: r for r in book.journal}
        self._breakers: dict[str, BreakerState] = {b.tool: b for b in book.breakers}
        asked = ControlRequest.decode(book.control)
        self._control: tuple[ControlKind, str, tuple[str, ...]] | None = (
            None if asked is None else (asked.kind, asked.by, asked.roles)
        )
        self._book_bytes = sum(_bytes_of(e) for e in self._events) + sum(len(a.content) for a in self._artifacts)
        self._max_book_bytes = start.max_book_bytes
        self._created_at = book.created_at
        self._updated_at = book.updated_at
        self._agent: Agent | None = None
        self._attributes: list[Any] = search.updates(self._state)  # the workflow started with these
        self._memo: dict[str, Any] = {}
        self._notifying: list[asyncio.Task[Any]] = []
        self._continuing = False  # this execution is about to continue as new: a ``settled`` waiter is answered
        if start.book is None:
            self._append([start.started])

    # -- the loop -------------------------------------------------------------------------------
    @workflow.run
    async def run(self, start: StartRun) -> Book:
        """Step while RUNNING, wait while suspended; once the run ended, its book is the workflow's result (readable
        with no worker up)."""
        while True:
            if self._history_full(start):
                # A caller waiting for the run to settle (``start``, an answer that drives) holds a handler open
                # that would never finish while the run is RUNNING: answer it now; it asks the next execution.
                self._continuing = workflow.patched(SETTLE_PATCH)
                await workflow.wait_condition(workflow.all_handlers_finished)
                await self._notified()
                workflow.continue_as_new(start.model_copy(update={"book": self.book()}))
            await self._until_work()
            if self._state.status.is_terminal:
                await workflow.wait_condition(workflow.all_handlers_finished)
                await self._notified()
                return self.book()
            control = self._control
            if control is not None and control[0] == "cancel":
                self._commit(transition.cancel(self._state, by=control[1], roles=control[2], now=workflow.now()))
            elif control is not None or self._state.status is RunStatus.PAUSING:
                by, roles = (control[1], control[2]) if control is not None else (None, ())
                self._commit(
                    transition.pause(
                        self._state, "paused", requested="pause_requested", by=by, roles=roles, clear_control=True
                    )
                )
            else:
                await self._step()

    @staticmethod
    def _history_full(start: StartRun) -> bool:
        """Whether this execution's history is long enough to go on as a new one (never for an ended run)."""
        info = workflow.info()
        return info.is_continue_as_new_suggested() or info.get_current_history_length() >= start.max_history_events

    async def _until_work(self) -> None:
        """Wait until the run can be driven or has ended; meanwhile a request that expires, or a retry time that
        comes, is applied when it is due (a workflow timer: what a store's sweep does)."""
        while not self._drivable():
            due = self._due_at()
            if due is None:
                await workflow.wait_condition(self._drivable)
                return
            wait = (due - workflow.now()).total_seconds()
            if wait > 0:
                try:
                    await workflow.wait_condition(self._drivable, timeout=wait)
                    return
                except TimeoutError:
                    pass
            if not self._drivable() and self._due_at() == due:
                self._apply_due()

    def _drivable(self) -> bool:
        return self._state.status in DRIVABLE or self._state.status.is_terminal

    def _due_at(self) -> datetime | None:
        state = self._state
        if state.status is RunStatus.WAITING_FOR_USER and state.pending is not None:
            return state.pending.expires_at
        if state.status is RunStatus.PAUSED and state.setback is not None:
            return state.setback.retry_at
        return None

    def _apply_due(self) -> None:
        if self._state.status is RunStatus.PAUSED:
            self._commit(retry_write(self._state))
            return
        write, _ = expiry_write(self._state, workflow.now(), lambda _state: self._agent_of())
        self._commit(write)

    def _agent_of(self) -> Agent:
        if self._agent is None:
            self._agent = hosted_agents().build(self._state.agent)
        return self._agent

    async def _step(self) -> None:
        state = self._state
        settling = state.next_call is not None and state.next_call.reconciled is not None
        exhausted = None if settling else state.budget.exhausted_by(state.usage)
        if exhausted is not None:
            self._commit(transition.exhaust(state, exhausted))
            return
        full = None if settling else self._book_full(state)
        if full is not None:
            self._commit(full)
            return
        agent = self._agent_of()
        proposal = approved_call_proposal(state) if state.next_call is not None else await self._propose(state)
        if proposal is None:
            return
        try:
            decided = transition.handle(
                proposal.signal,
                state,
                agent,
                source=proposal.source,
                visible_actions=proposal.visible_actions,
                model_usage=proposal.model_usage,
                now=workflow.now(),
                wait=proposal.wait,
            )
        except IllegalTransitionError as exc:
            illegal = write_ops.illegal(state, exc)
            self._commit(illegal.then(transition.end(illegal.state, TransitionKind.FAIL, "illegal_transition")))
            return
        write = write_ops.accepted_step(decided, proposal)
        decision = decided.decision
        acts = decided.kind is TransitionKind.CONTINUE and decided.accepted
        if not (acts and decision is not None and decision.type is DecisionType.EXECUTE_TOOL):
            self._commit(write)
            return
        try:
            execute_tool(Capture(), agent, write.state, decision, now=workflow.now())
            raise AssertionError("execute_tool made no call")  # pragma: no cover - every accepted call reaches it
        except Asked as asked:
            call, ctx = asked.call, asked.ctx
        outcome = await self._call(write.state, call, ctx, agent)
        if outcome is None:
            lost = f"{LOST_ATTEMPTS} attempts of {call.tool} did not report back (each reconciled before the next)"
            self._commit(
                write.then(transition.end(write.state, TransitionKind.FAIL, "tool_attempts_lost", message=lost))
            )
            return
        done = execute_tool(Answered(outcome), agent, write.state, decision, now=workflow.now())
        self._keep(done.artifacts)
        self._commit(write.then(done.write))

    def _book_full(self, state: RunState) -> Write | None:
        """The run's end when one more step could carry its book past Temporal's payload limit (a workflow task
        that cannot be completed is retried forever): named, its book whole and readable."""
        if self._book_bytes < self._max_book_bytes or not workflow.patched(BOOK_PATCH):
            return None
        message = f"the run's events and artifacts hold {self._book_bytes} bytes (limit {self._max_book_bytes})"
        return transition.end(state, TransitionKind.FAIL, "book_full", message=message)

    def _keep(self, artifacts: Sequence[NewArtifact]) -> None:
        """The artifacts a tool step wrote, as a store keeps them."""
        for art in artifacts:
            self._book_bytes += len(art.content)
            self._artifacts.append(
                ArtifactRecord(
                    run_id=self._state.run_id,
                    name=art.name,
                    version=art.version,
                    content=art.content,
                    media_type=art.media_type,
                    sha256=sha256_hex(art.content),
                    created_at=workflow.now(),
                )
            )

    async def _propose(self, state: RunState) -> Proposal | None:
        """The controller's proposal (an activity), or None once its failure was recorded."""
        observed = observations_in(self._events, state) if state.usage.steps else []
        try:
            result: ProposeResult = await workflow.execute_activity(
                PROPOSE,
                ProposeInput(state=state, observations=list(observed)),
                result_type=ProposeResult,
                start_to_close_timeout=PROPOSE_TIMEOUT,
                heartbeat_timeout=HEARTBEAT,
                retry_policy=PROPOSE_RETRY,
            )
        except ActivityError as exc:
            # No proposal came back (its attempts lost, or this build cannot make the agent): PAUSED with the
            # reason, nothing decided; an operator resumes it where a worker can.
            cause = exc.cause
            code = cause.type if isinstance(cause, ApplicationError) and cause.type else "STEP_CRASHED"
            event = NewEvent(type=EventType.STEP_CRASHED, payload={"error": code, "message": str(cause or exc)[:500]})
            self._commit(park(state, EventType.STEP_CRASHED.value, event))
            return None
        failure = result.failure
        if failure is not None:
            if failure.retryable:  # the provider stayed down past the model's own retries: PAUSED, never FAILED
                event = NewEvent(
                    type=EventType.MODEL_UNAVAILABLE, payload={"error": failure.code, "message": failure.message}
                )
                self._commit(park(state, "model_unavailable", event))
            else:
                self._commit(transition.end(state, TransitionKind.FAIL, failure.code.lower(), message=failure.message))
            return None
        signal = (
            result.signal if result.signal is not None else SignalFailure(code=ErrorCode.EMPTY_OUTPUT, message="none")
        )
        return Proposal(
            signal=signal,
            source=result.source,
            visible_actions=frozenset(result.visible_actions),
            model_usage=tuple(result.model_usage),
            memo=result.memo,
            notes=tuple(result.notes),
            wait=result.wait,
        )

    async def _call(self, state: RunState, call: ToolCall, ctx: CallContext, agent: Agent) -> ToolOutcome | None:
        """The call through the gateway; a lost attempt is journalled STARTED and reconciled by the next one."""
        spec = agent.tools.get(call.tool)
        timeout_s = TOOL_MARGIN_S + (0.0 if spec is None else spec.timeout_s * max(1, spec.retry.max_attempts))
        for lost in range(LOST_ATTEMPTS):
            try:
                result: ToolResult = await workflow.execute_activity(
                    CALL_TOOL,
                    ToolInput(
                        state=state,
                        call=call,
                        ctx=ctx,
                        journal=list(self._journal.values()),
                        breakers=list(self._breakers.values()),
                    ),
                    result_type=ToolResult,
                    start_to_close_timeout=timedelta(seconds=timeout_s),
                    heartbeat_timeout=HEARTBEAT,
                    retry_policy=NO_RETRY,
                )
            except ActivityError:
                # The attempt did not report back: its effect may have happened. Never run it blind again.
                if spec is not None and spec.side_effect:
                    key = key_of(spec, call, ctx)
                    if key is not None and key not in self._journal:
                        self._journal[key] = SideEffectRecord(
                            idempotency_key=key,
                            run_id=ctx.run_id,
                            tool=call.tool,
                            status=SideEffectStatus.STARTED.value,
                            updated_at=workflow.now(),
                        )
                await workflow.sleep(timedelta(seconds=min(30, 2**lost)))
                continue
            self._journal.update({r.idempotency_key: r for r in result.journal})
            self._breakers.update({b.tool: b for b in result.breakers})
            return result.outcome
        return None

    # -- the book ---------------------------------------------------------------------------------
    def _append(self, events: Sequence[NewEvent]) -> None:
        now = workflow.now()
        start = len(self._events)
        appended = [
            Event(run_id=self._state.run_id, seq=start + i + 1, type=e.type, payload=e.payload, at=now)
            for i, e in enumerate(events)
        ]
        self._events.extend(appended)
        self._book_bytes += sum(_bytes_of(e) for e in appended)

    def _commit(self, write: Write) -> None:
        """What a store's ``commit_step`` does, in the workflow: the state, the events, the requests, the notices."""
        before = len(self._events)
        self._state = write.state
        self._append(write.events)
        self._notify(notices_of(write.state, before, write.events))
        if write.open_request is not None:
            request = write.open_request
            self._requests[request.request_id] = PendingRecord(run_id=self._state.run_id, request=request)
        for answer in (write.close_request, write.close_all_requests):
            if answer is not None:
                self._close(answer)
        if write.clear_control:
            self._control = None
        self._updated_at = workflow.now()
        self._publish()

    def _notify(self, notices: list[Any]) -> None:
        """Start writing the step's notices to the outbox, beside the loop (the run does not wait for it)."""
        if not notices or not workflow.patched(NOTIFY_PATCH):
            return
        self._notifying = [task for task in self._notifying if not task.done()]
        self._notifying.append(
            workflow.start_activity(
                NOTIFY,
                NotifyInput(state=self._state, notices=notices),
                result_type=int,
                start_to_close_timeout=NOTIFY_TIMEOUT,
                retry_policy=NOTIFY_RETRY,
            )
        )

    async def _notified(self) -> None:
        """Every notice written (or its retries spent: logged, as a store's dispatcher logs a failed delivery)."""
        for task in self._notifying:
            try:
                await task
            except ActivityError as exc:
                workflow.logger.warning("webhook notices of %s not recorded: %s", self._state.run_id, exc.cause)
        self._notifying = []

    def _publish(self) -> None:
        """What a listing reads without asking the workflow: its search attributes and its memo (the run's row,
        its open requests), each written only when it changed."""
        attributes = search.updates(self._state)
        if attributes != self._attributes:
            self._attributes = attributes
            workflow.upsert_search_attributes(attributes)
        memo = search.memo(self._state, self._requests.values(), self._created_at, self._updated_at, len(self._events))
        if memo != self._memo:
            self._memo = memo
            workflow.upsert_memo(memo)

    def _close(self, answer: RequestAnswer) -> None:
        for request_id, record in list(self._requests.items()):
            if record.answer is None and answer.request_id in ("*", request_id):
                closed = answer if answer.request_id != "*" else answer.model_copy(update={"request_id": request_id})
                self._requests[request_id] = record.model_copy(update={"answer": closed})

    @workflow.query(name="book")
    def book(self) -> Book:
        """The run's state, events, requests and artifacts."""
        return Book(
            state=self._state,
            events=self._events,
            requests=list(self._requests.values()),
            artifacts=self._artifacts,
            journal=list(self._journal.values()),
            breakers=list(self._breakers.values()),
            control=None if self._control is None else ControlRequest(*self._control).encode(),
            created_at=self._created_at,
            updated_at=self._updated_at,
        )

    @workflow.query(name="state")
    def state(self) -> RunState:
        """The run's current state."""
        return self._state

    @workflow.update(name="settled")
    async def settled(self, asked: ControlInput) -> RunState:
        """The run once it stopped (waiting, paused or ended): what ``start`` and an answer that drives return; or
        still RUNNING when this execution continues as new (the caller asks the next one)."""
        await workflow.wait_condition(lambda: self._state.status not in DRIVABLE or self._continuing)
        return self._state

    @settled.validator
    def _check_settled(self, asked: ControlInput) -> None:
        _refused(lambda: self._visible(asked))

    # -- answers ----------------------------------------------------------------------------------
    def _decide(self, answer: AnswerInput) -> tuple[Write | None, RequestAnswer]:
        record = self._requests.get(answer.request_id)
        return decide_answer(
            self._state,
            record,
            answer.request_id,
            answer.verdict,
            answer.answerer(),
            text=answer.text,
            now=workflow.now(),
        )

    @workflow.update(name="answer")
    def answer(self, answer: AnswerInput) -> AnswerReply:
        """Record the answer and resume the run (its loop takes the next step); an identical repeat does nothing."""
        write, recorded = self._decide(answer)
        if write is None:
            return AnswerReply(state=self._state, already_answered=True, answer=recorded)
        self._commit(write)
        return AnswerReply(state=self._state, already_answered=False, answer=recorded)

    @answer.validator
    def _check_answer(self, answer: AnswerInput) -> None:
        """The same checks as every store's answer path; a refusal is rejected here and leaves no history."""
        _refused(lambda: self._decide(answer))

    # -- pause, resume, cancel --------------------------------------------------------------------
    def _visible(self, asked: ControlInput) -> None:
        if asked.tenant is not None and asked.tenant != self._state.tenant:
            raise RunError(f"no run {self._state.run_id}", code=ErrorCode.RUN_NOT_FOUND)

    @workflow.update(name="pause")
    def pause(self, asked: ControlInput) -> RunState:
        """A RUNNING run pauses at its next step boundary (PAUSED, with a checkpoint); PAUSED is left as it is."""
        if self._state.status is RunStatus.RUNNING:
            self._control = ("pause", asked.by, tuple(sorted(asked.roles)))
        return self._state

    @pause.validator
    def _check_pause(self, asked: ControlInput) -> None:
        def check() -> None:
            self._visible(asked)
            if self._state.status not in (RunStatus.RUNNING, RunStatus.PAUSING, RunStatus.PAUSED):
                raise RunError(
                    f"run {self._state.run_id} is {self._state.status.value}; only a RUNNING run can pause",
                    code=ErrorCode.NOT_PAUSABLE,
                    details={"run_id": self._state.run_id, "status": self._state.status.value},
                )

        _refused(check)

    @workflow.update(name="resume")
    def resume(self, asked: ControlInput) -> RunState:
        """PAUSED -> RUNNING, recorded with who; the loop takes the next step. Usage carries on, never reset."""
        if self._state.status is RunStatus.PAUSED:
            self._commit(transition.resume(self._state, "resumed", by=asked.by, roles=asked.roles))
        return self._state

    @resume.validator
    def _check_resume(self, asked: ControlInput) -> None:
        def check() -> None:
            self._visible(asked)
            if self._state.status not in (RunStatus.PAUSED, RunStatus.RUNNING):
                raise RunError(
                    f"run {self._state.run_id} is {self._state.status.value}; only a PAUSED run resumes",
                    code=ErrorCode.NOT_RESUMABLE,
                    details={"run_id": self._state.run_id, "status": self._state.status.value},
                )

        _refused(check)

    @workflow.update(name="cancel")
    def cancel(self, asked: ControlInput) -> RunState:
        """A stopped run is cancelled at once (its open requests close); a RUNNING one at its next step boundary."""
        if self._state.status in DRIVABLE:
            self._control = ("cancel", asked.by, tuple(sorted(asked.roles)))
        else:
            self._commit(transition.cancel(self._state, by=asked.by, roles=asked.roles, now=workflow.now()))
        return self._state

    @cancel.validator
    def _check_cancel(self, asked: ControlInput) -> None:
        def check() -> None:
            self._visible(asked)
            if self._state.status.is_terminal:
                raise RunError(
                    f"run {self._state.run_id} is {self._state.status.value}",
                    code=ErrorCode.RUN_ENDED,
                    details={"run_id": self._state.run_id, "status": self._state.status.value},
                )

        _refused(check)


def _refused(check: Callable[[], Any]) -> None:
    """Run ``check``; a stateward refusal becomes the Update's rejection, carrying its code and details."""
    try:
        check()
    except StatewardError as exc:
        details = (exc.to_dict(), type(exc).__name__)  # the client rebuilds the same error from these
        raise ApplicationError(exc.message, *details, type=exc.code, non_retryable=True) from None


def _bytes_of(event: Event) -> int:
    """An event's size as the book carries it (its JSON)."""
    return len(event.model_dump_json())


__all__ = ["WORKFLOW", "RunWorkflow"]
