"""What one chaos storm is asked to do (``stateward chaos``): its own module, read by the harness that runs the
storm and by the verifier that judges it, neither of which imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass

from stateward.chaos.forked import CHILD_TIMEOUT_S


@dataclass
class ChaosConfig:
    """The store, the size of the storm (runs, kills, workers), its seed and probabilities, and its deadlines."""

    db: str
    runs: int = 20
    kills: int = 100
    workers: int = 2
    seed: int = 1
    boundary_kill_probability: float = 0.03
    stop_probability: float = 0.05
    lease_ttl_s: float = 1.2
    heartbeat_s: float = 0.3
    max_seconds: float = 600.0
    child_deadline_s: float = CHILD_TIMEOUT_S  # a child still running this long after its fork is hung
    worker_lifetime_s: float = CHILD_TIMEOUT_S / 3  # then a worker stops itself and is replaced
