"""Does a step get slower as the run gets longer? One run of 1,000 commit_step calls.

Ratio = mean step cost of steps 901-1000 / steps 1-100 (target <= 1.1x; the median over 7 fresh runs at
NORMAL and 3 at FULL). The run starts on a store whose WAL has already wrapped once (another run's steps),
as in a database in use. A bare one-row insert is timed alternately with each step as the baseline. Means
include WAL auto-checkpoints (a checkpoint fsyncs even at NORMAL), so window medians, the mean without
spikes and the step numbers of the spikes are shown too.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchkit import (
    BareInsert,
    StepDriver,
    Target,
    emit,
    machine,
    mean_us,
    median_us,
    parse_args,
    step_write,
    table,
    targets_table,
    time_calls,
    warm_store,
    write_bytes,
)

STEPS = 1000
WINDOW = 100
TARGET = 1.1
RUNS = {"NORMAL": 7, "FULL": 3}  # FULL fsyncs every commit: a run takes several seconds
SPIKE = 10  # a step slower than 10x the run's median counts as a spike (typically a checkpoint)


def one_run(tmp: Path, mode: str, index: int) -> dict[str, list[int]]:
    """Per-step ns of a fresh 1,000-step run and of 1,000 bare inserts, alternating one of each."""
    writes = [step_write(i) for i in range(1, STEPS + 1)]
    snapshot, payload = write_bytes(writes[0])
    warm = warm_store(tmp / f"flat-{mode}-{index}.db")
    store = StepDriver(tmp / f"flat-{mode}-{index}.db", mode, writes)
    bare = BareInsert(tmp / f"bare-{mode}-{index}.db", mode, snapshot + payload)
    steps: list[int] = []
    inserts: list[int] = []
    try:
        bare.warm()
        for _ in range(STEPS):
            steps += time_calls(store.step, 1)
            inserts += time_calls(bare.step, 1)
    finally:
        for closable in (store, bare, warm):
            closable.close()
    return {"commit_step": steps, "bare": inserts}


def summarize(samples: list[int]) -> dict[str, Any]:
    """Window means/medians (first 100 vs last 100 steps) and their ratios."""
    first, last = samples[:WINDOW], samples[-WINDOW:]
    cutoff = SPIKE * statistics.median(samples)
    calm_first, calm_last = [s for s in first if s <= cutoff], [s for s in last if s <= cutoff]
    return {
        "first_mean_us": round(mean_us(first), 1),
        "last_mean_us": round(mean_us(last), 1),
        "ratio_mean": round(mean_us(last) / mean_us(first), 3),
        "first_median_us": round(median_us(first), 1),
        "last_median_us": round(median_us(last), 1),
        "ratio_median": round(median_us(last) / median_us(first), 3),
        "ratio_mean_without_spikes": round(mean_us(calm_last) / mean_us(calm_first), 3),
        "spikes_first_last_all": [sum(s > cutoff for s in part) for part in (first, last, samples)],
        "spike_steps": [i for i, s in enumerate(samples, start=1) if s > cutoff],
        "spike_ms": [round(s / 1e6, 1) for s in samples if s > cutoff],
    }


def measure(tmp: Path) -> list[dict[str, Any]]:
    rows = []
    for mode, runs in RUNS.items():
        for index in range(runs):
            for name, samples in one_run(tmp, mode, index).items():
                rows.append({"mode": mode, "run": index + 1, "what": name, **summarize(samples)})
    return rows


def targets(rows: list[dict[str, Any]]) -> list[Target]:
    """Per mode, the median over runs of the commit_step mean ratio."""
    out = []
    for mode in RUNS:
        ratios = [r["ratio_mean"] for r in rows if r["mode"] == mode and r["what"] == "commit_step"]
        out.append(Target(f"steps 901-1000 / 1-100 (mean), {mode}", statistics.median(ratios), TARGET))
    return out


def main() -> None:
    args = parse_args(__doc__)
    with tempfile.TemporaryDirectory(prefix="bench_flat_") as name:
        rows = measure(Path(name))
    goals = targets(rows)
    result = {
        "benchmark": "flatness",
        "machine": machine(),
        "steps": STEPS,
        "window": WINDOW,
        "runs": rows,
        "targets": [t.as_dict() for t in goals],
    }
    emit(args.json, result, _tables(rows, goals))


_COLUMNS = {
    "mode": "mode",
    "run": "run",
    "what": "what",
    "first_mean_us": "mean 1-100",
    "last_mean_us": "mean 901-1000",
    "ratio_mean": "ratio",
    "first_median_us": "median 1-100",
    "last_median_us": "median 901-1000",
    "ratio_median": "ratio",
    "ratio_mean_without_spikes": "mean ratio w/o spikes",
    "spikes_first_last_all": "spikes first/last/all",
}


def _cell(row: dict[str, Any], key: str) -> object:
    value = row[key]
    return "/".join(map(str, value)) if isinstance(value, list) else value


def _tables(rows: list[dict[str, Any]], goals: list[Target]) -> list[str]:
    data = [[_cell(r, k) for k in _COLUMNS] for r in rows]
    spikes = [
        f"  {r['mode']} run {r['run']} {r['what']}: "
        + (", ".join(f"{n} ({ms} ms)" for n, ms in zip(r["spike_steps"], r["spike_ms"], strict=True)) or "-")
        for r in rows
    ]
    return [
        table(
            f"µs per step over one run of {STEPS} steps (commit_step vs bare insert, alternating)",
            list(_COLUMNS.values()),
            data,
        ),
        "\n".join([f"== spikes (> {SPIKE}x the run's median): step number (duration)", *spikes, ""]),
        targets_table(goals),
    ]


if __name__ == "__main__":
    main()
