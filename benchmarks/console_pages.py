"""The run console's pages for ``bench_http``: ``GET /runs/{id}`` for a 3,000-event run and for the
payment-migration demo's 18-item plan run, and ``GET /runs`` with 100,000 runs across tenants, each p99
against the JSON API's answer for the same data in the same run (``/v1/runs/{id}`` plus the page of
``TIMELINE_EVENTS`` events the timeline shows; ``/v1/runs`` with the page's size and search)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx

from stateward import Runtime
from stateward.api import ApiSettings, mint_key
from stateward.api.app import key_store
from stateward.api.web.console import TIMELINE_EVENTS
from stateward.api.web.session import SessionSettings
from stateward.core.events import EventType, NewEvent
from stateward.core.state import AgentRef, RunState
from stateward.store.paging import DEFAULT_PAGE_SIZE
from stateward.store.records import StepWrite
from stateward.store.sqlite import SQLiteStore
from stateward_demos.payment.agent import build_agent, goal

LONG_RUN_EVENTS = 3000
SAMPLES = 200
TARGET = 3.0


def long_run(store: SQLiteStore, tenant: str) -> str:
    """A run of LONG_RUN_EVENTS events (300 steps of ten), written through the store's own API."""
    run_id = "run_long_events"
    state = RunState(run_id=run_id, tenant=tenant, agent=AgentRef(name="bench-payer"), goal="a long run")
    store.create_run(state, [NewEvent(type=EventType.RUN_STARTED)])
    seq = 1
    for step in range(1, LONG_RUN_EVENTS // 10 + 1):
        events = [
            NewEvent(type=EventType.TOOL_ATTEMPTED, payload={"tool": "pay", "step": step, "n": i}) for i in range(10)
        ]
        events = events[:-1] if seq + 10 > LONG_RUN_EVENTS else events
        seq = store.commit_step(run_id, seq, StepWrite(state=state, events=events))
    return run_id


def sign_in(client: httpx.Client, token: str) -> None:
    form = client.get("/inbox/login").text
    found = re.search(r'name="csrf_token" value="([^"]+)"', form)
    assert found is not None
    client.post("/inbox/login", data={"api_key": token, "csrf_token": found.group(1), "next": "/runs"})


def settings() -> ApiSettings:
    """Plain-HTTP cookies: the loopback benchmark has no TLS."""
    return ApiSettings(sessions=SessionSettings(secure_cookies=False))


def measure(
    runtime: Runtime,
    base: str,
    tenant: str,
    plan_run: str,
    long_id: str,
    timed: Callable[[Callable[[], object]], float],
) -> dict[str, dict[str, list[float]]]:
    """Interleaved samples of each page and its JSON counterpart."""
    _, token = mint_key(key_store(runtime), tenant=tenant, name="b", roles=["viewer"], now=datetime.now(UTC))
    auth = {"Authorization": f"Bearer {token}"}
    out: dict[str, dict[str, list[float]]] = {}
    with httpx.Client(base_url=base, timeout=60) as page, httpx.Client(base_url=base, timeout=60, headers=auth) as api:
        sign_in(page, token)
        shown = TIMELINE_EVENTS  # the page's timeline: the newest page of events, older ones a link away
        tail = f"after={LONG_RUN_EVENTS - shown}&limit={shown}"
        cases = {
            f"/runs/{{id}} {LONG_RUN_EVENTS} events": (
                f"/runs/{long_id}",
                [f"/v1/runs/{long_id}", f"/v1/runs/{long_id}/events?{tail}"],
            ),
            "/runs/{id} 18-item plan": (
                f"/runs/{plan_run}",
                [f"/v1/runs/{plan_run}", f"/v1/runs/{plan_run}/events?limit={shown}"],
            ),
            "/runs (first page)": ("/runs", [f"/v1/runs?limit={DEFAULT_PAGE_SIZE}"]),
            # A search every run matches, and one none does (it reads the tenant's whole window).
            "/runs?q=pay (search)": ("/runs?q=pay", [f"/v1/runs?limit={DEFAULT_PAGE_SIZE}&q=pay"]),
            "/runs?q=absent (search)": ("/runs?q=absent", [f"/v1/runs?limit={DEFAULT_PAGE_SIZE}&q=absent"]),
        }
        for name, (html, json_urls) in cases.items():
            assert page.get(html).status_code == 200, html
            samples: dict[str, list[float]] = {"page": [], "json": []}
            for _ in range(SAMPLES):
                samples["page"].append(timed(lambda u=html: page.get(u)))  # type: ignore[misc]
                samples["json"].append(timed(lambda us=json_urls: [api.get(u) for u in us]))  # type: ignore[misc]
            out[name] = samples
    return out


def seed_plan_run(path: Path, tenant: str) -> str:
    runtime = Runtime(SQLiteStore(path))
    try:
        return runtime.start(build_agent(), goal().objective, tenant=tenant).run_id
    finally:
        runtime.close()


__all__ = ["LONG_RUN_EVENTS", "SAMPLES", "TARGET", "long_run", "measure", "seed_plan_run", "settings"]
