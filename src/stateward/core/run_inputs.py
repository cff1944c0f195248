"""What a caller may name a run, its tenant and its goal: checked once, where every run is created.

The HTTP API, the CLI and library callers all reach ``Runtime.submit``, so the bounds live here and
not in each front end: a blank goal, a 10 MB goal or a tenant named with control characters is refused
with a named error before anything is written.
"""

from __future__ import annotations

import re

from stateward.core.errors import ErrorCode, UserError

MAX_GOAL_CHARS = 8192
# A tenant or principal name: a letter or digit first, then a small safe alphabet (no spaces, no
# control or bidi characters), so a name prints the same everywhere it is shown.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@:-]{0,63}$")
RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


def check_goal(goal: object) -> str:
    """The goal as given, if it is text with something in it and at most MAX_GOAL_CHARS (INVALID_GOAL)."""
    if not isinstance(goal, str) or not goal.strip() or len(goal) > MAX_GOAL_CHARS:
        size = len(goal) if isinstance(goal, str) else None
        raise UserError(
            f"a run's goal must be non-blank text of at most {MAX_GOAL_CHARS} characters",
            code=ErrorCode.INVALID_GOAL,
            details={"type": type(goal).__name__, "chars": size},
        )
    return goal


def check_tenant(tenant: object) -> str:
    """The tenant, if it is a name of NAME_PATTERN (INVALID_TENANT)."""
    if not isinstance(tenant, str) or not NAME_PATTERN.match(tenant):
        raise UserError(
            "a tenant is 1-64 characters: letters, digits and . _ @ : - (starting with a letter or digit)",
            code=ErrorCode.INVALID_TENANT,
            details={"tenant": repr(tenant)[:80]},
        )
    return tenant


def check_run_id(run_id: object) -> str:
    """A caller-chosen run id, if it matches RUN_ID_PATTERN (INVALID_RUN_ID)."""
    if not isinstance(run_id, str) or not RUN_ID_PATTERN.match(run_id):
        raise UserError(
            "a run id is 1-128 characters: letters, digits and . _ : - (starting with a letter or digit)",
            code=ErrorCode.INVALID_RUN_ID,
            details={"run_id": repr(run_id)[:80]},
        )
    return run_id
