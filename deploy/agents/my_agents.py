"""The operator's agents, mounted into the containers at /agents and named by STATEWARD_AGENTS.

Replace this with your own registry; the service and the workers build only the agents named here.
"""

from stateward import AgentRegistry

agents = AgentRegistry()
