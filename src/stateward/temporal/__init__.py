"""The Temporal backend: a run is a Temporal workflow whose code is stateward's driver loop.

The Runtime decides every transition inside the workflow (``runtime/transition.py``, clocks from the
workflow); the controller's proposal and every tool call are activities, the tool call through the same
Tool Gateway with stateward's idempotency key; answers, pause, resume and cancel are Updates checked by the
same rules as the stores' answer path. ``TemporalRuntime`` is the client-side facade the CLI uses for a
``temporal://HOST:PORT/NAMESPACE?task_queue=Q`` URL; ``run_worker`` hosts the workflow and its activities.

Needs the ``temporal`` extra (``pip install 'stateward[temporal]'``): nothing here is imported unless a
``temporal://`` URL is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from stateward.temporal.target import TemporalTarget, is_temporal_url

if TYPE_CHECKING:
    from stateward.temporal.client import TemporalRuntime
    from stateward.temporal.dev_server import DevServer
    from stateward.temporal.worker import WorkerLimits, run_worker

__all__ = ["DevServer", "TemporalRuntime", "TemporalTarget", "WorkerLimits", "is_temporal_url", "run_worker"]

# What needs the SDK is imported on first use (a fixed table: nothing read from data picks a module).
_LAZY = {
    "TemporalRuntime": "stateward.temporal.client",
    "DevServer": "stateward.temporal.dev_server",
    "WorkerLimits": "stateward.temporal.worker",
    "run_worker": "stateward.temporal.worker",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'stateward.temporal' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
