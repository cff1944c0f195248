"""The registry of the expense agents, for any process that runs or answers them:

    STATEWARD_AGENTS=examples.expenses.agents:registry stateward run expenses-react --goal "reimburse expense EXP-1"

(from the repository root, with the root on PYTHONPATH so ``examples`` is importable).
"""

from __future__ import annotations

from examples.expenses import plan_agent, react_agent, workflow_agent

from stateward import AgentRegistry

registry = AgentRegistry()
registry.register(react_agent.NAME, react_agent.build_agent, description="expenses as a ReAct loop")
registry.register(workflow_agent.NAME, workflow_agent.build_agent, description="expenses as a workflow")
registry.register(plan_agent.NAME, plan_agent.build_agent, description="expenses as a plan run")
