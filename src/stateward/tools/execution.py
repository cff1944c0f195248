"""Running a handler under a timeout.

Each call gets its own daemon thread: a handler that does not answer in time is abandoned, not
killed (Python cannot kill a thread), and may still finish later. That is exactly the "response lost"
case the side-effect journal and ``lookup`` reconcile; a shared pool would instead be starved by it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Finished:
    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False


def run_with_timeout(fn: Callable[[], Any], timeout_s: float, *, name: str = "tool") -> Finished:
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # reported to the caller, never lost in the thread
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name=f"stateward-tool-{name}", daemon=True).start()
    if not done.wait(timeout_s):
        return Finished(timed_out=True)
    return Finished(value=box.get("value"), error=box.get("error"))
