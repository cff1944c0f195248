"""Named persistence boundaries where a fault injector may act (the chaos harness kills there).

Production runtimes use ``NO_FAULTS``; the hooks cost one method call per boundary.
"""

from __future__ import annotations

from typing import Protocol

BOUNDARIES = (
    "before_commit",  # a step is decided and acted on, not yet committed
    "after_commit",  # the step is durable, the loop has not moved on
    "after_tool_before_record",  # a tool returned, its result is not recorded yet
    "approval_before_commit",  # an answer was checked, not yet recorded
    "approval_after_commit",  # an answer is recorded, the run not driven yet
    "lease_renewal",  # a heartbeat is about to renew the lease
)
# A parent's call to another agent, between its writes (runtime/children.py): the parent's wait is durable, its
# child not created yet; the child ended, its outcome not handed back to the parent yet.
CHILD_BOUNDARIES = ("child_before_start", "child_before_return")
# Not a persistence boundary, a window: a resume was checked, its lease not taken yet (a racing resumer's).
RESUME_BEFORE_LEASE = "resume_before_lease"


class FaultInjector(Protocol):
    def point(self, name: str) -> None: ...


class _NoFaults:
    def point(self, name: str) -> None:
        return None


NO_FAULTS: FaultInjector = _NoFaults()
