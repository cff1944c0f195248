"""The Runtime's read side: listings, a run's events, artifacts, lineage and place in its tree.

Reads need only the store, so they are a class of their own that :class:`~stateward.runtime.runtime.Runtime`
extends; nothing here writes or moves a status. Every listing is a bounded page. ``tenant`` scopes a read the
way the service does: another tenant's run looks exactly like an unknown one (RUN_NOT_FOUND).
"""

from __future__ import annotations

from typing import Any

from stateward.core.errors import ErrorCode, RunError, RunNotFoundError, UserError
from stateward.core.events import Event
from stateward.core.state import RequestKind, RunState
from stateward.core.status import RunStatus
from stateward.observability.payloads import is_payload_artifact, resolve
from stateward.runtime import children
from stateward.store.base import Store
from stateward.store.paging import DEFAULT_PAGE_SIZE, RequestPage, RequestRow, RunPage, page_size
from stateward.store.records import ArtifactRecord

DEFAULT_EVENT_PAGE = 1000
MAX_EVENT_PAGE = 10_000


class RunReads:
    """What a Runtime answers from its store alone (the Runtime is one; so is any class with a ``store``)."""

    store: Store

    def lineage(self, run_id: str, *, tenant: str | None = None) -> dict[str, Any]:
        """Where a run came from and what was forked from it: ``forked_from``, ``at_seq``, ``forks``."""
        self._visible(run_id, tenant)
        state = self.store.load_run(run_id)
        forks = self.store.forks_of(run_id)
        if tenant is not None:
            forks = [f for f in forks if self.store.load_run(f).tenant == tenant]
        return {
            "forked_from": None if state.lineage is None else state.lineage.forked_from,
            "at_seq": None if state.lineage is None else state.lineage.at_seq,
            "forks": forks,
        }

    def list_runs(
        self,
        *,
        status: RunStatus | str | None = None,
        tenant: str | None = None,
        agent: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
        cursor: str | None = None,
        version: str | None = None,
        search: str | None = None,
    ) -> RunPage:
        """Runs newest first, filters combined; pass ``page.next_cursor`` back (same filters) for the next page.

        A run created between two pages never shifts them: each run is listed once. INVALID_CURSOR,
        INVALID_PAGE_SIZE (1 to 1000) or INVALID_FILTER (an unknown status, a search over 200 characters)
        for a bad argument. ``version``: runs of that agent version. ``search``: runs whose id starts with it
        or whose goal holds it (see ``Store.page_runs``: a searched page may hold fewer than ``limit``).
        """
        status_value = None if status is None else status.value if isinstance(status, RunStatus) else status
        return self.store.page_runs(
            status=status_value,
            tenant=tenant,
            agent=agent,
            limit=limit,
            cursor=cursor,
            version=version,
            search=search,
        )

    def list_requests(
        self,
        *,
        run_id: str | None = None,
        tenant: str | None = None,
        open_only: bool = True,
        limit: int = DEFAULT_PAGE_SIZE,
        cursor: str | None = None,
        role: str | None = None,
        kind: RequestKind | str | None = None,
        agent: str | None = None,
    ) -> RequestPage:
        """Pending requests (open ones unless ``open_only=False``) in (run_id, request_id) order, a page at a time.

        Naming a run that does not exist (or is another tenant's) is RUN_NOT_FOUND, not an empty inbox.
        ``role``: only the requests that role answers (their tool's or agent's ``approver_role``); ``kind``:
        only requests of that kind (INVALID_FILTER for no RequestKind); ``agent``: only those of that
        agent's runs. The filters run in the store's query: a page is full while more match.
        """
        if run_id is not None:
            self._visible(run_id, tenant)
        kind_value = kind.value if isinstance(kind, RequestKind) else kind
        return self.store.page_requests(
            run_id=run_id,
            tenant=tenant,
            open_only=open_only,
            limit=limit,
            cursor=cursor,
            kind=kind_value,
            agent=agent,
            role=role,
        )

    def chain(self, run_id: str, *, tenant: str | None = None) -> list[str]:
        """The runs above ``run_id`` in its tree, from the root down to its parent (empty for a run no run
        started): where a child's request came from, as the inbox shows it."""
        state = self.store.load_run(run_id)  # one read: the inbox asks this for every item of a page
        if tenant is not None and state.tenant != tenant:
            raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})
        return children.chain(self.store, state)

    def request_chain(self, row: RequestRow) -> list[str]:
        """:meth:`chain` of a listed request's run, drawn from the row's parent: a root run's requests (nearly
        every page's) need no read at all, a child's one read per run above it."""
        if row.parent_run_id is None:
            return []
        return [*self.chain(row.parent_run_id), row.parent_run_id]

    def children(self, run_id: str, *, tenant: str | None = None) -> list[RunState]:
        """The child runs ``run_id``'s calls started, in the order its calls made them."""
        self._visible(run_id, tenant)
        return children.children_of(self.store, run_id)

    def events(
        self,
        run_id: str,
        after: int = 0,
        *,
        limit: int = DEFAULT_EVENT_PAGE,
        tenant: str | None = None,
        content: bool = False,
    ) -> list[Event]:
        """The run's events numbered above ``after``, in order, at most ``limit`` (1 to 10,000).

        The last event's ``seq`` is the ``after`` of the next call; an empty list means none yet. Large
        values are stored as references (a hash and a size); ``content=True`` puts them back.
        """
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise UserError(f"after must be an event number >= 0, not {after!r}"[:200], code=ErrorCode.INVALID_CURSOR)
        size = page_size(limit, MAX_EVENT_PAGE)
        self._visible(run_id, tenant)
        events = self.store.read_events(run_id, after, size)
        if not content:
            return events

        def fetch(name: str) -> str | None:
            found = self.store.get_artifact(run_id, name, 1)
            return None if found is None else found.content

        return [e.model_copy(update={"payload": resolve(e.payload, fetch)}) for e in events]

    def artifacts(self, run_id: str, *, tenant: str | None = None) -> list[ArtifactRecord]:
        """Every version of every artifact of the run, by name then version (offloaded event payloads
        are left out: fetch one by the name its reference gives)."""
        self._visible(run_id, tenant)
        return [a for a in self.store.list_artifacts(run_id) if not is_payload_artifact(a.name)]

    def artifact(
        self, run_id: str, name: str, version: int | None = None, *, tenant: str | None = None
    ) -> ArtifactRecord:
        """One artifact version (the latest without ``version``); ARTIFACT_NOT_FOUND if there is none."""
        self._visible(run_id, tenant)
        found = self.store.get_artifact(run_id, name, version)
        if found is None:
            which = name if version is None else f"{name}:v{version}"
            raise RunError(
                f"run {run_id} has no artifact {which}",
                code=ErrorCode.ARTIFACT_NOT_FOUND,
                details={"run_id": run_id, "name": name, "version": version},
            )
        return found

    def _visible(self, run_id: str, tenant: str | None) -> None:
        """RUN_NOT_FOUND unless the run exists and, with ``tenant``, belongs to it."""
        if tenant is None:
            self.store.last_seq(run_id)
        elif self.store.load_run(run_id).tenant != tenant:
            raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})
