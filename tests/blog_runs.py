"""A blog run suspended at its approval, for tests that answer or inspect it from another process."""

from __future__ import annotations

from pathlib import Path

from stateward import Runtime
from stateward_demos.blog import build_agent
from stateward_demos.blog_fixtures import GOAL


def suspended_blog_run(db: Path) -> str:
    """Start the ReAct blog agent on ``db`` until it waits for ``approval_001``; its run id."""
    runtime = Runtime.open(str(db))
    try:
        state = runtime.start(build_agent("react"), GOAL)
    finally:
        runtime.close()
    assert state.pending is not None and state.pending.request_id == "approval_001"
    return state.run_id
