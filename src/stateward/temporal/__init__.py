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

__all__ = ["TemporalTarget", "is_temporal_url"]

from stateward.temporal.target import TemporalTarget, is_temporal_url
