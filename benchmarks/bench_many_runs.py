"""Many waiting runs in one store: how long the first page of the inbox listings takes.

A store holds ``--runs`` runs (100,000 by default), every one WAITING_FOR_USER with an open request,
on SQLite and on PostgreSQL (a throwaway server from the installed binaries, as bench_workers starts;
``--sqlite-only`` skips it). Timed, interleaved, 200 times each: the first page (100 rows) of
``stateward runs list --status WAITING_FOR_USER`` (``Runtime.list_runs``) and of ``stateward
requests list`` (``Runtime.list_requests``), the store calls those commands make. Target: p99 <= 50 ms
for each. Also printed: the stored bytes per waiting run (SQLite: the file after a WAL checkpoint;
PostgreSQL: the stateward tables with their indexes and TOAST).

Seeding (not timed against the target, its time printed): ``TEMPLATES`` runs are made by a real
Runtime (a ReAct agent that calls one tool, then asks a person and stops), so every row has the shape
a real waiting run has; the rest are copies of those rows made in SQL (the documented fast path: each
copy gets new ids, its snapshot names its own run id, keys and ordering columns stay valid), in
batches of one transaction each. Making 100,000 runs through the Runtime would take minutes on SQLite
and far longer on PostgreSQL, and measure seeding rather than listing.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchkit import Target, emit, machine, stored_bytes, table, targets_table
from stateward import Agent, Budget, ReActController, RunStatus, Runtime, ToolRegistry, tool
from stateward.core.state import is_run_suspended
from stateward.models.base import ModelRequest
from stateward.models.scripted import ScriptedModel
from stateward.store.sqlite import SQLiteStore

HERE = Path(__file__).resolve().parent
RUNS = 100_000
TEMPLATES = 100
CALLS = 200
TARGET_MS = 50.0
COPIES_PER_TX = 50
# Per table: the columns a copy changes (everything else is copied as it is).
RENAMED = ("run_id", "attempt_id", "idempotency_key")  # made unique with the copy's suffix
CLEARED = ("lease_owner", "lease_expires_at", "control")  # a copy is nobody's


@tool(description="Look up the invoice a person must approve.")
def lookup(invoice: str) -> dict[str, Any]:
    return {"invoice": invoice, "amount_cents": 120_000, "vendor": "ACME GmbH"}


def policy(request: ModelRequest) -> dict[str, Any]:
    if not request.observations:
        return {"type": "EXECUTE_TOOL", "action": "lookup", "args": {"invoice": "INV-2026-0042"}}
    return {"type": "REQUEST_USER_INPUT", "question": "Invoice INV-2026-0042 of ACME GmbH: 1,200.00 EUR. Pay it?"}


def waiting_agent() -> Agent:
    return Agent(
        name="invoice-approval",
        controller=ReActController(ScriptedModel(policy)),
        tools=ToolRegistry([lookup]),
        budget=Budget(max_steps=10),
    )


def make_templates(runtime: Runtime, count: int) -> list[str]:
    ids = []
    for i in range(count):
        state = runtime.start(waiting_agent(), f"approve invoice {i}")
        assert state.status is RunStatus.WAITING_FOR_USER, state.status
        ids.append(state.run_id)
    return ids


# -- copying rows in SQL ---------------------------------------------------------------------------------
class Dialect:
    """What differs between the stores when rows are copied: placeholders, tables, how to list columns."""

    def __init__(self, kind: str, execute: Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]):
        self.kind = kind
        self.execute = execute
        self.mark = "?" if kind == "sqlite" else "%s"

    def columns(self, table: str) -> list[str]:
        if self.kind == "sqlite":
            return [str(r[1]) for r in self.execute(f"PRAGMA table_info({table})", ())]
        rows = self.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name=%s"
            " AND table_schema=current_schema() ORDER BY ordinal_position",
            (table,),
        )
        return [str(r[0]) for r in rows]

    def tables(self) -> list[str]:
        if self.kind == "sqlite":
            rows = self.execute("SELECT name FROM sqlite_master WHERE type='table'", ())
        else:
            rows = self.execute(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema=current_schema() AND table_type='BASE TABLE'",  # not the events view
                (),
            )
        return [str(r[0]) for r in rows]


def copy_statements(d: Dialect, templates: Sequence[str]) -> list[tuple[str, int]]:
    """One INSERT ... SELECT per table holding run rows; each takes the copy's suffix ``n`` times."""
    marks = ",".join([d.mark] * len(templates))
    statements = []
    by_key = d.kind == "sqlite"
    for name in ["runs", *sorted(set(d.tables()) - {"runs"})]:
        cols = d.columns(name)
        if name == "runs":
            cols = [c for c in cols if c != "run_key"]
        keyed = "run_key" in cols and name != "runs"
        if "run_id" not in cols and not keyed:
            continue
        exprs, uses = [], 0
        for c in cols:
            if c in RENAMED:
                exprs.append(f"t.{c} || {d.mark}")
                uses += 1
            elif c == "snapshot":
                exprs.append(f"replace(t.snapshot, t.run_id, t.run_id || {d.mark})")
                uses += 1
            elif c in CLEARED:
                exprs.append("NULL")
            elif c == "run_key":
                exprs.append("c.run_key")
            else:
                exprs.append(f"t.{c}")
        if keyed and by_key:  # SQLite's run_key tables: the copy's key, found by its new run_id
            source = (
                f" FROM {name} AS t JOIN runs AS o ON o.run_key=t.run_key"
                f" JOIN runs AS c ON c.run_id = o.run_id || {d.mark} WHERE o.run_id IN ({marks})"
            )
            exprs = [e.replace("t.run_id", "o.run_id") for e in exprs]
            uses += 1
        else:
            source = f" FROM {name} AS t WHERE t.run_id IN ({marks})"
        statements.append((f"INSERT INTO {name}({', '.join(cols)}) SELECT {', '.join(exprs)}{source}", uses))
    return statements


def seed(d: Dialect, templates: Sequence[str], copies: int, commit: Callable[[], None]) -> None:
    statements = copy_statements(d, templates)
    for i in range(copies):
        suffix = f"_{i:06d}"
        for sql, uses in statements:
            d.execute(sql, (*([suffix] * uses), *templates))
        if (i + 1) % COPIES_PER_TX == 0:
            commit()
    commit()


# -- timing ----------------------------------------------------------------------------------------------
def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def time_listings(runtime: Runtime, calls: int) -> dict[str, dict[str, float]]:
    listings: dict[str, Callable[[], Any]] = {
        "runs list --status WAITING_FOR_USER": lambda: runtime.list_runs(status=RunStatus.WAITING_FOR_USER),
        "requests list": lambda: runtime.list_requests(),
    }
    for fn in listings.values():  # warm: the first call of each reads its index pages from disk
        assert len(fn().items) == 100
    newest = runtime.list_runs(status=RunStatus.WAITING_FOR_USER, limit=1).items[0].run_id
    copy = runtime.get(newest)  # a copied run reads back as the run it is
    assert copy.run_id == newest and is_run_suspended(copy), copy
    samples: dict[str, list[float]] = {name: [] for name in listings}
    for _ in range(calls):
        for name, fn in listings.items():
            t0 = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - t0) * 1000)
    return {
        name: {"median_ms": statistics.median(s), "p99_ms": p99(s), "max_ms": max(s)} for name, s in samples.items()
    }


def sqlite_case(tmp: Path, runs: int, calls: int) -> dict[str, Any]:
    path = tmp / "many.db"
    runtime = Runtime(SQLiteStore(path, synchronous="NORMAL"))
    t0 = time.perf_counter()
    templates = make_templates(runtime, min(TEMPLATES, runs))
    runtime.close()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN")

    def execute(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in db.execute(sql, params).fetchall()]

    def commit() -> None:
        db.execute("COMMIT")
        db.execute("BEGIN")

    seed(Dialect("sqlite", execute), templates, runs // len(templates) - 1, commit)
    db.execute("COMMIT")
    db.execute("ANALYZE")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    seeded_s = time.perf_counter() - t0
    runtime = Runtime(SQLiteStore(path, synchronous="NORMAL"))
    try:
        count = waiting_count(runtime)
        timings = time_listings(runtime, calls)
    finally:
        runtime.close()
    return {
        "store": "sqlite",
        "runs": count,
        "seed_s": round(seeded_s, 1),
        "bytes_per_run": stored_bytes(path) / count,
        "listings": timings,
    }


def waiting_count(runtime: Runtime) -> int:
    store: Any = runtime.store
    if isinstance(store, SQLiteStore):
        db = sqlite3.connect(store.path)
        try:
            return int(db.execute("SELECT count(*) FROM runs WHERE status='WAITING_FOR_USER'").fetchone()[0])
        finally:
            db.close()
    raise TypeError(type(store))


def postgres_case(runs: int, calls: int) -> dict[str, Any]:
    import psycopg

    sys.path.insert(0, str(HERE.parent / "tests"))
    fixtures = importlib.import_module("pg_fixtures")
    bin_dir = fixtures.find_pg_bin()
    if bin_dir is None:
        return {"store": "postgres", "skipped": f"no PostgreSQL server binaries ({fixtures.INSTALL_HINT})"}
    server = fixtures.PgServer(bin_dir=bin_dir)
    server.start()
    try:
        server.create_session_database()
        url = server.new_schema()
        t0 = time.perf_counter()
        runtime = Runtime.open(url)
        templates = make_templates(runtime, min(TEMPLATES, runs))
        runtime.close()
        with psycopg.connect(url) as conn:

            def execute(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
                cur = conn.execute(sql, params)  # type: ignore[arg-type]
                return [tuple(r) for r in cur.fetchall()] if cur.description else []

            seed(Dialect("postgres", execute), templates, runs // len(templates) - 1, conn.commit)
            conn.execute("ANALYZE")
            conn.commit()
            count = int(conn.execute("SELECT count(*) FROM runs WHERE status='WAITING_FOR_USER'").fetchone()[0])
            size = conn.execute(
                "SELECT sum(pg_total_relation_size(format('%I.%I', table_schema, table_name)))"
                " FROM information_schema.tables WHERE table_schema=current_schema()"
            ).fetchone()[0]
        seeded_s = time.perf_counter() - t0
        runtime = Runtime.open(url)
        try:
            timings = time_listings(runtime, calls)
        finally:
            runtime.close()
        return {
            "store": "postgres",
            "runs": count,
            "seed_s": round(seeded_s, 1),
            "bytes_per_run": int(size) / count,
            "listings": timings,
        }
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS, help=f"waiting runs per store (default {RUNS:,})")
    parser.add_argument("--calls", type=int, default=CALLS, help=f"timed calls of each listing (default {CALLS})")
    parser.add_argument("--sqlite-only", action="store_true", help="skip PostgreSQL")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    args = parser.parse_args()
    cases = []
    with tempfile.TemporaryDirectory(prefix="bench_many_runs_") as tmp:
        cases.append(sqlite_case(Path(tmp), args.runs, args.calls))
    if not args.sqlite_only:
        cases.append(postgres_case(args.runs, args.calls))
    targets = [
        Target(f"p99 ms of the first page: {name} ({case['store']}) / {TARGET_MS:g} ms", t["p99_ms"] / TARGET_MS, 1.0)
        for case in cases
        if "listings" in case
        for name, t in case["listings"].items()
    ]
    rows = [
        [case["store"], name, f"{t['median_ms']:.2f}", f"{t['p99_ms']:.2f}", f"{t['max_ms']:.2f}"]
        for case in cases
        if "listings" in case
        for name, t in case["listings"].items()
    ]
    sizes = [
        [case["store"], f"{case['runs']:,}", f"{case['bytes_per_run']:.0f}", f"{case['seed_s']:.1f}"]
        for case in cases
        if "listings" in case
    ]
    skipped = [f"{case['store']}: skipped, {case['skipped']}" for case in cases if "skipped" in case]
    out = {"benchmark": "many_runs", "machine": machine(), "cases": cases, "targets": [t.as_dict() for t in targets]}
    tables = [
        table(
            f"first page (100 rows), {args.calls} calls each",
            ("store", "listing", "median ms", "p99 ms", "max ms"),
            rows,
        ),
        table("the stores", ("store", "waiting runs", "stored bytes / run", "seeding s"), sizes),
        targets_table(targets),
        *skipped,
    ]
    emit(args.json, out, tables)


if __name__ == "__main__":
    os.environ.setdefault("STATEWARD_AGENTS", "")
    main()
