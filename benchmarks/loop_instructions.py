"""Instructions per step of bench_loop's ReAct loop, counted by valgrind (callgrind): a figure a busy machine
does not move.

The loop (bench_loop's agent: a scripted model calling a no-op tool) runs at SQLite ``synchronous=NORMAL``
under callgrind for ``--small`` and ``--large`` steps (after a 5-step warm run in the same process); the
difference of the two totals over the difference of the sizes is what one more step costs, every thread
counted (the runner threads' calls too), start-up and warm-up cancelled out. ``--repeat`` pairs are run and
the median printed. An fsync costs no instructions, so NORMAL counts what FULL would.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WARM_STEPS = 5


def child(n: int) -> None:
    """One run of ``n`` steps, after a warm run (imports, schemas): what callgrind counts."""
    from bench_loop import loop_agent
    from stateward import Runtime
    from stateward.store.sqlite import SQLiteStore

    with tempfile.TemporaryDirectory(prefix="loop_instructions_") as name:
        for steps, db in ((WARM_STEPS, "warm.db"), (n, "run.db")):
            runtime = Runtime(SQLiteStore(Path(name) / db, synchronous="NORMAL"))
            try:
                state = runtime.start(loop_agent(steps), "call noop until done")
                assert state.usage.tool_attempts == steps, state
            finally:
                runtime.close()


def counted(n: int) -> int:
    """Instructions callgrind counted for the whole child process running ``n`` steps."""
    with tempfile.TemporaryDirectory(prefix="callgrind_") as out:
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}/callgrind.out",
                sys.executable,
                __file__,
                "--child",
                str(n),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
            check=True,
        )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in callgrind's output:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--small", type=int, default=100, help="steps of the smaller run")
    parser.add_argument("--large", type=int, default=300, help="steps of the larger run")
    parser.add_argument("--repeat", type=int, default=1, help="pairs of runs (the median is printed)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: instruction counts need it")
    per_step = []
    for _ in range(max(1, args.repeat)):
        small, large = counted(args.small), counted(args.large)
        per_step.append((large - small) / (args.large - args.small))
        print(f"N={args.small}: {small:,}  N={args.large}: {large:,}  per step: {per_step[-1]:,.0f}")
    print(f"instructions per step (median of {len(per_step)}): {statistics.median(per_step):,.0f}")


if __name__ == "__main__":
    main()
