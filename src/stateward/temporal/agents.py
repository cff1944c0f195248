"""The agents a worker process hosts, where its workflows find them.

The SDK creates workflow instances itself (no constructor argument reaches them) and re-imports a workflow's
module inside its sandbox, so a module-level name there would be a fresh, empty one. This module is imported
"passed through" the sandbox: the registry ``run_worker`` puts here is the one its workflows build agents from.
One per process, set before the worker polls.
"""

from __future__ import annotations

from stateward.core.errors import ErrorCode, UserError
from stateward.runtime.agent_registry import AgentRegistry

_HOSTED: list[AgentRegistry] = []


def host_agents(registry: AgentRegistry) -> None:
    """Make ``registry`` the agents this process's workflows build."""
    _HOSTED[:] = [registry]


def hosted_agents() -> AgentRegistry:
    """The registry :func:`host_agents` set; CONFIGURATION_ERROR in a process that never hosted any."""
    if not _HOSTED:
        raise UserError(
            "this process hosts no stateward agents (start it with run_worker)", code=ErrorCode.CONFIGURATION_ERROR
        )
    return _HOSTED[0]
