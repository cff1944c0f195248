"""``TemporalRuntime``: the operations a Runtime offers its operators (start, answer, pause, resume, cancel and
every read), for runs that are Temporal workflows.

Nothing is decided here. A start begins a workflow; an answer, pause, resume or cancel is an Update that the
workflow's validator checks with the stores' own rules and its handler applies with the one transition module.
A refusal comes back as the same named stateward error the stores raise (and left no history behind). Reads go
through :class:`~stateward.temporal.book.TemporalBook`, so they are the Runtime's own read methods.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import WorkflowUpdateFailedError
from temporalio.common import WorkflowIDReusePolicy
from temporalio.converter import PayloadCodec
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from stateward.core.budget import Budget
from stateward.core.errors import (
    ErrorCode,
    RequestRefusedError,
    RunError,
    RunNotFoundError,
    StatewardError,
    UserError,
)
from stateward.core.state import RequestKind, RunState
from stateward.runtime.agent import Agent
from stateward.runtime.agent_registry import AgentRegistry
from stateward.runtime.continuation import AnswerResult, decide_answer
from stateward.runtime.driver import DRIVABLE
from stateward.runtime.inspection import RunReads
from stateward.runtime.run_start import new_run
from stateward.temporal import search
from stateward.temporal.book import QUERY_TIMEOUT, TemporalBook
from stateward.temporal.connection import RPC_TIMEOUT, Connection, not_found
from stateward.temporal.messages import (
    DEFAULT_BOOK_BYTES,
    DEFAULT_HISTORY_EVENTS,
    AnswerInput,
    AnswerReply,
    ControlInput,
    StartRun,
)
from stateward.temporal.target import TemporalTarget, version_queue
from stateward.temporal.workflow import WORKFLOW

# What the server says of an Update to a workflow that has ended, or ended before the Update reached it.
_CLOSED = ("already completed", "aborted by closing workflow")
# The refusals an Update may carry back, by the class the workflow raised: a fixed table, so nothing read from
# the reply chooses code beyond these.
_ERRORS: dict[str, type[StatewardError]] = {
    "RequestRefusedError": RequestRefusedError,
    "RunNotFoundError": RunNotFoundError,
    "RunError": RunError,
    "UserError": UserError,
}


class TemporalRuntime(RunReads):
    """The operator's runtime over a Temporal namespace (``temporal://HOST:PORT/NAMESPACE?task_queue=Q``)."""

    store: TemporalBook

    def __init__(
        self,
        connection: Connection,
        agents: AgentRegistry | None = None,
        *,
        max_history_events: int = DEFAULT_HISTORY_EVENTS,
        query_timeout: timedelta = QUERY_TIMEOUT,
        max_book_bytes: int = DEFAULT_BOOK_BYTES,
    ):
        """``max_history_events``: Temporal events a run's workflow execution gathers before it continues as new;
        ``query_timeout``: how long a read of an open run waits for a worker to answer; ``max_book_bytes``: the
        size of events and artifacts past which a run ends ``book_full`` (Temporal's payload limit is 2 MiB)."""
        self._conn = connection
        self.store = TemporalBook(connection, query_timeout=query_timeout)
        self._registry = agents if agents is not None else AgentRegistry()
        self._max_history_events = max_history_events
        self._max_book_bytes = max_book_bytes

    @classmethod
    def open(
        cls,
        url: str,
        *,
        agents: AgentRegistry | None = None,
        max_history_events: int = DEFAULT_HISTORY_EVENTS,
        query_timeout: timedelta = QUERY_TIMEOUT,
        max_book_bytes: int = DEFAULT_BOOK_BYTES,
        codec: PayloadCodec | None = None,
    ) -> TemporalRuntime:
        """Connect to the Temporal frontend ``url`` names (STORE_UNAVAILABLE if none answers there); ``codec``: what
        payloads pass through (else the one ``STATEWARD_TEMPORAL_CODEC`` names), the same as the workers'."""
        connection = Connection.open(TemporalTarget.parse(url), codec)
        return cls(
            connection,
            agents,
            max_history_events=max_history_events,
            query_timeout=query_timeout,
            max_book_bytes=max_book_bytes,
        )

    @property
    def target(self) -> TemporalTarget:
        """Where the runs live."""
        return self._conn.target

    @property
    def agents(self) -> AgentRegistry:
        """The agents this process can build (to check a start's params here, before a workflow exists)."""
        return self._registry

    agent_registry = agents

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    # -- starting ---------------------------------------------------------------------------------
    def submit(
        self,
        agent: Agent,
        goal: str,
        *,
        run_id: str | None = None,
        budget: Budget | None = None,
        tenant: str = "default",
    ) -> RunState:
        """Start the run's workflow (its id is the run id: RUN_EXISTS if taken) on its agent version's task queue;
        a worker that builds that version drives it."""
        state, started = new_run(agent, goal, run_id=run_id, budget=budget, tenant=tenant)
        now = datetime.now(UTC)
        created = search.memo(state, (), now, now, 1)
        try:
            self._conn.run(
                self._conn.client.start_workflow(
                    WORKFLOW,
                    StartRun(
                        state=state,
                        started=started,
                        max_history_events=self._max_history_events,
                        max_book_bytes=self._max_book_bytes,
                    ),
                    id=state.run_id,
                    task_queue=version_queue(self.target.task_queue, state.agent.name, state.agent.version),
                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                    search_attributes=search.attributes(state),
                    memo=created,
                    rpc_timeout=RPC_TIMEOUT,
                )
            )
        except RPCError as exc:
            if exc.status is RPCStatusCode.ALREADY_EXISTS:
                raise UserError(f"run {state.run_id} exists", code=ErrorCode.RUN_EXISTS) from None
            raise
        except Exception as exc:  # the SDK's WorkflowAlreadyStartedError
            if type(exc).__name__ == "WorkflowAlreadyStartedError":
                raise UserError(f"run {state.run_id} exists", code=ErrorCode.RUN_EXISTS) from None
            raise
        return state

    def start(
        self,
        agent: Agent,
        goal: str,
        *,
        run_id: str | None = None,
        budget: Budget | None = None,
        tenant: str = "default",
    ) -> RunState:
        """Start the run and return it once it stopped (waiting, paused or ended), as ``Runtime.start`` does."""
        state = self.submit(agent, goal, run_id=run_id, budget=budget, tenant=tenant)
        return self.settled(state.run_id)

    def settled(self, run_id: str, *, tenant: str | None = None) -> RunState:
        """The run once it is not RUNNING (a worker drives it meanwhile). An execution that continues as new answers
        its waiters with the run still RUNNING: the next execution is asked in turn."""
        while True:
            state = self._control(run_id, "settled", ControlInput(tenant=tenant))
            if state.status not in DRIVABLE:
                return state

    def drive(self, run_id: str) -> RunState:
        """The run once it stopped, as ``Runtime.drive`` returns it: a worker drives it, this waits (``settled``)."""
        return self.settled(run_id)

    def get(self, run_id: str) -> RunState:
        """The run's current state."""
        return self.store.load_run(run_id)

    def fork(
        self,
        run_id: str,
        *,
        at: int,
        by: str = "operator",
        tenant: str | None = None,
        agent_version: str | None = None,
        model_spec: str | None = None,
        params: dict[str, Any] | None = None,
        budget: Budget | None = None,
        new_run_id: str | None = None,
        drive: bool = False,
    ) -> RunState:
        """Refused by name (STORE_UNSUPPORTED): a fork replays a store's journal into a new run's rows, and a
        Temporal backend keeps neither (docs/deployment.md lists what it does not take)."""
        raise UserError(
            "fork does not run on a Temporal backend: fork a run kept in a store (SQLite or PostgreSQL)",
            code=ErrorCode.STORE_UNSUPPORTED,
            details={"run_id": run_id},
        )

    # -- answers ----------------------------------------------------------------------------------
    def approve(
        self,
        run_id: str,
        request_id: str,
        *,
        by: str,
        comment: str | None = None,
        tenant: str | None = None,
        roles: frozenset[str] = frozenset(),
        digest: str | None = None,
        drive: bool = True,
    ) -> AnswerResult:
        """Approve the exact action the request guards (``digest``, when given, must be its digest)."""
        asked = _asked(request_id, "approved", by, comment, tenant, roles, digest=digest)
        return self._answer(run_id, asked, drive)

    def reject(
        self,
        run_id: str,
        request_id: str,
        *,
        by: str,
        comment: str | None = None,
        tenant: str | None = None,
        roles: frozenset[str] = frozenset(),
        digest: str | None = None,
        drive: bool = True,
    ) -> AnswerResult:
        """Reject the request: the guarded call never runs; the controller sees the refusal."""
        asked = _asked(request_id, "rejected", by, comment, tenant, roles, digest=digest)
        return self._answer(run_id, asked, drive)

    def reconcile(
        self,
        run_id: str,
        request_id: str,
        *,
        happened: bool,
        by: str,
        comment: str | None = None,
        tenant: str | None = None,
        roles: frozenset[str] = frozenset(),
        drive: bool = True,
    ) -> AnswerResult:
        """Answer a reconciliation, and only that (WRONG_ANSWER_KIND otherwise): ``happened`` says whether the call
        whose outcome was lost took effect, as ``Runtime.reconcile``."""
        verdict = "approved" if happened else "rejected"
        asked = _asked(request_id, verdict, by, comment, tenant, roles, expects=RequestKind.RECONCILIATION)
        return self._answer(run_id, asked, drive)

    def reply(
        self,
        run_id: str,
        request_id: str,
        *,
        by: str,
        text: str,
        tenant: str | None = None,
        roles: frozenset[str] = frozenset(),
        drive: bool = True,
    ) -> AnswerResult:
        """Answer a question the run asked."""
        asked = _asked(request_id, "replied", by, text, tenant, roles)
        return self._answer(run_id, asked, drive)

    def _answer(self, run_id: str, asked: AnswerInput, drive: bool) -> AnswerResult:
        try:
            reply: AnswerReply = self._update(run_id, "answer", asked, AnswerReply)
        except _WorkflowClosed:
            return self._answer_ended(run_id, asked)
        state = reply.state
        if drive and not reply.already_answered:
            state = self.settled(run_id, tenant=asked.tenant)
        return AnswerResult(state=state, already_answered=reply.already_answered, answer=reply.answer)

    def _answer_ended(self, run_id: str, asked: AnswerInput) -> AnswerResult:
        """An answer to a run whose workflow ended, judged by the same checks against its final book (which no
        one can change any more): the identical repeat of the answer it got returns that answer, anything else
        is refused as on a store."""
        book = self.store.book(run_id)
        record = next((r for r in book.requests if r.request.request_id == asked.request_id), None)
        write, answer = decide_answer(
            book.state,
            record,
            asked.request_id,
            asked.verdict,
            asked.answerer(),
            text=asked.text,
            now=datetime.now(UTC),
        )
        if write is not None:  # an open request on an ended run: no store leaves one either
            raise _run_ended(book.state)
        return AnswerResult(state=book.state, already_answered=True, answer=answer)

    # -- pause, resume, cancel --------------------------------------------------------------------
    def pause(
        self, run_id: str, *, by: str = "operator", roles: frozenset[str] = frozenset(), tenant: str | None = None
    ) -> RunState:
        """A RUNNING run pauses at its next step boundary; a WAITING one is refused (NOT_PAUSABLE), as on a store."""
        return self._control(run_id, "pause", ControlInput(by=by, roles=sorted(roles), tenant=tenant))

    def resume(
        self, run_id: str, *, by: str = "operator", tenant: str | None = None, roles: frozenset[str] | None = None
    ) -> RunState:
        """PAUSED -> RUNNING, and the run once it stopped again."""
        state = self._control(run_id, "resume", ControlInput(by=by, roles=sorted(roles or ()), tenant=tenant))
        return self.settled(run_id, tenant=tenant) if state.status.value == "RUNNING" else state

    def cancel(
        self, run_id: str, *, by: str = "operator", roles: frozenset[str] = frozenset(), tenant: str | None = None
    ) -> RunState:
        """Cancel the run (at once when stopped, at its next step boundary when RUNNING)."""
        return self._control(run_id, "cancel", ControlInput(by=by, roles=sorted(roles), tenant=tenant))

    def _control(self, run_id: str, update: str, asked: ControlInput) -> RunState:
        try:
            state: RunState = self._update(run_id, update, asked, RunState)
        except _WorkflowClosed:
            ended = self.store.load_run(run_id)
            if asked.tenant is not None and ended.tenant != asked.tenant:
                raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id}) from None
            if update == "settled":
                return ended
            raise _run_ended(ended) from None
        return state

    # -- the round trip ---------------------------------------------------------------------------
    def _update(self, run_id: str, name: str, argument: Any, result_type: type[Any]) -> Any:
        """One Update; a run whose workflow has ended, or ends while the Update is on its way (the server then
        aborts it), is ``_WorkflowClosed``: the caller judges it against the run's final book."""
        handle = self._conn.handle(run_id)
        try:
            return self._conn.run(handle.execute_update(name, argument, result_type=result_type))
        except WorkflowUpdateFailedError as exc:
            raise refusal(exc.cause) from None
        except RPCError as exc:
            if any(said in exc.message for said in _CLOSED):
                raise _WorkflowClosed(run_id) from None
            raise not_found(run_id, exc) from None

    def _ended(self, run_id: str) -> RunError:
        """What an operation on an ended run is on a store: RUN_ENDED (RUN_NOT_FOUND if there is no such run)."""
        return _run_ended(self.store.load_run(run_id))


def _asked(
    request_id: str,
    verdict: str,
    by: str,
    text: str | None,
    tenant: str | None,
    roles: frozenset[str],
    *,
    digest: str | None = None,
    expects: RequestKind | None = None,
) -> AnswerInput:
    """An answer as the workflow's Update takes it."""
    kind = None if expects is None else expects.value
    return AnswerInput(
        request_id=request_id,
        verdict=verdict,
        by=by,
        text=text,
        tenant=tenant,
        roles=sorted(roles),
        digest=digest,
        expects=kind,
    )


class _WorkflowClosed(Exception):
    """The run's workflow has ended: no Update reaches it any more."""


def _run_ended(state: RunState) -> RunError:
    return RunError(
        f"run {state.run_id} is {state.status.value}",
        code=ErrorCode.RUN_ENDED,
        details={"run_id": state.run_id, "status": state.status.value},
    )


def refusal(cause: BaseException | None) -> StatewardError:
    """The stateward error an Update's validator (or handler) raised, rebuilt from its code and details."""
    if isinstance(cause, ApplicationError) and cause.details:
        body, *rest = cause.details
        kind = rest[0] if rest and isinstance(rest[0], str) else "RunError"
        if isinstance(body, dict):
            code = ErrorCode.parse(body.get("code")) or ErrorCode.RUN_ERROR
            error = _ERRORS.get(kind, RunError)
            return error(str(body.get("message", "")), code=code, details=body.get("details") or {})
    return RunError(f"the workflow refused the update: {cause}"[:500], code=ErrorCode.RUN_ERROR)
