"""The blog-brief agent: read materials, write a brief, stop for approval, then write the draft.

The same tools, gateway and Runtime serve all three controllers; they differ only in who produces
the signal. ``write_draft`` is protected: the action gate admits it only with an approval bound to
that exact brief version.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from stateward import (
    Agent,
    AgentRef,
    Budget,
    ControlDecision,
    Controller,
    DecisionContext,
    ErrorCode,
    FinishCheck,
    Model,
    RequestKind,
    RunState,
    ToolContext,
    ToolInvalidArgument,
    ToolRegistry,
    UserError,
    WaitCheck,
    guard,
    tool,
)
from stateward.models import ScriptedModel
from stateward_demos import blog_faults
from stateward_demos import blog_fixtures as fx

if TYPE_CHECKING:
    from stateward import WorkflowController

MODES = ("react", "plan_and_execute", "workflow")
NAME = "blog"  # registered by stateward.runtime.agent_registry.builtin_agents
_BRIEF_REF = re.compile(r"^brief:v[1-9][0-9]*$")


def make_tools(materials: dict[str, dict[str, str]], fault: blog_faults.BlogFault | None = None) -> ToolRegistry:
    @tool(description="List the materials available for the article (ids and titles).")
    def list_materials() -> list[dict[str, str]]:
        return [{"id": key, "title": m["title"]} for key, m in materials.items()]

    @tool(description="Read one material by id.")
    def read_material(material_id: str) -> dict[str, str]:
        if material_id not in materials:
            raise ToolInvalidArgument(f"no material {material_id!r}")
        return {"id": material_id, **materials[material_id]}

    # The brief and the draft are artifacts the Runtime commits with the step itself, so these tools
    # have no effect outside that transaction; the protection of write_draft is the action gate.
    @tool(description="Create (or revise) the article brief; stored as the next version of 'brief'.")
    def create_brief(title: str, outline: list[str], sources: list[str], ctx: ToolContext) -> dict[str, Any]:
        body = "\n".join([f"# {title}", "", *(f"- {item}" for item in outline), "", f"Sources: {', '.join(sources)}"])
        ctx.emit_artifact("brief", body)
        return {"created": "brief", "sections": len(outline)}

    @tool(
        description="Write the article draft from an approved brief version (needs approval).", requires_approval=True
    )
    def write_draft(brief: str, ctx: ToolContext) -> dict[str, Any]:
        if not _BRIEF_REF.match(brief):
            raise ToolInvalidArgument(f"{brief!r} is not a brief reference like 'brief:v1'")
        ctx.emit_artifact("draft", f"# Draft\n\nWritten from {brief}.\n")
        return {"created": "draft", "from": brief}

    reader = blog_faults.read_material(materials, fault) or read_material
    return ToolRegistry([list_materials, reader, create_brief, write_draft])


def blog_wait_policy(decision: ControlDecision, state: RunState) -> WaitCheck:
    """A wait needs something to wait on (a brief) and a question; it guards write_draft of that brief."""
    version = state.artifacts.get("brief")
    if version is None:
        return WaitCheck(rejected="wait_signal_without_pending_object")
    if not (decision.question or "").strip():
        return WaitCheck(rejected="wait_signal_without_question")
    return WaitCheck(guarded_action=guard("write_draft", {"brief": f"brief:v{version}"}), kind=RequestKind.APPROVAL)


def blog_finish_policy(decision: ControlDecision, state: RunState) -> FinishCheck:
    """The goal is a draft written from an approved brief: a run without one may not call itself done."""
    if "draft" not in state.artifacts:
        return FinishCheck(rejected="finish_without_draft")
    return FinishCheck()


def _materials_read(ctx: DecisionContext) -> list[dict[str, Any]]:
    return [o.model_dump(mode="json") for o in ctx.observations if o.action == "read_material"]


def _first_has_clue(ctx: DecisionContext) -> bool:
    first = ctx.inventory[0]
    for o in ctx.observations:
        if o.action == "read_material" and o.args.get("material_id") == first and o.status == "SUCCESS":
            return bool(fx.mentions(str(o.result.get("content", "")), list(ctx.inventory), first))
    return False


def _brief_question(ctx: DecisionContext) -> str:
    return f"Brief brief:v{ctx.state.artifacts.get('brief', 0)} is ready. Write the draft from it?"


def workflow_nodes(model: Model, inventory: list[str]) -> WorkflowController:
    from stateward import FinishNode, HumanNode, ModelNode, RuleNode, ToolNode, WorkflowController

    second = inventory[1] if len(inventory) > 1 else inventory[0]
    return WorkflowController(
        [
            ToolNode("list", "list_materials", next="read_first"),
            ToolNode("read_first", "read_material", {"material_id": inventory[0]}, next="clue"),
            RuleNode("clue", "read_second_material", _first_has_clue, if_true="read_second", if_false="brief"),
            ToolNode("read_second", "read_material", {"material_id": second}, next="brief"),
            ModelNode(
                "brief",
                "create_brief",
                "Write the brief's title, outline and sources as JSON arguments.",
                inputs=_materials_read,
                next="approval",
            ),
            HumanNode("approval", _brief_question, on_approved="draft", on_rejected="revise"),
            ModelNode(
                "revise",
                "create_brief",
                "Revise the brief following the reviewer's note.",
                inputs=_materials_read,
                next="approval",
            ),
            ToolNode(
                "draft",
                "write_draft",
                lambda ctx: {"brief": f"brief:v{ctx.state.artifacts.get('brief', 0)}"},
                next="done",
            ),
            FinishNode("done", "draft written from the approved brief"),
        ],
        model=model,
    )


def scripted_models() -> dict[str, ScriptedModel]:
    return {
        "react": ScriptedModel(fx.react_policy, name="scripted-react"),
        "plan_and_execute": ScriptedModel(fx.planner_policy, name="scripted-planner"),
        "workflow": ScriptedModel(fx.brief_writer_policy, name="scripted-brief-writer"),
    }


def build_agent(
    controller: str = "react",
    max_steps: int = 8,
    materials: str = "default",
    model: Model | None = None,
    model_spec: str | None = None,
    fault: str | None = None,
) -> Agent:
    """The blog agent for one controller. Parameters are JSON so any process can rebuild it. ``fault`` (a
    :class:`~stateward_demos.blog_faults.BlogFault` value) runs the ReAct agent under one of the source's faults."""
    if controller not in MODES:
        raise UserError(
            f"unknown controller {controller!r}; choose one of {', '.join(MODES)}", code=ErrorCode.UNKNOWN_CONTROLLER
        )
    if materials not in fx.MATERIAL_SETS:
        raise UserError(f"unknown material set {materials!r}", code=ErrorCode.UNKNOWN_FIXTURE)
    injected = blog_faults.parse(fault)
    if injected is not None and (controller != "react" or model is not None or model_spec is not None):
        raise UserError("a blog fault runs the scripted ReAct agent only", code=ErrorCode.INVALID_ARGUMENT)
    chosen = blog_faults.materials(materials, injected)
    inventory = list(chosen)
    if model is None and model_spec is not None:
        from stateward.models import model_from_spec

        model = model_from_spec(model_spec)
    signal_model = model or scripted_models()[controller]
    if injected is not None:
        signal_model = ScriptedModel(blog_faults.policy(injected), name=f"scripted-react-{injected.value}")
    tools = make_tools(chosen, injected)
    # Only the chosen controller is imported: a process resuming one run pays for one.
    ctrl: Controller
    if controller == "react":
        from stateward import ReActController

        ctrl = ReActController(signal_model)
    elif controller == "plan_and_execute":
        from stateward import PlanAndExecuteController

        # The plan validator holds a plan to the approval order: a guarded tool only after its await step.
        guarded = frozenset(n for n in tools.names() if (spec := tools.get(n)) is not None and spec.requires_approval)
        ctrl = PlanAndExecuteController(signal_model, approval_before=guarded)
    else:
        ctrl = workflow_nodes(signal_model, inventory)
    params: dict[str, Any] = {
        "controller": controller,
        "max_steps": max_steps,
        "materials": materials,
        "model_spec": model_spec,
    }
    if injected is not None:
        params["fault"] = injected.value
    return Agent(
        name="blog",
        controller=ctrl,
        tools=tools,
        ref=AgentRef(name=NAME, params=params),
        wait_policy=blog_faults.wait_policy(injected, blog_wait_policy) if injected else blog_wait_policy,
        finish_policy=blog_finish_policy,
        budget=Budget(max_steps=max_steps),
        inventory=inventory,
        # A refused proposal (the planted call) is named to the model once instead of failing the run.
        on_rejected_signal="correct_once" if injected is blog_faults.BlogFault.INJECTION else "fail",
    )
