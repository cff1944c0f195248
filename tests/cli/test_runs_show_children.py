"""``runs show`` places a run in its tree: the runs above it and the child runs its calls started."""

from __future__ import annotations

import json
from pathlib import Path

from tests.runtime import child_family as family
from typer.testing import CliRunner

from stateward.cli.app import app
from stateward.runtime.runtime import Runtime


def test_runs_show_lists_a_runs_children_and_a_childs_chain(tmp_path: Path) -> None:
    db = str(tmp_path / "family.db")
    runtime = Runtime.open(db, agents=family.registry())
    runtime.start(runtime.agents.create("triage"), goal="refund every order", run_id="root")
    kids = runtime.children("root")
    runtime.close()
    shown = CliRunner().invoke(app, ["runs", "show", "root", "--db", db, "--json"])
    assert shown.exit_code == 0, shown.output
    root = json.loads(shown.output)
    assert root["chain"] == []
    assert [(c["run_id"], c["agent"], c["status"]) for c in root["children"]] == [
        (k.run_id, "refund-agent", "COMPLETED") for k in kids
    ]
    child = json.loads(CliRunner().invoke(app, ["runs", "show", kids[0].run_id, "--db", db, "--json"]).output)
    assert child["chain"] == ["root"] and child["children"] == []
    text = CliRunner().invoke(app, ["runs", "show", "root", "--db", db]).output
    assert f"child: {kids[0].run_id} refund-agent COMPLETED (completed)" in text
    assert "called by: root" in CliRunner().invoke(app, ["runs", "show", kids[1].run_id, "--db", db]).output


def test_runs_list_tree_puts_each_child_under_its_parent(tmp_path: Path) -> None:
    db = str(tmp_path / "family.db")
    runtime = Runtime.open(db, agents=family.registry())
    runtime.start(runtime.agents.create("manager"), goal="refunds", run_id="root")
    (triage,) = runtime.children("root")
    (refunder,) = runtime.children(triage.run_id)
    runtime.start(runtime.agents.create("refund-agent"), goal="refund C-3", run_id="alone")
    runtime.close()
    listed = CliRunner().invoke(app, ["runs", "list", "--tree", "--db", db, "--json"])
    assert listed.exit_code == 0, listed.output
    rows = [(r["run_id"], r["parent_run_id"], r["depth"]) for r in json.loads(listed.output)["runs"]]
    assert rows == [
        ("alone", None, 0),
        ("root", None, 0),
        (triage.run_id, "root", 1),
        (refunder.run_id, triage.run_id, 2),
    ]
    text = CliRunner().invoke(app, ["runs", "list", "--tree", "--db", db]).output
    assert f"    {refunder.run_id}" in text
