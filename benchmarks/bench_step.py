"""Cost of one durable decision step (SQLiteStore.commit_step) against one bare SQLite commit of the same size.

Two step shapes are measured. The targets apply to the step as the issue defines it: one ~200-byte
event appended and the run row updated, in one transaction. A real tool step of the Runtime appends
three events (signal_received, runtime_validated, tool_attempted) sharing those ~200 bytes; its
ratios are printed next to them, not hidden.

Both run in WAL mode with the same ``synchronous`` setting (FULL, then NORMAL), on databases whose WAL has
already wrapped once (steady state), interleaved in blocks so machine noise hits them alike; the headline
is the median per commit. A profile of commit_step at NORMAL
shows where the time goes. Targets: <= 1.3x at FULL, <= 3x at NORMAL.
"""

from __future__ import annotations

import cProfile
import pstats
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchkit import (
    BareInsert,
    StepDriver,
    Target,
    emit,
    interleaved,
    machine,
    mean_us,
    median_us,
    observation_event,
    parse_args,
    run_state,
    step_events,
    step_write,
    table,
    targets_table,
    time_calls,
    wal_bytes,
    warm_store,
    write_bytes,
)
from stateward.core.canonical import compact_json
from stateward.store.records import StepWrite

TARGETS = {"FULL": 1.3, "NORMAL": 3.0}
# (rounds, commits per round): FULL pays an fsync per commit, NORMAL does not.
PLAN = {"FULL": (150, 2), "NORMAL": (20, 100)}
WARMUP = 30
N_WRITES = 500
PROFILED_STEPS = 3000
IDLE_S = 150e-6  # about one fsync on the machines measured here
IDLE_COMMITS = 1000
WAL_PROBE_STEPS = 20


def measure_mode(tmp: Path, mode: str, writes: list[StepWrite], size: int) -> dict[str, Any]:
    """Median/mean µs per commit of commit_step and of the bare insert, and their ratio."""
    warm = warm_store(tmp / f"store-{mode}.db")
    store = StepDriver(tmp / f"store-{mode}.db", mode, writes)
    bare = BareInsert(tmp / f"bare-{mode}.db", mode, size)
    try:
        bare.warm()
        time_calls(store.step, WARMUP)
        time_calls(bare.step, WARMUP)
        rounds, per_round = PLAN[mode]
        samples = interleaved({"commit_step": store.step, "bare": bare.step}, rounds, per_round)
    finally:
        for closable in (store, bare, warm):
            closable.close()
    step_us, bare_us = median_us(samples["commit_step"]), median_us(samples["bare"])
    return {
        "mode": mode,
        "commits": len(samples["bare"]),
        "commit_step_median_us": round(step_us, 1),
        "bare_median_us": round(bare_us, 1),
        "ratio_median": round(step_us / bare_us, 3),
        "commit_step_mean_us": round(mean_us(samples["commit_step"]), 1),
        "bare_mean_us": round(mean_us(samples["bare"]), 1),
        "ratio_mean": round(mean_us(samples["commit_step"]) / mean_us(samples["bare"]), 3),
    }


def wal_frames_per_commit(tmp: Path, writes: list[StepWrite], size: int) -> dict[str, float]:
    """Pages each commit appends to the WAL (growth of the -wal file, before any auto-checkpoint)."""
    store = StepDriver(tmp / "probe-store.db", "NORMAL", writes)
    bare = BareInsert(tmp / "probe-bare.db", "NORMAL", size)
    try:
        frame = _page_size(tmp / "probe-bare.db") + 24
        probes = (("commit_step", Path(store.store.path), store.step), ("bare", tmp / "probe-bare.db", bare.step))
        out = {}
        for name, path, step in probes:
            step()
            before = wal_bytes(path)
            time_calls(step, WAL_PROBE_STEPS)
            out[name] = (wal_bytes(path) - before) / frame / WAL_PROBE_STEPS
        return out
    finally:
        store.close()
        bare.close()


def _page_size(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("PRAGMA page_size").fetchone()[0])
    finally:
        db.close()


_CATEGORIES: list[tuple[str, Callable[[str, str], bool]]] = [
    ("sqlite3 C calls (SQL + I/O)", lambda file, fn: file == "~" and "sqlite3." in fn),
    ("pydantic (validate/serialize)", lambda file, fn: "pydantic" in file or "pydantic" in fn or "Schema" in fn),
    ("json.dumps", lambda file, fn: "/json/" in file),
    ("datetime now/isoformat/parse", lambda file, fn: "datetime" in fn),
    ("stateward Python", lambda file, fn: "stateward" in file),
]


def _category(file: str, fn: str) -> str:
    return next((name for name, test in _CATEGORIES if test(file, fn)), "other Python (lock, contextlib, enum)")


def _is_harness(file: str, fn: str) -> bool:
    return "benchkit" in file or "bench_step" in file or "perf_counter_ns" in fn or "_lsprof" in fn


_Stats = dict[tuple[str, int, str], tuple[int, int, float, float, Any]]  # pstats: (file, line, fn) -> counts


def profile_breakdown(tmp: Path, writes: list[StepWrite], median_step_us: float) -> dict[str, Any]:
    """Where commit_step spends its time at NORMAL: cProfile self time per category, scaled to the median."""
    warm = warm_store(tmp / "profile.db")
    store = StepDriver(tmp / "profile.db", "NORMAL", writes)
    profiler = cProfile.Profile()
    try:
        time_calls(store.step, WARMUP)
        profiler.runcall(time_calls, store.step, PROFILED_STEPS)
    finally:
        store.close()
        warm.close()
    stats: _Stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    per_cat: dict[str, float] = {}
    statements = 0
    for (file, _, fn), (_, ncalls, tottime, _, _) in stats.items():
        if _is_harness(file, fn):
            continue
        cat = _category(file, fn)
        per_cat[cat] = per_cat.get(cat, 0.0) + tottime
        if file == "~" and ("'execute' of 'sqlite3" in fn or "'executemany' of 'sqlite3" in fn):
            statements += ncalls
    total = sum(per_cat.values())
    shares = {k: v / total for k, v in sorted(per_cat.items(), key=lambda kv: -kv[1])}
    return {
        "sql_calls_per_step": statements / PROFILED_STEPS,
        "share": {k: round(v, 3) for k, v in shares.items()},
        "est_us": {k: round(v * median_step_us, 1) for k, v in shares.items()},
    }


def component_costs(writes: list[StepWrite]) -> dict[str, float]:
    """µs of pieces a step pays in Python, measured alone (median of many calls)."""
    write = writes[0]
    return {
        "RunState.model_dump_json() (snapshot)": median_us(time_calls(write.state.model_dump_json, 3000)),
        "StepWrite(...) construction (caller side)": median_us(
            time_calls(lambda: StepWrite(state=write.state, events=write.events), 3000)
        ),
        "RunState + 3 NewEvent construction (caller side)": median_us(
            time_calls(lambda: (run_state(7), step_events(7)), 1000)
        ),
    }


# The raw-SQL variants: what a step costs under other state models, on the same file layout.
RAW_VARIANTS = {
    "raw": "the step's two writes, values serialized beforehand (the floor under commit_step)",
    "raw+serialize": "the same, serializing the snapshot and the events inside the step",
    "counters only": "events + a ~150 B counters document instead of the snapshot (snapshot rewritten rarely)",
    "events only": "one row appended, no run row update (an event-sourced state, snapshots every N steps)",
}


class RawStep:
    """A step's writes issued directly, without the store: the floor under commit_step, and the floors of
    state models this store does not use (``RAW_VARIANTS``), so the cost of a design choice is measured.

    Same file layout (a store creates it), same statements and parameters as the store's common step.
    What commit_step costs above "raw" is its own work; what "raw" costs above the bare commit is
    SQLite's (two rows, two pages). "counters only" writes its usage document where the snapshot goes:
    same row, same bytes as a counters column would take.
    """

    def __init__(self, path: Path, synchronous: str, writes: list[StepWrite], variant: str = "raw"):
        run_id = f"run_raw_{variant.replace(' ', '_').replace('+', '_')}"
        driver = StepDriver(path, "NORMAL", writes, run_id)
        self.seq = driver.seq
        driver.close()
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute(f"PRAGMA synchronous={synchronous}")
        self.cur = self.db.cursor()
        self.key = self.db.execute("SELECT run_key FROM runs WHERE run_id=?", (run_id,)).fetchone()[0]
        self.writes = writes
        self.snapshots = [w.state.model_dump_json() for w in writes]
        self.batches = [compact_json([(e.type.value, e.payload) for e in w.events]) for w in writes]
        self.step = {
            "raw": self._raw,
            "raw+serialize": self._serializing,
            "counters only": self._counters,
            "events only": self._events_only,
        }[variant]
        self.index = 0

    def _raw(self) -> None:
        i = self.index % len(self.writes)
        self._two_writes(self.snapshots[i], self.batches[i], len(self.writes[i].events))

    def _serializing(self) -> None:
        write = self.writes[self.index % len(self.writes)]
        snapshot = write.state.__pydantic_serializer__.to_json(write.state).decode()
        self._two_writes(snapshot, compact_json([(e.type.value, e.payload) for e in write.events]), len(write.events))

    def _counters(self) -> None:
        write = self.writes[self.index % len(self.writes)]
        usage = write.state.usage
        counters = usage.__pydantic_serializer__.to_json(usage).decode()
        self._two_writes(counters, compact_json([(e.type.value, e.payload) for e in write.events]), len(write.events))

    def _two_writes(self, snapshot: str, batch: str, count: int) -> None:
        cur, now, seq = self.cur, time.time(), self.seq
        cur.execute("BEGIN IMMEDIATE")
        cur.execute(
            "UPDATE runs SET terminal_reason=?, snapshot=?, last_seq=?, updated_at=?"
            " WHERE run_key=? AND last_seq=? AND status=? AND (lease_owner IS NULL OR lease_expires_at<?)",
            (None, snapshot, seq + count, now, self.key, seq, "RUNNING", now),
        )
        cur.execute(
            "INSERT INTO event_batches(run_key, seq, count, events, lease_version, at) VALUES (?,?,?,?,?,?)",
            (self.key, seq + count, count, batch, 0, int(now * 1e6)),
        )
        cur.execute("COMMIT")
        self.seq, self.index = seq + count, self.index + 1

    def _events_only(self) -> None:
        write = self.writes[self.index % len(self.writes)]
        cur, now, count = self.cur, time.time(), len(write.events)
        batch = compact_json([(e.type.value, e.payload) for e in write.events])
        cur.execute("BEGIN IMMEDIATE")
        cur.execute(
            "INSERT INTO event_batches(run_key, seq, count, events, lease_version, at) VALUES (?,?,?,?,?,?)",
            (self.key, self.seq + count, count, batch, 0, int(now * 1e6)),
        )
        cur.execute("COMMIT")
        self.seq, self.index = self.seq + count, self.index + 1

    def close(self) -> None:
        self.db.close()


def raw_floor(tmp: Path, mode: str, writes: list[StepWrite], size: int) -> dict[str, float]:
    """Median µs of commit_step, of each raw variant and of the bare commit (interleaved)."""
    warm = warm_store(tmp / f"floor-{mode}.db")
    store = StepDriver(tmp / f"floor-{mode}.db", mode, writes)
    raws = {name: RawStep(tmp / f"floor-{mode}.db", mode, writes, name) for name in RAW_VARIANTS}
    bare = BareInsert(tmp / f"floor-bare-{mode}.db", mode, size)
    steps: dict[str, Callable[[], object]] = {"commit_step": store.step}
    steps |= {name: raw.step for name, raw in raws.items()}
    steps["bare"] = bare.step
    try:
        bare.warm()
        for step in steps.values():
            time_calls(step, WARMUP)
        rounds, per_round = PLAN[mode]
        samples = interleaved(steps, rounds, per_round)
    finally:
        closers = [store.close, *(raw.close for raw in raws.values()), bare.close, warm.close]
        for close in closers:
            close()
    return {name: round(median_us(values), 1) for name, values in samples.items()}


def after_idle(tmp: Path, writes: list[StepWrite], size: int) -> dict[str, float]:
    """NORMAL commits that each follow an idle gap as long as a FULL commit's fsync (median µs).

    At FULL the step's commit costs what the bare commit costs; what it adds is CPU work before the
    commit, and a CPU that has just waited on an fsync runs that work slower than a busy one. Idling
    the same time at NORMAL, with no fsync at all, shows how much of the FULL overhead that is.
    """
    warm = warm_store(tmp / "idle-store.db")
    store = StepDriver(tmp / "idle-store.db", "NORMAL", writes)
    bare = BareInsert(tmp / "idle-bare.db", "NORMAL", size)
    samples: dict[str, list[int]] = {"commit_step": [], "bare": []}
    try:
        bare.warm()
        for _ in range(IDLE_COMMITS):
            for name, step in (("commit_step", store.step), ("bare", bare.step)):
                time.sleep(IDLE_S)
                samples[name] += time_calls(step, 1)
    finally:
        for closable in (store, bare, warm):
            closable.close()
    step_us, bare_us = median_us(samples["commit_step"]), median_us(samples["bare"])
    return {"commit_step_us": step_us, "bare_us": bare_us, "overhead_us": round(step_us - bare_us, 1)}


def no_event_cost(tmp: Path) -> float:
    """Median µs of commit_step with the same snapshot and no events: what the 3 event rows add."""
    writes = [StepWrite(state=run_state(i)) for i in range(N_WRITES)]
    warm = warm_store(tmp / "noevents.db")
    store = StepDriver(tmp / "noevents.db", "NORMAL", writes)
    try:
        time_calls(store.step, WARMUP)
        return median_us(time_calls(store.step, 1000))
    finally:
        store.close()
        warm.close()


def main() -> None:
    args = parse_args(__doc__)
    writes = [step_write(i) for i in range(1, N_WRITES + 1)]
    snapshot, payload = write_bytes(writes[0])
    size = snapshot + payload
    with tempfile.TemporaryDirectory(prefix="bench_step_") as name:
        tmp = Path(name)
        modes = [measure_mode(tmp, mode, writes, size) for mode in ("FULL", "NORMAL")]
        normal = modes[1]
        single = [step_write(i, observation_event) for i in range(1, N_WRITES + 1)]
        single_size = sum(write_bytes(single[0]))
        (tmp / "one").mkdir()
        one_event = [measure_mode(tmp / "one", mode, single, single_size) for mode in ("FULL", "NORMAL")]
        frames = wal_frames_per_commit(tmp, writes, size)
        profile = profile_breakdown(tmp, writes, normal["commit_step_median_us"])
        no_events_us = no_event_cost(tmp)
        idle = after_idle(tmp, single, single_size)
        floors = {mode: raw_floor(tmp, mode, single, single_size) for mode in ("FULL", "NORMAL")}
    components = component_costs(writes)
    targets = [
        Target(f"1-event step / bare commit, {m['mode']}", m["ratio_median"], TARGETS[m["mode"]]) for m in one_event
    ] + [Target(f"3-event tool step / bare commit, {m['mode']}", m["ratio_median"], TARGETS[m["mode"]]) for m in modes]
    result = {
        "benchmark": "step",
        "machine": machine(),
        "bytes": {
            "snapshot": snapshot,
            "event_payloads": payload,
            "events": len(writes[0].events),
            "bare_insert": size,
        },
        "modes": modes,
        "one_event_modes": one_event,
        "wal_pages_per_commit": {k: round(v, 2) for k, v in frames.items()},
        "normal_commit_step_no_events_us": round(no_events_us, 1),
        "raw_sql_floor_us": floors,
        "overhead_us": {
            "FULL": round(one_event[0]["commit_step_median_us"] - one_event[0]["bare_median_us"], 1),
            "NORMAL": round(one_event[1]["commit_step_median_us"] - one_event[1]["bare_median_us"], 1),
            "NORMAL after an idle gap": idle["overhead_us"],
        },
        "profile_normal": profile,
        "components_us": {k: round(v, 1) for k, v in components.items()},
        "targets": [t.as_dict() for t in targets],
    }
    emit(args.json, result, _tables(result, targets))


def _x(ratio: float) -> str:
    return f"{ratio:.2f}x"


def _tables(result: dict[str, Any], targets: list[Target]) -> list[str]:
    b = result["bytes"]
    head = (
        f"one step = snapshot {b['snapshot']} B + {b['events']} events ({b['event_payloads']} B of payload);"
        f" bare baseline = one INSERT of {b['bare_insert']} B"
    )
    cols = ("mode", "commits", "commit_step µs", "bare µs", "ratio", "mean step µs", "mean bare µs", "mean ratio")
    keys = (
        "mode",
        "commits",
        "commit_step_median_us",
        "bare_median_us",
        "ratio_median",
        "commit_step_mean_us",
        "bare_mean_us",
        "ratio_mean",
    )
    rows = [[m[k] for k in keys] for m in result["modes"]]
    one_rows = [[m[k] for k in keys] for m in result["one_event_modes"]]
    normal = result["modes"][1]
    detail = [
        [
            "WAL pages per commit: commit_step / bare",
            f"{result['wal_pages_per_commit']['commit_step']} / {result['wal_pages_per_commit']['bare']}",
        ],
        ["SQL calls per commit_step (execute + executemany)", f"{result['profile_normal']['sql_calls_per_step']:.1f}"],
        ["NORMAL commit_step, same snapshot, no events (µs)", f"{result['normal_commit_step_no_events_us']}"],
        ["NORMAL commit_step, 3 events (µs)", f"{normal['commit_step_median_us']}"],
        *[[k + " (µs)", v] for k, v in result["components_us"].items()],
    ]
    floor_rows = [
        [name, *(f"{f[name]} / {_x(f[name] / f['bare'])}" for f in result["raw_sql_floor_us"].values())]
        for name in ("commit_step", *RAW_VARIANTS, "bare")
    ]
    variant_notes = [[name, what] for name, what in RAW_VARIANTS.items()]
    over = result["overhead_us"]
    idle_rows = [[f"1-event step - bare commit, {k} (µs)", v] for k, v in over.items()]
    prof = result["profile_normal"]
    prof_rows = [[k, f"{prof['share'][k] * 100:.0f}%", prof["est_us"][k]] for k in prof["share"]]
    return [
        head + "\n",
        table("one event per step (the issue's definition): median µs per commit", cols, one_rows),
        table("three events per step (a real tool step): median µs per commit", cols, rows),
        table("where the NORMAL step goes", ("measure", "value"), detail),
        table(
            "the floor, and other state models: raw SQL on the same file (1-event step, median µs / vs bare)",
            ("step", *result["raw_sql_floor_us"]),
            floor_rows,
        ),
        table("the raw variants", ("variant", "what it writes"), variant_notes),
        table(
            f"what FULL adds: the same CPU work runs slower after a {IDLE_S * 1e6:.0f} µs wait (fsync or sleep)",
            ("measure", "value"),
            idle_rows,
        ),
        table("cProfile self time of commit_step at NORMAL, scaled to its median", ("part", "share", "~µs"), prof_rows),
        targets_table(targets),
    ]


if __name__ == "__main__":
    main()
