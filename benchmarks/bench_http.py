"""The HTTP service's costs, each against a baseline measured in the same run.

1. Answer latency: ANSWERS runs wait for an approval; half are approved over HTTP (``POST
   /v1/runs/{id}/requests/approval_001/approve`` with an API key, uvicorn in this process on a loopback
   socket, one keep-alive client), half through the library in-process (``Runtime.approve(drive=False)``,
   the same work the route does minus HTTP, auth and JSON). p50 / p99 of each and their ratio.
2. The inbox at scale: REQUESTS open requests across TENANTS tenants (written through the store's own
   API: a run created, then a step that opens its request). p99 of one tenant's first page
   (``GET /v1/inbox?limit=50``) at REQUESTS, against the same page when the store held 1% of them
   (flatness: the first page must not grow with the inbox), and against ``Runtime.list_requests`` in-process.

3. The run console (``console_pages.py``): ``GET /runs/{id}`` for a 3,000-event run and an 18-item plan run,
   and ``GET /runs`` over the same REQUESTS runs, each p99 against the JSON API's for the same data.

Ratios are printed with their targets, never asserted. ``--requests 5000`` is a quick mode; ``--console``
measures only part 3.
"""

from __future__ import annotations

import argparse
import json
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import uvicorn

import console_pages
from benchkit import machine, machine_line, table
from stateward import Agent, AgentRegistry, ReActController, Runtime, ToolRegistry, tool
from stateward.api import ApiSettings, create_app, mint_key
from stateward.api.app import key_store
from stateward.core.events import EventType, NewEvent
from stateward.core.state import AgentRef, GuardedAction, PendingRequest, RunState
from stateward.core.status import RunStatus
from stateward.store.records import StepWrite
from stateward.store.sqlite import SQLiteStore
from stateward.testing import ScriptedModel

ANSWERS = 400
REQUESTS = 100_000
TENANTS = 100
PAGE = 50
PAGE_SAMPLES = 300
MEASURED = "t042"  # the tenant whose first page is timed
TARGETS = {
    "answer p50 http/library": 5.0,
    "inbox p99 at N / at N/100": 2.0,
    "inbox p99 http/library": 5.0,
    "filtered inbox p99 at N / at N/100": 2.0,
}


@tool(requires_approval=True)
def pay(invoice: str) -> dict[str, str]:
    """Pay an invoice."""
    return {"paid": invoice}


AGENTS = AgentRegistry()


@AGENTS.agent("bench-payer")
def payer() -> Agent:
    def decide(request: Any) -> dict[str, Any]:
        if request.observations:
            return {"type": "FINISH", "reason": "paid"}
        return {"type": "EXECUTE_TOOL", "action": "pay", "args": {"invoice": "INV-1"}}

    return Agent(name="bench-payer", controller=ReActController(ScriptedModel(decide)), tools=ToolRegistry([pay]))


class _Server(uvicorn.Server):
    def install_signal_handlers(self) -> None:
        pass


def serve(runtime: Runtime, settings: ApiSettings | None = None) -> tuple[str, Callable[[], None]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app(runtime, settings or ApiSettings())
    server = _Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=15)

    return f"http://127.0.0.1:{port}", stop


def quantile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e6


def answer_latency(runtime: Runtime, client: httpx.Client, token: str, answers: int) -> dict[str, list[float]]:
    runs = []
    for _ in range(answers):
        state = runtime.submit(runtime.agents.create("bench-payer", {}), "pay", tenant="t000")
        runs.append(runtime.drive(state.run_id).run_id)
    auth = {"Authorization": f"Bearer {token}"}
    samples: dict[str, list[float]] = {"http": [], "library": []}
    for i, run_id in enumerate(runs):  # interleaved, so drift hits both alike
        if i % 2 == 0:
            url = f"/v1/runs/{run_id}/requests/approval_001/approve"
            samples["http"].append(timed(lambda u=url: client.post(u, json={"comment": "ok"}, headers=auth)))  # type: ignore[misc]
        else:
            samples["library"].append(
                timed(
                    lambda r=run_id: runtime.approve(  # type: ignore[misc]
                        r, "approval_001", by="bench", tenant="t000", roles=frozenset({"approver"}), drive=False
                    )
                )
            )
    return samples


def seed_requests(path: Path, start: int, stop: int, tenants: int) -> None:
    """Open requests ``start`` .. ``stop - 1`` through the store's own API (without an fsync per commit:
    seeding is not what is measured). The first ``PAGE + 1`` are the measured tenant's, so its first page
    is full at any size; then tenant ``i % tenants``."""
    store = SQLiteStore(path, synchronous="OFF")
    now = datetime.now(UTC)
    action = GuardedAction(tool="pay", args={"invoice": "INV-1"}, digest="0" * 64)
    for i in range(start, stop):
        run_id = f"run_{i:016x}"
        tenant = MEASURED if i <= PAGE else f"t{i % tenants:03d}"
        state = RunState(run_id=run_id, tenant=tenant, agent=AgentRef(name="bench-payer"), goal="pay")
        store.create_run(state, [NewEvent(type=EventType.RUN_STARTED)])
        pending = PendingRequest(
            request_id="approval_001", question="pay?", state_before=RunStatus.RUNNING, guarded_action=action,
            created_at=now,
        )  # fmt: skip
        waiting = state.model_copy(update={"status": RunStatus.WAITING_FOR_USER, "pending": pending})
        store.commit_step(run_id, 1, StepWrite(state=waiting, events=[NewEvent(type=EventType.PENDING_RECORDED)],
                                               open_request=pending))  # fmt: skip
    store.close()


def inbox_pages(path: Path) -> tuple[dict[str, list[float]], int]:
    """First-page timings of tenant t042's inbox over HTTP and in-process, and how many items a page held."""
    runtime = Runtime(SQLiteStore(path), agents=AGENTS)
    base, stop = serve(runtime)
    _, token = mint_key(key_store(runtime), tenant=MEASURED, name="b", roles=["approver"], now=datetime.now(UTC))
    try:
        with httpx.Client(base_url=base, timeout=30) as client:
            timings = first_page(runtime, client, token, PAGE_SAMPLES)
            page = client.get("/v1/inbox", params={"limit": PAGE}, headers={"Authorization": f"Bearer {token}"})
    finally:
        stop()
        runtime.close()
    return timings, len(page.json()["items"])


def first_page(runtime: Runtime, client: httpx.Client, token: str, samples: int) -> dict[str, list[float]]:
    auth = {"Authorization": f"Bearer {token}"}
    out: dict[str, list[float]] = {"http": [], "library": [], "http filtered": []}
    filtered = {"limit": PAGE, "kind": "approval", "agent": "bench-payer"}  # in the store's query, by index
    for _ in range(samples):
        out["http"].append(timed(lambda: client.get("/v1/inbox", params={"limit": PAGE}, headers=auth)))
        out["library"].append(timed(lambda: runtime.list_requests(tenant=MEASURED, limit=PAGE)))
        out["http filtered"].append(timed(lambda: client.get("/v1/inbox", params=filtered, headers=auth)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--answers", type=int, default=ANSWERS)
    parser.add_argument("--requests", type=int, default=REQUESTS)
    parser.add_argument("--tenants", type=int, default=TENANTS)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.add_argument("--console", action="store_true", help="measure only the run console's pages")
    args = parser.parse_args()
    if args.console:
        console(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        answers_rt = Runtime(SQLiteStore(Path(tmp) / "answers.db"), agents=AGENTS)
        base, stop = serve(answers_rt)
        _, token = mint_key(key_store(answers_rt), tenant="t000", name="b", roles=["approver"], now=datetime.now(UTC))
        with httpx.Client(base_url=base, timeout=30) as client:
            answer = answer_latency(answers_rt, client, token, args.answers)
        stop()
        answers_rt.close()

        path = Path(tmp) / "inbox.db"
        small = PAGE + 1 + args.requests // 100
        t0 = time.perf_counter()
        seed_requests(path, 0, small, args.tenants)
        seeded_s = time.perf_counter() - t0
        at_small, _ = inbox_pages(path)
        t0 = time.perf_counter()
        seed_requests(path, small, args.requests, args.tenants)
        seeded_s += time.perf_counter() - t0
        at_full, page_items = inbox_pages(path)
    report(args, answer, at_small, at_full, small, seeded_s, page_items)


def console(args: argparse.Namespace) -> None:
    """Part 3: the console's pages against the JSON API, over REQUESTS runs across TENANTS tenants."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "console.db"
        seed_requests(path, 0, args.requests, args.tenants)
        plan_run = console_pages.seed_plan_run(path, MEASURED)
        store = SQLiteStore(path)
        long_id = console_pages.long_run(store, MEASURED)
        store.close()
        runtime = Runtime(SQLiteStore(path), agents=AGENTS)
        base, stop = serve(runtime, console_pages.settings())
        try:
            samples = console_pages.measure(runtime, base, MEASURED, plan_run, long_id, timed)
        finally:
            stop()
            runtime.close()
    ratios = {k: quantile(v["page"], 0.99) / quantile(v["json"], 0.99) for k, v in samples.items()}
    if args.json:
        out = {
            k: {p: {"p50": quantile(x, 0.5), "p99": quantile(x, 0.99)} for p, x in v.items()}
            for k, v in samples.items()
        }
        print(json.dumps({"runs": args.requests, "pages_us": out, "ratios": ratios, "target": console_pages.TARGET}))
        return
    rows = [
        (k, p, f"{quantile(x, 0.5):.0f}", f"{quantile(x, 0.99):.0f}") for k, v in samples.items() for p, x in v.items()
    ]
    print(
        table(
            f"run console vs JSON API, {args.requests:,} runs / {args.tenants} tenants (µs)",
            ("page", "path", "p50", "p99"),
            rows,
        )
    )
    target = console_pages.TARGET
    rows = [
        (
            k,
            f"{quantile(samples[k]['json'], 0.99):.0f}",
            f"{v:.2f}x",
            f"<= {target:g}x",
            "ok" if v <= target else "MISSED",
        )
        for k, v in ratios.items()
    ]
    print(table("console p99 page / JSON (same run)", ("page", "floor: json p99 µs", "ratio", "target", ""), rows))
    print(machine_line(machine()), end="")


def report(
    args: argparse.Namespace,
    answer: dict[str, list[float]],
    at_small: dict[str, list[float]],
    at_full: dict[str, list[float]],
    small: int,
    seeded_s: float,
    page_items: int,
) -> None:
    ratios = {
        "answer p50 http/library": quantile(answer["http"], 0.5) / quantile(answer["library"], 0.5),
        "inbox p99 at N / at N/100": quantile(at_full["http"], 0.99) / quantile(at_small["http"], 0.99),
        "inbox p99 http/library": quantile(at_full["http"], 0.99) / quantile(at_full["library"], 0.99),
        "filtered inbox p99 at N / at N/100": quantile(at_full["http filtered"], 0.99)
        / quantile(at_small["http filtered"], 0.99),
    }
    out = {
        "answers": args.answers,
        "requests": args.requests,
        "tenants": args.tenants,
        "answer_us": {k: {"p50": quantile(v, 0.5), "p99": quantile(v, 0.99)} for k, v in answer.items()},
        "inbox_first_page_us": {
            f"{n} open": {k: {"p50": quantile(v, 0.5), "p99": quantile(v, 0.99)} for k, v in d.items()}
            for n, d in ((small, at_small), (args.requests, at_full))
        },
        "page_items": page_items,
        "seed_s": seeded_s,
        "ratios": ratios,
        "targets": TARGETS,
        "machine": machine(),
    }
    if args.json:
        print(json.dumps(out, indent=1))
        return
    rows = [(k, f"{quantile(v, 0.5):.0f}", f"{quantile(v, 0.99):.0f}", len(v)) for k, v in answer.items()]
    print(table("one approval, answered (µs)", ("path", "p50", "p99", "n"), rows))
    rows = [
        (f"{n:,} open / {args.tenants} tenants", k, f"{quantile(v, 0.5):.0f}", f"{quantile(v, 0.99):.0f}")
        for n, d in ((small, at_small), (args.requests, at_full))
        for k, v in d.items()
    ]
    print(table(f"one tenant's first inbox page of {PAGE} (µs)", ("inbox", "path", "p50", "p99"), rows))
    rows = [(k, f"{v:.2f}x", f"<= {TARGETS[k]:g}x", "ok" if v <= TARGETS[k] else "MISSED") for k, v in ratios.items()]
    print(table("ratios (same run)", ("measure", "ratio", "target", ""), rows))
    print(f"seeded {args.requests:,} open requests in {seeded_s:.1f} s; first page held {page_items} items")
    print(machine_line(out["machine"]), end="")


if __name__ == "__main__":
    main()
