"""The Runtime: starts runs, drives them to their next stop, and continues, pauses, resumes or
cancels them on request — from any process.

Only the holder of a run's lease drives it (see ``driver.py``); the other entry points either act
while nobody holds the lease or leave a request the holder honours at its next step.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import socket
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from stateward.core.budget import Budget
from stateward.core.errors import ErrorCode, RunError, RunNotFoundError, StatewardError
from stateward.core.setback import without_retry
from stateward.core.state import ChildCall, RequestKind, RunState
from stateward.core.status import RunStatus
from stateward.observability.tracing import Telemetry
from stateward.runtime import children, family, transition
from stateward.runtime.agent import Agent
from stateward.runtime.agent_registry import AgentRegistry, process_agents
from stateward.runtime.aio import counterpart
from stateward.runtime.authority import authorize_resume
from stateward.runtime.continuation import Answerer, AnswerResult, answer_request
from stateward.runtime.control import ControlRequest
from stateward.runtime.driver import DRIVABLE, Driver, SetbackObserver, action_specs, default_telemetry
from stateward.runtime.faults import NO_FAULTS, RESUME_BEFORE_LEASE, FaultInjector
from stateward.runtime.fork import fork_run
from stateward.runtime.inspection import RunReads
from stateward.runtime.leases import AsyncLeaseKeeper, LeasePolicy
from stateward.runtime.recovery import AGENT_BUILD_CODES, RecoveryPolicy
from stateward.runtime.resumption import check_resumable, reconcile_in_flight, verify_checkpoint
from stateward.runtime.run_start import new_run, new_run_id
from stateward.store.backends import open_store
from stateward.store.base import Store
from stateward.store.offload import offloaded
from stateward.store.records import Lease

Clock = Callable[[], datetime]
# The async entry points' store calls run on this many threads: the SQLite store serializes on one
# connection (more threads only contend for it), and two keep a PostgreSQL round trip overlapping another.
STORE_THREADS = 2

__all__ = ["Runtime", "action_specs", "new_run_id"]


def _utcnow() -> datetime:
    return datetime.now(UTC)


_mint_run_id = new_run_id  # for methods whose ``new_run_id`` parameter hides the function


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Runtime(RunReads):
    """Starts runs, drives them to their next stop, and answers, pauses, resumes or cancels them.

    ``agents`` is every agent this process may rebuild from a stored run (by registered name); by
    default the process's operator configuration (:func:`~stateward.runtime.agent_registry.process_agents`:
    the built-ins, the ``stateward.agents`` entry points and ``STATEWARD_AGENTS``), loaded on first need.
    Its read methods (listings, events, artifacts, lineage) are :class:`RunReads`' (runtime/inspection.py).
    """

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock = _utcnow,
        lease: LeasePolicy | None = None,
        owner: str | None = None,
        faults: FaultInjector = NO_FAULTS,
        agents: AgentRegistry | None = None,
        recovery: RecoveryPolicy | None = None,
        telemetry: Telemetry | None = None,
    ):
        """``telemetry``: where the runs' spans and metrics go; by default the OpenTelemetry global
        providers (no-ops unless an SDK is configured, e.g. by the CLI from the ``OTEL_*`` variables)."""
        self.store = store
        self.telemetry = telemetry or default_telemetry()
        self._registry = agents
        self.clock = clock
        self.owner = owner or default_owner()
        self.lease_policy = lease or LeasePolicy()
        self.faults = faults
        self.recovery = recovery or RecoveryPolicy()
        self.driver = Driver(store, clock, self.lease_policy, faults, self.recovery, telemetry=self.telemetry)
        self._agents: dict[str, Agent] = {}
        self._origin = self  # a bridged view shares its origin's registry and agents
        self._view: Runtime | None = None
        self._store_pool: ThreadPoolExecutor | None = None

    @classmethod
    def open(cls, url: str = "stateward.db", *, create: bool = True, **kwargs: Any) -> Runtime:
        """A Runtime on the store at ``url`` (a SQLite path or a ``postgresql://`` URL)."""
        return cls(open_store(url, create=create), **kwargs)

    @property
    def agents(self) -> AgentRegistry:
        """The agents this process may rebuild from stored runs."""
        origin = self._origin
        if origin._registry is None:
            origin._registry = process_agents()
        return origin._registry

    def close(self) -> None:
        """Release the store (and the pool that async entry points use); the Runtime is unusable afterwards."""
        origin = self._origin
        if origin._store_pool is not None:
            origin._store_pool.shutdown(wait=True)
        origin.store.close()

    def bridged(self) -> Runtime:
        """This Runtime as its async entry points run it: the same agents, policies and store, with
        store calls from the event loop's thread offloaded to a small thread pool."""
        origin = self._origin
        if origin._view is None:
            pool = origin._store_pool = ThreadPoolExecutor(STORE_THREADS, thread_name_prefix="stateward-store")
            view = copy.copy(origin)
            view.store = offloaded(origin.store, pool)
            view.driver = Driver(
                view.store,
                origin.clock,
                origin.lease_policy,
                origin.faults,
                origin.recovery,
                keeper=AsyncLeaseKeeper,
                telemetry=origin.telemetry,
            )
            origin._view = view
        return origin._view

    # -- starting and reading -------------------------------------------------------------------
    def submit(
        self,
        agent: Agent,
        goal: str,
        *,
        run_id: str | None = None,
        budget: Budget | None = None,
        tenant: str = "default",
    ) -> RunState:
        """Create a RUNNING run without driving it: any worker (or ``drive``) picks it up.

        A worker rebuilds the agent by its registered name (``agent.ref``); a run without any bound
        (steps, model or tool calls, tokens) is refused: nothing is unbounded by default. So are a blank
        or oversized goal, a malformed tenant or run id (INVALID_GOAL, INVALID_TENANT, INVALID_RUN_ID).
        """
        state, started = new_run(agent, goal, run_id=run_id, budget=budget, tenant=tenant)
        self.store.create_run(state, [started])
        self._agents[state.run_id] = agent
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
        """Create a run and drive it to its next stop in this process."""
        state = self.submit(agent, goal, run_id=run_id, budget=budget, tenant=tenant)
        return self.drive(state.run_id)

    def get(self, run_id: str) -> RunState:
        """The run's current state (RunNotFoundError if there is none)."""
        return self.store.load_run(run_id)

    def agent_for(self, state: RunState) -> Agent:
        """The run's agent: the one it was started with in this process, else rebuilt by registered name
        (``AGENT_NOT_REGISTERED`` / ``AGENT_UNAVAILABLE`` otherwise; nothing named by the store is imported)."""
        agent = self._agents.get(state.run_id)
        if agent is None:
            agent = self._agents[state.run_id] = self.agents.build(state.agent)
        return agent

    def migrate(
        self, run_id: str, to_version: str, *, by: str, tenant: str | None = None, drive: bool = False
    ) -> RunState:
        """Move a stopped (WAITING_FOR_USER or PAUSED) run to ``to_version`` of its agent, the version this
        process builds, through the migration that version registered from the run's (see
        runtime/migration.py): recorded as ``agent_migrated`` with ``by``, from and to; an approval bound to
        an action the new version no longer has, or has changed, is closed as stale (the run then decides
        again). Refused by name, nothing written: RUN_NOT_MIGRATABLE, AGENT_MIGRATION_NOT_REGISTERED,
        AGENT_VERSION_UNAVAILABLE, INVALID_MIGRATION, MIGRATION_NOT_NEEDED, LEASE_HELD, CONCURRENT_UPDATE.
        With ``drive``, a run that goes on RUNNING is driven here."""
        from stateward.core.state import AgentRef
        from stateward.runtime.agent_version import check_version
        from stateward.runtime.migration import check_migratable, migrate_write

        check_version(to_version)
        self._visible(run_id, tenant)
        state, seq = self.store.load_run_at(run_id)
        check_migratable(state)
        move = self.agents.migration(state.agent, to_version)
        target = AgentRef(name=state.agent.name, version=to_version, params=state.agent.params)
        agent = self.agents.build(target)
        write = migrate_write(state, agent, move, to=target, by=by, now=self.clock())
        self.store.commit_step(run_id, seq, write)
        self._agents[run_id] = agent
        self.telemetry.metrics.events(write.events)
        if drive and write.state.status in DRIVABLE:
            return self.drive(run_id)
        return write.state

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
        """A new run whose history up to event ``at`` is this run's (shared, not copied), see runtime/fork.py:
        journalled side effects replayed, never run again; usage carried (``budget``: an explicit, recorded
        grant, never lower); grants and later answers not carried; the open request re-opened under a new id.
        FORK_POINT_UNAVAILABLE for an event no state can be rebuilt at; another ``tenant``'s run is
        RUN_NOT_FOUND. With ``drive``, a fork that is RUNNING is driven here."""
        self._visible(run_id, tenant)
        forked, agent, events = fork_run(
            self.store,
            self.agents,
            run_id,
            at=at,
            by=by,
            now=self.clock(),
            new_run_id=new_run_id or _mint_run_id(),
            agent_version=agent_version,
            model_spec=model_spec,
            params=params,
            budget=budget,
            drivers=offline_runtime,
        )
        self._agents[forked.run_id] = agent
        self.telemetry.metrics.events(events)
        if drive and forked.status in DRIVABLE:
            return self.drive(forked.run_id)
        return forked

    def _check_version(self, run_id: str) -> None:
        """Refuse (AGENT_VERSION_UNAVAILABLE, nothing written) to act on a run whose agent this process
        registers only under versions incompatible with the one the run recorded. A process that does not
        register the agent at all records answers for a worker that does, as before."""
        if run_id in self._agents:
            return
        state = self.store.load_run(run_id)
        ref = state.agent
        if ref.version is None or ref.name not in self.agents:
            return
        accepted = self.agents.accepted_versions(ref.name)
        if ref.version not in accepted:
            self.agents.build(ref)  # raises the named refusal, with what this process can build

    # -- driving --------------------------------------------------------------------------------
    def drive(self, run_id: str) -> RunState:
        """Drive the run to its next stop if it is runnable and nobody else holds its lease. A run that calls
        another agent waits while its child run is driven here too, and goes on with its outcome (a child's end
        likewise drives its parent on): the whole tree to its next stop."""
        return self._family(run_id, self._drive_one(run_id))

    def _family(self, run_id: str, state: RunState) -> RunState:
        """After ``run_id`` stopped at ``state``: drive the child it waits on, or the parent its end resumed,
        until the tree stops (a person's request, a pause, the root's end, a run driven elsewhere)."""
        current = state
        while (following := self._hop(current)) is not None:
            current = self._drive_one(following)
        return current if current.run_id == run_id else self.get(run_id)

    def _hop(self, state: RunState) -> str | None:
        """One move between a run and its family: start the child it waits on (or hand back an ended one's
        outcome), or hand its own outcome to its parent. The run to drive next, if any."""
        return family.hop(self.store, self.faults, self._child_agent, state, self.clock())

    def _child_agent(self, name: str, params: dict[str, Any]) -> Agent:
        """A child run's agent: built by registered name, as every process that drives it will."""
        return self.agents.create(name, params)

    def settle_children(self, *, drive: bool = False) -> list[str]:
        """Start each child run a parent waits for but which was never created, and hand each ended child's
        outcome to its parent (a process died between the two writes); with ``drive``, drive them on here."""
        moved = children.settle(self.store, self._child_agent, self.clock())
        if drive:
            for run_id in moved:
                self.drive(run_id)
        return moved

    def _drive_one(self, run_id: str) -> RunState:
        state = self.store.load_run(run_id)
        if state.status not in (RunStatus.RUNNING, RunStatus.PAUSING):
            return state
        lease = self._try_lease(run_id)
        if lease is None:
            return state
        return self.driver.drive(lease, self.agent_for)

    def step(self, run_id: str) -> RunState:
        """One step, for callers who drive runs themselves: one decision (or one honoured pause or
        cancel request), validated and persisted in one transaction, under the run's lease.

        A run that is not RUNNING or PAUSING is returned as it is; a run another process is driving
        is refused with LEASE_HELD (a step is asked for explicitly, unlike ``drive``).
        """
        state = self.store.load_run(run_id)
        if state.status not in (RunStatus.RUNNING, RunStatus.PAUSING):
            return state
        lease = self._try_lease(run_id)
        if lease is None:
            raise RunError(
                f"run {run_id} is being driven by another process",
                code=ErrorCode.LEASE_HELD,
                details={"run_id": run_id},
            )
        return self.driver.drive(lease, self.agent_for, max_steps=1)

    def drive_leased(
        self, lease: Lease, stop: threading.Event | None = None, *, on_setback: SetbackObserver | None = None
    ) -> RunState:
        """Drive a run a worker claimed: an agent it cannot build is recorded on the run and retried later.
        A child it waits on is started (or a parent its end resumes is made runnable), for a claim to drive."""
        state = self.driver.drive(lease, self.agent_for, stop, claimed=True, on_setback=on_setback)
        self._hop(state)
        return state

    def _try_lease(self, run_id: str) -> Lease | None:
        try:
            return self.store.acquire_lease(run_id, self.owner, self.lease_policy.ttl_s)
        except RunError as exc:
            if exc.code == ErrorCode.LEASE_HELD:
                return None
            raise

    # -- answers --------------------------------------------------------------------------------
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
        """Approve the request; with ``drive`` the run continues to its next stop in this process."""
        who = Answerer(by=by, tenant=tenant, roles=roles, digest=digest, drive=drive)
        return self._answer(run_id, request_id, "approved", who, comment)

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
        """Reject the request; the run resumes knowing the action was refused, and the grant is never issued."""
        who = Answerer(by=by, tenant=tenant, roles=roles, digest=digest, drive=drive)
        return self._answer(run_id, request_id, "rejected", who, comment)

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
        """Answer a reconciliation, and only that (WRONG_ANSWER_KIND for any other request): ``happened=True``
        records the call as succeeded by ``by``'s confirmation, ``False`` as NOT_EXECUTED (the tool's retry
        policy then decides). The same answer as ``approve`` / ``reject``, said for what it means."""
        who = Answerer(by=by, tenant=tenant, roles=roles, drive=drive, expects=RequestKind.RECONCILIATION)
        return self._answer(run_id, request_id, "approved" if happened else "rejected", who, comment)

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
        """Answer a request for input with text; with ``drive`` the run continues in this process."""
        who = Answerer(by=by, tenant=tenant, roles=roles, drive=drive)
        return self._answer(run_id, request_id, "replied", who, text)

    def _answer(self, run_id: str, request_id: str, verdict: str, who: Answerer, text: str | None) -> AnswerResult:
        self._check_version(run_id)
        result = answer_request(
            self.store, run_id, request_id, verdict, who, text=text, now=self.clock(), faults=self.faults
        )
        if not who.drive or result.state.status not in DRIVABLE:
            return result
        # A repeated answer drives too: the first may have been recorded by a process that could not.
        try:
            state = self.drive(run_id)
        except StatewardError as exc:
            if exc.code not in AGENT_BUILD_CODES:
                raise
            return dataclasses.replace(result, state=self.get(run_id), not_driven=exc)
        return dataclasses.replace(result, state=state)

    # -- pause / resume / cancel ----------------------------------------------------------------
    def pause(self, run_id: str, *, by: str = "operator", roles: frozenset[str] = frozenset()) -> RunState:
        """RUNNING -> PAUSING -> PAUSED, with a checkpoint, at the holder's next step boundary; the
        transitions record ``by`` whichever process honours the request. A run waiting on a child run it
        called stays waiting while the pause goes down to the child (and its own children)."""
        state = self.store.load_run(run_id)
        if state.status is RunStatus.PAUSED:
            return state
        calls = children.waited_calls(state)
        if calls:
            self._cascade(calls, lambda child: self.pause(child, by=by, roles=roles), ErrorCode.NOT_PAUSABLE)
            return self.get(run_id)
        if state.status not in (RunStatus.RUNNING, RunStatus.PAUSING):
            raise RunError(
                f"run {run_id} is {state.status.value}; only a RUNNING run can pause",
                code=ErrorCode.NOT_PAUSABLE,
                details={"run_id": run_id, "status": state.status.value},
            )
        self.store.set_control(run_id, ControlRequest("pause", by, tuple(sorted(roles))).encode())
        return self.drive(run_id)

    def cancel(self, run_id: str, *, by: str = "operator", roles: frozenset[str] = frozenset()) -> RunState:
        """Any non-terminal run -> CANCELLED; its open requests close and later answers are refused. The
        child run it waits on is cancelled too (and so every descendant); a cancelled child is its parent's
        tool failure (CHILD_RUN_CANCELLED), handed back at once."""
        state = self.store.load_run(run_id)
        if state.status.is_terminal:
            raise RunError(
                f"run {run_id} already ended {state.status.value}",
                code=ErrorCode.RUN_ENDED,
                details={"run_id": run_id, "status": state.status.value},
            )
        calls = children.waited_calls(state)
        ended = self._cancel(run_id, state, by, roles)
        self._cascade(calls, lambda child: self.cancel(child, by=by, roles=roles), ErrorCode.RUN_ENDED)
        return self._family(run_id, ended) if ended.status.is_terminal else ended

    def _cascade(self, calls: Sequence[ChildCall], act: Callable[[str], RunState], done: ErrorCode) -> None:
        """A parent's pause, resume or cancel, passed on to the children it waits on (``done``: a child has
        already stopped that way; a child never started has nothing to pass on to)."""
        for call in calls:
            try:
                act(call.run_id)
            except RunNotFoundError:
                continue
            except RunError as exc:
                if exc.code is not done:
                    raise

    def _cancel(self, run_id: str, state: RunState, by: str, roles: frozenset[str]) -> RunState:
        asked = ControlRequest("cancel", by, tuple(sorted(roles)))
        self.store.set_control(run_id, asked.encode())
        lease = self._try_lease(run_id)
        if lease is None:
            return state  # the holder cancels at its next step
        try:
            run_state, seq = self.store.load_run_at(run_id)
            if run_state.status.is_terminal:
                return run_state
            return self._cancel_now(run_state, seq, lease, asked)
        finally:
            self.store.release_lease(lease)

    def _cancel_now(self, state: RunState, seq: int, lease: Lease, asked: ControlRequest) -> RunState:
        write = transition.cancel(state, by=asked.by, roles=asked.roles, now=self.clock())
        self.store.commit_step(state.run_id, seq, write.stored(), lease)
        return write.state

    def resume(
        self, run_id: str, *, by: str = "operator", tenant: str | None = None, roles: frozenset[str] | None = None
    ) -> RunState:
        """Continue a PAUSED run (or a RUNNING one whose process died) exactly where it stopped.

        Authorizes the resumer first (an authenticated principal passes its ``tenant`` and ``roles``;
        ``None`` is the operator's own path, the CLI's), then loads the latest checkpoint, verifies artifact
        hashes, reconciles side effects left in flight through the gateway's idempotency lookup, keeps the
        budget it had used, records ``run_resumed`` and drives on.
        """
        state = self.store.load_run(run_id)
        authorize_resume(state, tenant=tenant, roles=roles)
        calls = children.waited_calls(state)
        if calls:  # the parent waits: what was paused is its children (or a descendant)
            again = ErrorCode.NOT_RESUMABLE
            self._cascade(calls, lambda child: self.resume(child, by=by, tenant=tenant, roles=roles), again)
            return self.get(run_id)
        check_resumable(state)
        self.faults.point(RESUME_BEFORE_LEASE)
        lease = self._try_lease(run_id)
        if lease is None:
            raise RunError(
                f"run {run_id} is being driven by another process",
                code=ErrorCode.LEASE_HELD,
                details={"run_id": run_id},
            )
        try:
            state, seq = self.store.load_run_at(run_id)
            # Again under the lease: another resumer may have resumed the run (and driven it into a wait
            # or to its end) since the first check; resuming a wait would skip its answer.
            check_resumable(state)
            verify_checkpoint(self.store, state, seq)
            reconciled = reconcile_in_flight(self.store, self.agent_for(state), state, lease.version)
            write = transition.resume(
                state, "resumed", by=by, roles=roles, reconciled=reconciled, setback=without_retry(state.setback)
            )
            self.store.commit_step(run_id, seq, write.stored(), lease)
            self.telemetry.metrics.events(list(write.events))
        except BaseException:
            self.store.release_lease(lease)
            raise
        return self._family(run_id, self.driver.drive(lease, self.agent_for))

    def resume_due(self, *, drive: bool = True) -> list[str]:
        """Resume PAUSED runs whose retry time came (a model outage); with ``drive``, drive them here."""
        from stateward.runtime.expiry import resume_due

        resumed = resume_due(self.store, self.clock())
        if drive:
            for run_id in resumed:
                self.drive(run_id)
        return resumed

    def expire_requests(self, *, drive: bool = True) -> list[str]:
        """Apply each agent's expiry policy to WAITING runs whose request has expired, and fire due
        timers; with ``drive``, runs a timer resumed are driven on here (workers leave that to a claim)."""
        from stateward.runtime.expiry import expire_due

        expired = expire_due(self.store, self.clock(), self.agent_for)
        if drive:
            for run_id, _, outcome in expired:
                if outcome == "timer_fired":
                    self.drive(run_id)
        return [request_id for _, request_id, _ in expired]

    # -- async counterparts (runtime/aio.py): the same code, async models and tools awaited natively -
    asubmit = counterpart(submit)
    astart = counterpart(start)
    adrive = counterpart(drive)
    adrive_leased = counterpart(drive_leased)
    aapprove = counterpart(approve)
    areject = counterpart(reject)
    areconcile = counterpart(reconcile)
    areply = counterpart(reply)
    apause = counterpart(pause)
    acancel = counterpart(cancel)
    aresume = counterpart(resume)
    amigrate = counterpart(migrate)
    afork = counterpart(fork)


def offline_runtime(store: Store, run_id: str, agent: Agent) -> Runtime:
    """A Runtime over a fork's scratch store whose one run is driven by ``agent`` (tools answering from the
    journal), with no telemetry: the re-drive is a reading of the record, not a run."""
    runtime = Runtime(store, agents=AgentRegistry(), telemetry=Telemetry(enabled=False))
    runtime._agents[run_id] = agent
    return runtime
