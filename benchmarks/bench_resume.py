"""Suspend, then resume in a new process: wall time of the ``stateward approve`` process (target <= 0.25 s).

Each repeat creates fresh suspended blog runs (``stateward demo blog``, timed as the suspend) and answers
them (``stateward approve``, timed as the resume), next to ``python -c pass``. Child processes use a
bytecode cache in a temporary directory (as an installed package has .pyc files); the approve process
is also timed without one. A split run of the same command times, inside the process, the CLI import,
the rest of its imports and the command itself; ``python -X importtime`` shows what the imports are.
For scale (measured elsewhere): LangGraph 1.06 s, 99% imports.
"""

from __future__ import annotations

import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchkit import Target, emit, machine, parse_args, table, targets_table

REPEATS = 7
IMPORTTIME_RUNS = 3
TARGET_S = 0.25
TOP = 12
TREE_MIN_MS = 6.0
TREE_DEPTH = 4
PY = sys.executable
_SCRIPT = Path(PY).parent / "stateward"
CLI = [str(_SCRIPT)] if _SCRIPT.exists() else [PY, "-m", "stateward.cli.main"]
CLI_FOR_FLAGS = [str(_SCRIPT)] if _SCRIPT.exists() else ["-m", "stateward.cli.main"]
# Runs the approve command in-process and reports where its time went (ms) on the last line of stderr.
_SPLIT = """
import json, sys, time
t0 = time.perf_counter()
import pydantic
class _Probe(pydantic.BaseModel):  # pydantic finishes importing itself when its first model is built
    x: int
t1 = time.perf_counter()
import stateward.cli.main as cli
import importlib
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
    except Exception:
        pass
t2 = time.perf_counter()
sys.argv = ["stateward", *json.loads(sys.argv[1])]
try:
    cli.main()
except SystemExit:
    pass
t3 = time.perf_counter()
from pydantic import BaseModel
seen, todo = set(), [BaseModel]
while todo:
    for sub in todo.pop().__subclasses__():
        if sub not in seen:
            seen.add(sub)
            todo.append(sub)
models = sum(1 for c in seen if c.__module__.startswith("stateward"))
ms = lambda a, b: round((b - a) * 1000, 1)
sys.stderr.write(json.dumps({"pydantic": ms(t0, t1), "import_rest": ms(t1, t2), "command": ms(t2, t3),
                             "stateward_models": models}) + "\\n")
"""
_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)$")
_PYDANTIC = {"pydantic", "pydantic_core", "annotated_types", "typing_extensions", "typing_inspection"}
_CLI_LIBS = {"typer", "click", "rich", "shellingham", "markdown_it", "mdurl", "pygments"}
_METADATA = ("importlib.metadata", "email", "zipfile", "csv", "importlib.resources")
PASS = "python -c pass"
SUSPEND = "suspend: stateward demo blog"
RESUME = "resume: stateward approve"
RESUME_NO_PYC = "resume: stateward approve, no bytecode cache"


# -- processes ---------------------------------------------------------------------------------------
def child_env(pycache: Path | None) -> dict[str, str]:
    """The environment of the timed processes: a bytecode cache outside the source tree, or none."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX"}}
    if pycache is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


@dataclass(frozen=True)
class Timing:
    """Wall seconds and CPU seconds (user + system) of one finished subprocess."""

    wall: float
    cpu: float


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(cmd: Sequence[str], env: dict[str, str]) -> tuple[Timing, subprocess.CompletedProcess[str]]:
    """Wall and CPU time of one subprocess, which must succeed."""
    cpu0, t0 = _children_cpu(), time.perf_counter_ns()
    proc = subprocess.run(list(cmd), capture_output=True, text=True, check=False, env=env)
    timing = Timing((time.perf_counter_ns() - t0) / 1e9, _children_cpu() - cpu0)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return timing, proc


def suspend(db: Path, env: dict[str, str]) -> tuple[Timing, str]:
    """Start a blog run that stops WAITING_FOR_USER; return (seconds, run id)."""
    timing, proc = timed([*CLI, "demo", "blog", "--controller", "react", "--db", str(db), "--json"], env)
    out = json.loads(proc.stdout)
    if out.get("status") != "WAITING_FOR_USER":
        raise RuntimeError(f"the blog run did not suspend: {out}")
    return timing, str(out["run_id"])


def approve_args(db: Path, run_id: str) -> list[str]:
    return ["approve", run_id, "approval_001", "--db", str(db), "--json"]


def approve(db: Path, run_id: str, env: dict[str, str]) -> Timing:
    timing, proc = timed([*CLI, *approve_args(db, run_id)], env)
    status = json.loads(proc.stdout).get("status")
    if status != "COMPLETED":
        raise RuntimeError(f"approve left run {run_id} {status}, not COMPLETED")
    return timing


def split(db: Path, run_id: str, modules: list[str], env: dict[str, str]) -> dict[str, float]:
    """Inside one approve process: ms to import the CLI, then the rest of its modules, then run the command."""
    _, proc = timed([PY, "-c", _SPLIT, json.dumps(approve_args(db, run_id)), *modules], env)
    return {k: float(v) for k, v in json.loads(proc.stderr.strip().splitlines()[-1]).items()}


# -- import time --------------------------------------------------------------------------------------
@dataclass
class Imported:
    name: str
    self_us: int
    cumulative_us: int
    depth: int
    children: list[Imported] = field(default_factory=list)


def importtime(db: Path, env: dict[str, str]) -> list[Imported]:
    """The modules of one approve process under ``-X importtime``, in the order their imports finished."""
    _, run_id = suspend(db, env)
    _, proc = timed([PY, "-X", "importtime", *CLI_FOR_FLAGS, *approve_args(db, run_id)], env)
    modules = []
    for line in proc.stderr.splitlines():
        match = _LINE.match(line)
        if match:
            own, cumulative, indent, name = match.groups()
            modules.append(Imported(name, int(own), int(cumulative), len(indent) // 2))
    return modules


def import_tree(modules: list[Imported]) -> list[Imported]:
    """Roots of the import tree (importtime prints children just before their parent, one level deeper)."""
    pending: dict[int, list[Imported]] = {}
    for module in modules:
        module.children = pending.pop(module.depth + 1, [])
        pending.setdefault(module.depth, []).append(module)
    return pending.get(0, [])


def tree_lines(nodes: list[Imported], depth: int = 0) -> list[list[str]]:
    """Parent-first rows of the subtrees costing at least TREE_MIN_MS, down to TREE_DEPTH."""
    rows = []
    for node in sorted(nodes, key=lambda n: -n.cumulative_us):
        if node.cumulative_us / 1000 < TREE_MIN_MS or depth >= TREE_DEPTH:
            continue
        rows.append(["  " * depth + node.name, f"{node.cumulative_us / 1000:.1f}", f"{node.self_us / 1000:.1f}"])
        rows += tree_lines(node.children, depth + 1)
    return rows


def group_of(name: str) -> str:
    top = name.split(".")[0]
    if top == "stateward":
        return ".".join(name.split(".")[:2])
    if top in _PYDANTIC:
        return "pydantic"
    if top in _CLI_LIBS:
        return "typer"
    return "stdlib" if top in sys.stdlib_module_names else top


def attribute(nodes: list[Imported], owner: str | None, acc: dict[str, float]) -> dict[str, float]:
    """Self time (µs) per group; a standard-library subtree is charged to the package that imported it."""
    for node in nodes:
        group = group_of(node.name)
        label = group if group != "stdlib" else _stdlib_label(node.name, owner)
        acc[label] = acc.get(label, 0.0) + node.self_us
        attribute(node.children, owner if group == "stdlib" else group, acc)
    return acc


def _stdlib_label(name: str, owner: str | None) -> str:
    if owner is None:
        return "stdlib (interpreter start-up)"
    if name.startswith(_METADATA):
        return f"importlib.metadata + email, zipfile, csv, imported by {owner}"
    return f"stdlib, imported by {owner}"


def by_group(runs: list[list[Imported]], min_ms: float = 1.0) -> dict[str, float]:
    """Median self time per group (ms), with groups under ``min_ms`` folded into one line."""
    per_run = [attribute(import_tree(run), None, {}) for run in runs]
    names = {g for run in per_run for g in run}
    groups = {g: statistics.median(r.get(g, 0.0) for r in per_run) / 1000 for g in names}
    small = sum(v for v in groups.values() if v < min_ms)
    out = {k: round(v, 1) for k, v in sorted(groups.items(), key=lambda kv: -kv[1]) if v >= min_ms}
    out[f"everything else (groups < {min_ms:g} ms)"] = round(small, 1)
    return out


def median_self(runs: list[list[Imported]]) -> dict[str, float]:
    names = {m.name for run in runs for m in run}
    per_run = [{m.name: m.self_us for m in run} for run in runs]
    return {n: statistics.median(r.get(n, 0) for r in per_run) for n in names}


def analyze_imports(runs: list[list[Imported]]) -> dict[str, Any]:
    """Total, per-group and top-module self time (medians over the instrumented runs), and the tree."""
    selfs = median_self(runs)
    top = sorted(selfs.items(), key=lambda kv: -kv[1])[:TOP]
    return {
        "import_total_ms": round(sum(selfs.values()) / 1000, 1),
        "modules": len(selfs),
        "groups_ms": by_group(runs),
        "top_self_ms": {n: round(us / 1000, 1) for n, us in top},
        "tree": tree_lines(import_tree(runs[0])),
        "module_names": [m.name for m in runs[0]],
    }


# -- the measurement ----------------------------------------------------------------------------------
def one_round(db: Path, cached: dict[str, str], bare: dict[str, str], modules: list[str]) -> dict[str, Any]:
    """One of each process kind, on fresh suspended runs."""
    suspend_t, run_id = suspend(db, cached)
    out: dict[str, Any] = {PASS: timed([PY, "-c", "pass"], cached)[0], SUSPEND: suspend_t}
    out[RESUME] = approve(db, run_id, cached)
    out[RESUME_NO_PYC] = approve(db, suspend(db, cached)[1], bare)
    out["split"] = split(db, suspend(db, cached)[1], modules, cached)
    return out


def measure(tmp: Path) -> dict[str, Any]:
    cached, bare = child_env(tmp / "pycache"), child_env(None)
    db = tmp / "resume.db"
    suspend(db, cached)  # warm-up: creates the database and fills the bytecode cache
    imports = analyze_imports([importtime(db, cached) for _ in range(IMPORTTIME_RUNS)])
    modules = imports.pop("module_names")
    rounds = [one_round(db, cached, bare, modules) for _ in range(REPEATS)]
    kinds = (PASS, SUSPEND, RESUME, RESUME_NO_PYC)
    splits = {k: statistics.median(r["split"][k] for r in rounds) for k in rounds[0]["split"]}
    return {
        "wall_s": {k: [r[k].wall for r in rounds] for k in kinds},
        "cpu_s": {k: [r[k].cpu for r in rounds] for k in kinds},
        "split_ms": splits,
        "imports": imports,
    }


def main() -> None:
    args = parse_args(__doc__)
    with tempfile.TemporaryDirectory(prefix="bench_resume_") as name:
        measured = measure(Path(name))
    wall = {k: statistics.median(v) for k, v in measured["wall_s"].items()}
    cpu = {k: statistics.median(v) for k, v in measured["cpu_s"].items()}
    goals = [Target("approve process wall time / 0.25 s", wall[RESUME] / TARGET_S, 1.0)]
    result = {
        "benchmark": "resume",
        "machine": machine(),
        "repeats": REPEATS,
        "median_wall_s": {k: round(v, 4) for k, v in wall.items()},
        "median_cpu_s": {k: round(v, 4) for k, v in cpu.items()},
        "all_wall_s": {k: [round(x, 4) for x in v] for k, v in measured["wall_s"].items()},
        "approve_over_python_startup": round(wall[RESUME] / wall[PASS], 2),
        "split_ms": measured["split_ms"],
        "imports": measured["imports"],
        "targets": [t.as_dict() for t in goals],
    }
    emit(args.json, result, _tables(result, goals))


WALL_COLUMNS = ("process", "wall ms", "vs python", "- python", "CPU ms")


def _tables(result: dict[str, Any], goals: list[Target]) -> list[str]:
    med, cpu, sp, imp = result["median_wall_s"], result["median_cpu_s"], result["split_ms"], result["imports"]
    base = med[PASS]
    walls = [
        [k, f"{v * 1000:.0f}", f"{v / base:.1f}x", f"{(v - base) * 1000:.0f}", f"{cpu[k] * 1000:.0f}"]
        for k, v in med.items()
    ]
    inside = [
        ["python start-up (python -c pass)", f"{base * 1000:.0f}"],
        ["import pydantic and build a first model (any pydantic program pays it)", sp["pydantic"]],
        ["import stateward and the rest of approve's modules", sp["import_rest"]],
        ["run the command: parse, open the store, answer, drive, JSON out", sp["command"]],
        ["stateward pydantic models built at import", int(sp["stateward_models"])],
    ]
    head = f"-X importtime of approve: {imp['modules']} modules, {imp['import_total_ms']} ms of imports (instrumented)"
    return [
        table(f"median over {result['repeats']} fresh runs", WALL_COLUMNS, walls),
        table("inside one approve process (median ms)", ("part", "ms"), inside),
        head + "\n",
        table("import self time by group (ms)", ("group", "ms"), list(imp["groups_ms"].items())),
        table("top modules by self time (ms)", ("module", "self ms"), list(imp["top_self_ms"].items())),
        table(f"import tree (subtrees >= {TREE_MIN_MS:g} ms)", ("module", "cumulative ms", "self ms"), imp["tree"]),
        targets_table(goals),
    ]


if __name__ == "__main__":
    main()
