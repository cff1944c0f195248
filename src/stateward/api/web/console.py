"""The operator's run console, server-rendered beside the inbox (same sign-in, same tenant and role rules):
``/runs`` lists the tenant's runs with filters and paging; ``/runs/{id}`` shows one run — why it stopped,
its pending request, budget used against every limit, artifacts with a diff between versions, verification
verdicts, handoff packages, the audit of answers, a readable timeline and, for plan runs, the plan's DAG
as server-made SVG that htmx reloads while the run moves. Operators pause, resume and cancel from it.

Everything a run, a tool or a model wrote is rendered through :func:`~stateward.core.inert.inert`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, FastAPI, Form, Query, Request
from fastapi.responses import RedirectResponse, Response

from stateward.api.answers import visible_run
from stateward.api.errors import status_of
from stateward.api.identity import Principal, Role, require
from stateward.api.input_guard import MAX_SQL_INTEGER
from stateward.api.web.dag import BOX_H, BOX_W, draw, plan_of
from stateward.api.web.pages import CONSOLE_PREFIX, PREFIX, InboxPages, csrf_refused
from stateward.api.web.plan_versions import listed_versions, parse_version, plan_at_version
from stateward.api.web.run_rows import run_rows
from stateward.api.web.session import csrf_ok
from stateward.core.errors import ErrorCode, StatewardError, UserError
from stateward.core.events import Event, EventType
from stateward.core.inert import inert
from stateward.core.state import RunState
from stateward.core.status import RunStatus
from stateward.observability.payloads import is_payload_artifact
from stateward.store.paging import DEFAULT_PAGE_SIZE, MAX_SEARCH_CHARS, SEARCH_WINDOW
from stateward.store.records import ArtifactRecord

CONSOLE = CONSOLE_PREFIX
TIMELINE_EVENTS = 50  # a page of the timeline; older pages one link away (``?before=<seq>``)
SCANNED_EVENTS = 400  # verdicts, handoffs and answerers' roles are read from this many recent events
MAX_DIFF_LINES = 400
_CONTROLS = ("pause", "resume", "cancel")


@dataclass(frozen=True)
class Gauge:
    """One budget dimension: used against its limit (None: unbounded)."""

    name: str
    used: int
    limit: int | None


@dataclass(frozen=True)
class ArtifactView:
    """An artifact's versions and the diff of its last two (or the two asked for)."""

    name: str
    versions: tuple[ArtifactRecord, ...]
    diff: tuple[tuple[str, str], ...]  # (css class, line)
    left: int | None
    right: int | None


def gauges(state: RunState) -> list[Gauge]:
    """Used / limit for every dimension the budget bounds."""
    b, u = state.budget, state.usage
    return [
        Gauge("steps", u.steps, b.max_steps),
        Gauge("model calls", u.model_calls, b.max_model_calls),
        Gauge("tool calls", u.tool_attempts, b.max_tool_calls),
        Gauge("input tokens", u.input_tokens, b.max_input_tokens),
        Gauge("output tokens", u.output_tokens, b.max_output_tokens),
    ]


def artifact_views(records: list[ArtifactRecord], pick: dict[str, tuple[int, int]]) -> list[ArtifactView]:
    """Artifacts grouped by name, each with a line diff between two of its versions."""
    by_name: dict[str, list[ArtifactRecord]] = {}
    for rec in records:
        if not is_payload_artifact(rec.name):
            by_name.setdefault(rec.name, []).append(rec)
    views: list[ArtifactView] = []
    for name, recs in sorted(by_name.items()):
        recs.sort(key=lambda r: r.version)
        versions = {r.version: r for r in recs}
        left, right = pick.get(name, (recs[-2].version, recs[-1].version) if len(recs) > 1 else (0, 0))
        diff: list[tuple[str, str]] = []
        if left in versions and right in versions and left != right:
            lines = difflib.unified_diff(
                versions[left].content.splitlines(),
                versions[right].content.splitlines(),
                f"{name}:v{left}",
                f"{name}:v{right}",
                lineterm="",
            )
            for n, line in enumerate(lines):
                if n >= MAX_DIFF_LINES:
                    diff.append(("hint", "…[more diff lines not shown]"))
                    break
                kind = "add" if line.startswith("+") else "del" if line.startswith("-") else "ctx"
                diff.append((kind, inert(line, 500)))
        views.append(ArtifactView(name, tuple(recs), tuple(diff), left or None, right or None))
    return views


def _pick(diff: str | None) -> dict[str, tuple[int, int]]:
    """``name:1..2`` from the query: the versions to compare."""
    if not diff or ":" not in diff or ".." not in diff:
        return {}
    name, _, span = diff.rpartition(":")
    a, _, b = span.partition("..")
    return {name: (int(a), int(b))} if a.isdigit() and b.isdigit() else {}


class Console:
    """Builds the console's pages over the inbox's renderer (its sessions, templates and runtime)."""

    def __init__(self, pages: InboxPages):
        self.pages = pages
        self.runtime = pages.runtime

    def run_context(
        self,
        run_id: str,
        who: Principal,
        diff: str | None = None,
        before: int | None = None,
        plan_version: str | None = None,
    ) -> dict[str, Any]:
        """Everything ``/runs/{id}`` shows; ``before``: the timeline page of the events numbered below it
        (else the newest page); ``plan_version``: the plan version the DAG draws (else the current one)."""
        runtime = self.runtime
        state = visible_run(runtime, run_id, who.tenant)
        last = runtime.store.last_seq(run_id)
        recent = runtime.store.read_events(run_id, max(0, last - SCANNED_EVENTS), limit=SCANNED_EVENTS)
        if before is not None and before > last:
            before = None  # past the newest event: the newest page
        if before is None:
            timeline = recent[-TIMELINE_EVENTS:]
            first = last - len(timeline) + 1
        else:
            first = max(1, before - TIMELINE_EVENTS)
            timeline = runtime.store.read_events(run_id, first - 1, limit=before - first) if before > 1 else []
        kinds = {EventType.REQUEST_ANSWERED: "answers", EventType.VERIFICATION_RECORDED: "verdicts"}
        kinds |= {EventType.HANDOFF_RECORDED: "handoffs"}
        picked: dict[str, list[Event]] = {"answers": [], "verdicts": [], "handoffs": []}
        for event in recent:
            if event.type in kinds:
                picked[kinds[event.type]].append(event)
        roles = {str(e.payload.get("request_id")): e.payload.get("roles") or [] for e in picked.pop("answers")}
        answered = [r for r in runtime.store.list_requests(run_id, open_only=False) if r.answer is not None]
        asked = parse_version(plan_version)
        plan = plan_of(state.memo)
        versions = [] if plan is None else listed_versions(plan[0].version)
        if asked is not None:
            plan = plan_at_version(runtime.store, run_id, state.memo, asked)
        return {
            "run": state,
            "last_seq": last,
            "timeline": timeline,
            "first_shown": first,
            "before": before,
            "timeline_page": TIMELINE_EVENTS,
            "gauges": gauges(state),
            "artifacts": artifact_views(runtime.store.list_artifacts(run_id), _pick(diff)),
            "dag": None if plan is None else draw(*plan),
            "plan_versions": versions,
            "plan_version": asked,  # None: the current plan, which the page follows live
            "live_query": urlencode({k: v for k, v in (("before", before), ("plan_version", asked)) if v is not None}),
            "may_operate": who.has(Role.OPERATOR),
            "answers": answered,  # every answer of the run, from the request records (not a window of events)
            "answer_roles": roles,
            **picked,
        }


def _helpers(pages: InboxPages) -> None:
    env = pages.env
    env.filters["run_rows"] = run_rows
    env.globals["console"] = CONSOLE
    env.globals["box_w"], env.globals["box_h"] = BOX_W, BOX_H


def mount_console(app: FastAPI, pages: InboxPages) -> None:
    """Add ``/runs`` and ``/runs/{id}`` (and its live fragment and controls) to ``app``."""
    _helpers(pages)
    console = Console(pages)
    router = APIRouter(prefix=CONSOLE, include_in_schema=False)
    _list_route(router, console)
    _run_routes(router, console)
    _control_route(router, console)
    app.include_router(router)


def _list_route(router: APIRouter, console: Console) -> None:
    runtime, pages = console.runtime, console.pages

    @router.get("")
    def runs(
        request: Request,
        status: Annotated[str | None, Query(max_length=32)] = None,
        agent: Annotated[str | None, Query(max_length=128)] = None,
        version: Annotated[str | None, Query(max_length=64)] = None,
        q: Annotated[str | None, Query(max_length=MAX_SEARCH_CHARS)] = None,
        cursor: Annotated[str | None, Query(max_length=2048)] = None,
    ) -> Response:
        def build(who: Principal) -> tuple[str, dict[str, Any]]:
            # The form's empty fields are no filter; the search and every filter run in the store's query.
            query = (q or "").strip()
            page = runtime.list_runs(
                status=status or None,
                tenant=who.tenant,
                agent=agent or None,
                version=version or None,
                search=query or None,
                limit=DEFAULT_PAGE_SIZE,
                cursor=cursor,
            )
            shown = {"q": query, "status": status or "", "agent": agent or "", "version": version or ""}
            return "console_runs.html", {
                "rows": page.items,
                "next_cursor": page.next_cursor,
                "next_query": urlencode({**{k: v for k, v in shown.items() if v}, "cursor": page.next_cursor or ""}),
                "statuses": [s.value for s in RunStatus],
                "status_filter": shown["status"],
                "agent": shown["agent"],
                "version": shown["version"],
                "q": query,
                "searched": bool(query),
                "window": SEARCH_WINDOW,
            }

        return pages.viewer_page(request, build)


def _run_routes(router: APIRouter, console: Console) -> None:
    pages = console.pages

    @router.get("/{run_id}")
    def run_page(
        request: Request,
        run_id: str,
        diff: Annotated[str | None, Query(max_length=300)] = None,
        before: Annotated[int | None, Query(ge=1, le=MAX_SQL_INTEGER)] = None,
        plan_version: Annotated[str | None, Query(max_length=40)] = None,
    ) -> Response:
        def build(who: Principal) -> tuple[str, dict[str, Any]]:
            return "console_run.html", console.run_context(run_id, who, diff, before, plan_version)

        return pages.viewer_page(request, build)

    @router.get("/{run_id}/live")
    def live(
        request: Request,
        run_id: str,
        before: Annotated[int | None, Query(ge=1, le=MAX_SQL_INTEGER)] = None,
        plan_version: Annotated[str | None, Query(max_length=40)] = None,
    ) -> Response:
        """The live part (status, DAG, timeline) alone, for htmx to swap in while the run moves."""
        session = pages.sessions.read(request)
        who = pages.sessions.principal(session)
        if who is None:
            return Response(status_code=401)
        try:
            require(who, Role.VIEWER)
            context = console.run_context(run_id, who, before=before, plan_version=plan_version)
        except StatewardError as exc:
            return Response(status_code=status_of(exc))
        return pages.render("_console_live.html", who=who, session=session, **context)


def _control_route(router: APIRouter, console: Console) -> None:
    runtime, pages = console.runtime, console.pages

    @router.post("/{run_id}/control")
    def control(
        request: Request,
        run_id: str,
        action: Annotated[str, Form(max_length=16)] = "",
        csrf_token: Annotated[str | None, Form(max_length=200)] = None,
    ) -> Response:
        session = pages.sessions.read(request)
        who = pages.sessions.principal(session)
        if who is None:
            return RedirectResponse(f"{PREFIX}/login?next={quote(CONSOLE + '/' + run_id, safe='')}", status_code=303)
        try:
            if not csrf_ok(session, csrf_token):
                raise csrf_refused()
            if action not in _CONTROLS:
                raise UserError("the action must be pause, resume or cancel", code=ErrorCode.UNKNOWN_OPTION)
            require(who, Role.OPERATOR)
            visible_run(runtime, run_id, who.tenant)
            if action == "pause":
                runtime.pause(run_id, by=who.subject, roles=who.roles)
            elif action == "resume":
                runtime.resume(run_id, by=who.subject, tenant=who.tenant, roles=frozenset(who.roles))
            else:
                runtime.cancel(run_id, by=who.subject, roles=who.roles)
        except StatewardError as exc:
            return pages.error(exc, who, session)
        return RedirectResponse(f"{CONSOLE}/{quote(run_id, safe='')}?did={action}", status_code=303)


__all__ = ["CONSOLE", "Console", "Gauge", "gauges", "mount_console"]
