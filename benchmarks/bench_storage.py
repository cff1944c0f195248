"""Bytes on disk after 1,000 steps of ~200-byte observations, divided by the payload bytes (target <= 2x).

Stored bytes = database file + -wal after ``PRAGMA wal_checkpoint(TRUNCATE)``. Two step shapes go
through the real store: the realistic step (3 events whose payloads total ~200 B, as bench_step writes)
and a single 200 B observation event per step. The baseline is the same payload inserted as one row
per step into a one-table database. Per-table space comes from SQLite's dbstat when it is available.
For scale (measured elsewhere): LangGraph's SqliteSaver, 87 MB.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchkit import (
    StepDriver,
    Target,
    emit,
    machine,
    observation_event,
    parse_args,
    step_events,
    step_write,
    stored_bytes,
    table,
    targets_table,
    write_bytes,
)
from stateward.core.events import NewEvent
from stateward.store.sqlite import SQLiteStore

STEPS = 1000
TARGET = 2.0
SHAPES: dict[str, Callable[[int], list[NewEvent]]] = {
    "3 events/step (realistic)": step_events,
    "1 observation event/step": observation_event,
}


def store_run(path: Path, events: Callable[[int], list[NewEvent]]) -> dict[str, Any]:
    """Commit STEPS steps of one run and return stored bytes, payload bytes and the per-table split."""
    writes = [step_write(i, events) for i in range(1, STEPS + 1)]
    driver = StepDriver(path, "NORMAL", writes)
    for _ in writes:
        driver.step()
    driver.close()
    payload = sum(write_bytes(w)[1] for w in writes)
    stored = stored_bytes(path)
    return {
        "stored": stored,
        "payload": payload,
        "ratio": stored / payload,
        "tables": table_space(path),
        "event_rows": sum(len(w.events) for w in writes),
        "snapshot": write_bytes(writes[-1])[0],
    }


def bare_run(path: Path, payload_bytes: int) -> dict[str, Any]:
    """The baseline: the same payload bytes, one row per step, in a one-table WAL database."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
    body = "x" * (payload_bytes // STEPS)
    for _ in range(STEPS):
        db.execute("INSERT INTO t(body) VALUES (?)", (body,))
    db.close()
    stored = stored_bytes(path)
    return {"stored": stored, "payload": payload_bytes, "ratio": stored / payload_bytes, "tables": table_space(path)}


def empty_store(path: Path) -> int:
    SQLiteStore(path).close()
    return stored_bytes(path)


def table_space(path: Path) -> list[dict[str, Any]]:
    """Pages, payload and unused bytes per table/index (empty if this SQLite lacks dbstat)."""
    db = sqlite3.connect(path)
    try:
        rows = db.execute(
            "SELECT name, count(*), sum(payload), sum(unused), sum(pgsize) FROM dbstat"
            " GROUP BY name ORDER BY sum(pgsize) DESC, name"
        ).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        db.close()
    return [{"name": n, "pages": p, "payload": pl, "unused": u, "bytes": b} for n, p, pl, u, b in rows]


def main() -> None:
    args = parse_args(__doc__)
    with tempfile.TemporaryDirectory(prefix="bench_storage_") as name:
        tmp = Path(name)
        empty = empty_store(tmp / "empty.db")
        shapes = {label: store_run(tmp / f"store-{i}.db", fn) for i, (label, fn) in enumerate(SHAPES.items())}
        bare = bare_run(tmp / "bare.db", next(iter(shapes.values()))["payload"])
    goals = [Target(f"stored / payload, {label}", s["ratio"], TARGET) for label, s in shapes.items()]
    result = {
        "benchmark": "storage",
        "machine": machine(),
        "steps": STEPS,
        "empty_store_bytes": empty,
        "shapes": shapes,
        "bare": bare,
        "targets": [t.as_dict() for t in goals],
    }
    emit(args.json, result, _tables(result, goals))


def _tables(result: dict[str, Any], goals: list[Target]) -> list[str]:
    empty = result["empty_store_bytes"]
    rows = [
        [
            label,
            s["payload"],
            s["stored"],
            f"{s['ratio']:.2f}x",
            f"{(s['stored'] - empty) / s['payload']:.2f}x",
            f"{(s['stored'] - empty - s['payload']) / s['event_rows']:.0f}",
        ]
        for label, s in result["shapes"].items()
    ]
    bare = result["bare"]
    rows.append(["bare: 1 row/step, one table", bare["payload"], bare["stored"], f"{bare['ratio']:.2f}x", "", ""])
    first = next(iter(result["shapes"].values()))
    space = [[t["name"], t["pages"], t["bytes"], t["payload"], t["unused"]] for t in first["tables"]]
    return [
        table(
            f"bytes after {result['steps']} steps (empty store = {empty} B, all schema pages)",
            ("what", "payload B", "stored B", "ratio", "ratio minus empty store", "overhead B/event"),
            rows,
        ),
        table(
            f"space per table, {next(iter(result['shapes']))} (dbstat)",
            ("table/index", "pages", "bytes", "record B", "unused B"),
            space,
        ),
        targets_table(goals),
    ]


if __name__ == "__main__":
    main()
