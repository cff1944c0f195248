"""Fifty people answer one request at the same moment over real HTTP: one outcome, one execution."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import uvicorn
from tests.api.agents_for_api import PAID, agents

from stateward.api import create_app, mint_key
from stateward.api.app import key_store
from stateward.core.events import EventType
from stateward.runtime.runtime import Runtime
from stateward.store.backends import open_store

ANSWERS = 50


class _Server(uvicorn.Server):
    def install_signal_handlers(self) -> None:
        pass


def served(runtime: Runtime) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = _Server(uvicorn.Config(create_app(runtime), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "race.db")
    return str(request.getfixturevalue("pg_url"))


@pytest.mark.slow
def test_fifty_concurrent_answers_to_one_request_give_one_outcome_and_one_execution(store_url: str) -> None:
    runtime = Runtime(open_store(store_url), agents=agents)
    try:
        invoice = f"INV-RACE-{uuid.uuid4().hex[:8]}"
        state = runtime.submit(runtime.agents.create("payer", {"invoice": invoice}), "pay", tenant="acme")
        run = runtime.drive(state.run_id).run_id
        tokens = [
            mint_key(key_store(runtime), tenant="acme", name=f"p{i}", roles=["approver"], now=datetime.now(UTC))[1]
            for i in range(ANSWERS)
        ]
        url_of = {"approve": f"/v1/runs/{run}/requests/approval_001/approve"}
        url_of["reject"] = url_of["approve"].replace("approve", "reject")
        barrier = threading.Barrier(ANSWERS)
        for base in served(runtime):
            with httpx.Client(base_url=base, timeout=60, limits=httpx.Limits(max_connections=ANSWERS)) as client:

                def answer(i: int) -> httpx.Response:
                    verdict = "approve" if i % 2 == 0 else "reject"
                    barrier.wait()
                    return client.post(
                        url_of[verdict],
                        json={"comment": f"from p{i}"},
                        headers={"Authorization": f"Bearer {tokens[i]}"},
                    )

                with ThreadPoolExecutor(ANSWERS) as pool:
                    responses = list(pool.map(answer, range(ANSWERS)))
        outcomes = Counter(
            (r.status_code, r.json().get("already_answered", r.json().get("error", {}).get("code"))) for r in responses
        )
        assert outcomes[(200, False)] == 1, outcomes  # exactly one answer was recorded
        assert outcomes[(409, "REQUEST_ALREADY_ANSWERED")] == ANSWERS - 1, outcomes  # everyone else is told so
        [winner] = [r.json() for r in responses if r.status_code == 200]
        [recorded] = [e.payload for e in runtime.events(run) if e.type is EventType.REQUEST_ANSWERED]
        assert (recorded["by"], recorded["verdict"]) == (winner["by"], winner["verdict"])
        final = runtime.drive(run)
        expected = ("COMPLETED", 1) if winner["verdict"] == "approved" else ("FAILED", 0)
        assert (final.status.value, PAID.count(invoice)) == expected
        assert final.usage.approvals_consumed == expected[1]
    finally:
        runtime.close()
