"""What the service asks of the runs' backend, and where its own records live.

The routes, the inbox and the console call these operations only, so they serve a
:class:`~stateward.runtime.runtime.Runtime` on a store and a ``TemporalRuntime`` alike. The service's
own records (API keys, signed-out sessions, webhook subscriptions and their outbox) are a store's
tables: on a store backend they sit beside the runs; a Temporal backend keeps no such tables, so the
operator names a store for them (``--service-db``).
"""

from __future__ import annotations

from typing import Any, Protocol

from stateward.core.budget import Budget
from stateward.core.events import Event
from stateward.core.state import RequestKind, RunState
from stateward.core.status import RunStatus
from stateward.runtime.agent import Agent
from stateward.runtime.agent_registry import AgentRegistry
from stateward.runtime.continuation import AnswerResult
from stateward.store.base import Store
from stateward.store.paging import RequestPage, RequestRow, RunPage


class RunBackend(Protocol):
    """The runtime operations the service uses; every decision stays in the backend's Runtime."""

    @property
    def store(self) -> Store: ...

    @property
    def agents(self) -> AgentRegistry: ...

    def submit(
        self,
        agent: Agent,
        goal: str,
        *,
        run_id: str | None = None,
        budget: Budget | None = None,
        tenant: str = "default",
    ) -> RunState: ...

    def drive(self, run_id: str) -> RunState:
        """The run once it stopped (waiting, paused or ended)."""
        ...

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
    ) -> RunState: ...

    def get(self, run_id: str) -> RunState: ...

    def list_runs(
        self,
        *,
        status: RunStatus | str | None = None,
        tenant: str | None = None,
        agent: str | None = None,
        limit: int = ...,
        cursor: str | None = None,
        version: str | None = None,
        search: str | None = None,
    ) -> RunPage: ...

    def list_requests(
        self,
        *,
        run_id: str | None = None,
        tenant: str | None = None,
        open_only: bool = True,
        limit: int = ...,
        cursor: str | None = None,
        role: str | None = None,
        kind: RequestKind | str | None = None,
        agent: str | None = None,
    ) -> RequestPage: ...

    def request_chain(self, row: RequestRow) -> list[str]: ...

    def events(
        self, run_id: str, after: int = 0, *, limit: int = ..., tenant: str | None = None, content: bool = False
    ) -> list[Event]: ...

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
    ) -> AnswerResult: ...

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
    ) -> AnswerResult: ...

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
    ) -> AnswerResult: ...

    def pause(self, run_id: str, *, by: str = "operator", roles: frozenset[str] = frozenset()) -> RunState: ...

    def resume(
        self, run_id: str, *, by: str = "operator", tenant: str | None = None, roles: frozenset[str] | None = None
    ) -> RunState: ...

    def cancel(self, run_id: str, *, by: str = "operator", roles: frozenset[str] = frozenset()) -> RunState: ...

    def close(self) -> None: ...
