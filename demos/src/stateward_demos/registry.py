"""The demos' agents, registered with stateward through the ``stateward.agents`` entry point.

Lazy: listing agents (``stateward agents list``) or answering a request imports none of the demos.
"""

from __future__ import annotations

from stateward import AgentRegistry

AGENTS = AgentRegistry()
AGENTS.register_lazy(
    "blog", "stateward_demos.blog:build_agent", description="the blog-brief agent of `stateward demo blog`"
)
AGENTS.register_lazy(
    "payment-migration",
    "stateward_demos.payment.agent:build_agent",
    description="the Payment SDK migration assessment (plan run)",
)
AGENTS.register_lazy(
    "refund",
    "stateward_demos.refund_agent:build_agent",
    description="the refund agent: find an order, refund it with a person's approval (faults: --param fault=...)",
)
AGENTS.register_lazy(
    "payment-migration-plan-cycle",
    "stateward_demos.payment.plan_cycle:build_agent",
    description="the payment migration whose planner first proposes a plan with a dependency cycle",
)
