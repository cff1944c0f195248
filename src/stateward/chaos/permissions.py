"""What the gates audit needs to know of a run's agent: the permissions it holds, against its tools' needs.

The audit itself reads records only (observability/gates.py); this rebuilds a run's agent from the
registered name and JSON parameters the run stored, the way any process may, and says for each tool
whether that agent holds the permission it needs.
"""

from __future__ import annotations

from stateward.core.errors import StatewardError
from stateward.core.state import RunState
from stateward.observability.gates import PermissionsOf
from stateward.runtime.agent_registry import AgentRegistry


def agent_permissions(agents: AgentRegistry) -> PermissionsOf:
    """For each run, whether its agent (rebuilt from the registered name and params the run stored) holds
    the permission each of its tools needs; None for a run whose agent this process cannot build."""
    known: dict[str, dict[str, bool] | None] = {}

    def held(state: RunState) -> dict[str, bool] | None:
        ref = state.agent
        key = f"{ref.name}:{sorted(ref.params.items())!r}"
        if key not in known:
            try:
                agent = agents.build(ref)
            except StatewardError:
                known[key] = None
            else:
                known[key] = {
                    spec.name: spec.permission is None or spec.permission in agent.permissions
                    for spec in (agent.tools.get(n) for n in agent.tools.names())
                    if spec is not None
                }
        return known[key]

    return held
