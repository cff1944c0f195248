"""Scope by arguments: a tool's declared scoped argument is held to the goal's resource scope by the gateway
(SCOPE_VIOLATION, no handler call), and the refusal is counted in the run's usage and by ``stateward gates``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stateward import Agent, ReActController, RunStatus, Runtime, UserError
from stateward.testing import ScriptedModel
from stateward.tools import (
    CallContext,
    InMemoryGatewayStore,
    OutcomeStatus,
    ResourceScope,
    ScopedArg,
    ScopeMatch,
    ToolCall,
    ToolErrorCode,
    ToolGateway,
    ToolRegistry,
    tool,
)

SEARCHED: list[str] = []


@tool(scope_arg="repo")
def search_code(repo: str, query: str) -> dict[str, Any]:
    """Search one repository."""
    SEARCHED.append(repo)
    return {"repo": repo, "hits": []}


@tool(scoped_args=[ScopedArg(arg="paths", match=ScopeMatch.PATH, kind="path")])
def read_files(paths: list[str]) -> dict[str, Any]:
    """Read files."""
    SEARCHED.extend(paths)
    return {"read": paths}


def gateway() -> ToolGateway:
    return ToolGateway(ToolRegistry([search_code, read_files]), InMemoryGatewayStore())


def invoke(tool_name: str, args: dict[str, Any], scope: ResourceScope | None) -> tuple[Any, list[str]]:
    SEARCHED.clear()
    out = gateway().invoke(ToolCall(tool=tool_name, args=args), CallContext(run_id="r", step=1, resource_scope=scope))
    return out, list(SEARCHED)


DENY = ResourceScope(denied=frozenset({"billing-prod"}))
ALLOW = ResourceScope(allowed=frozenset({"pay-api", "pay-web"}), denied=frozenset({"pay-web"}))


@pytest.mark.parametrize(
    ("tool_name", "args", "scope", "refused"),
    [
        ("search_code", {"repo": "billing-prod", "query": "x"}, DENY, True),
        ("search_code", {"repo": "pay-api", "query": "x"}, DENY, False),
        ("search_code", {"repo": "billing-prod", "query": "x"}, None, False),  # no scope: unrestricted
        ("search_code", {"repo": "pay-api", "query": "x"}, ALLOW, False),
        ("search_code", {"repo": "pay-web", "query": "x"}, ALLOW, True),  # denied wins over allowed
        ("search_code", {"repo": "other", "query": "x"}, ALLOW, True),  # not in the allow-list
        ("search_code", {"repo": "billing-prod/sub", "query": "x"}, DENY, False),  # EXACT: a different name
        ("read_files", {"paths": ["ok/a.py", "billing-prod/secrets.py"]}, DENY, True),  # PATH: one bad item
        ("read_files", {"paths": ["billing-prod:main"]}, DENY, True),
        ("read_files", {"paths": ["billing-production/a.py", "ok/b"]}, DENY, False),  # a prefix is not a path
    ],
)
def test_the_gateway_holds_scoped_arguments_to_the_scope(
    tool_name: str, args: dict[str, Any], scope: ResourceScope | None, refused: bool
) -> None:
    out, reached = invoke(tool_name, args, scope)
    if refused:
        assert out.status is OutcomeStatus.REJECTED and out.error_code is ToolErrorCode.SCOPE_VIOLATION
        assert reached == [] and out.handler_calls == 0 and out.budget_used == 0
        assert out.attempts[0].error_code == "SCOPE_VIOLATION"
    else:
        assert out.status is OutcomeStatus.SUCCESS and reached


def test_a_scoped_argument_the_tool_does_not_take_is_a_definition_error() -> None:
    with pytest.raises(UserError, match="scoped argument"):

        @tool(scope_arg="repository")
        def typo(repo: str) -> str:
            return repo


def scripted_agent(repo: str) -> Agent:
    calls = iter(
        [
            {"type": "EXECUTE_TOOL", "action": "search_code", "args": {"repo": repo, "query": "paysdk"}},
            {"type": "FINISH", "reason": "searched"},
        ]
    )
    return Agent(
        name="scoped-search",
        controller=ReActController(ScriptedModel(lambda req: next(calls))),
        tools=ToolRegistry([search_code]),
        resource_scope=DENY,
    )


def test_a_run_counts_the_refusal_and_gates_reports_it(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    runtime = Runtime.open(str(db))
    SEARCHED.clear()
    run = runtime.start(scripted_agent("billing-prod"), "search billing")
    assert run.status is RunStatus.COMPLETED
    assert SEARCHED == [] and run.usage.scope_violations == 1
    seen = [e.payload["observation"] for e in runtime.store.read_events(run.run_id) if "observation" in e.payload]
    assert [(o["action"], o["status"], o["error_code"]) for o in seen] == [
        ("search_code", "REJECTED", "SCOPE_VIOLATION")
    ], "the refusal is recorded in the run's events"
    inside = runtime.start(scripted_agent("pay-api"), "search pay")
    assert SEARCHED == ["pay-api"] and inside.usage.scope_violations == 0
    runtime.close()
    done = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", "gates", "--db", str(db), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report = json.loads(done.stdout)
    assert report["scope_violations_refused"] == 1, done.stderr
