"""#27 item 4: the CLI's rough edges, each through the real command as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

AGENTS_MODULE = '''
from stateward import Agent, AgentRegistry, ReActController, ToolRegistry, tool
from stateward.testing import ScriptedModel


@tool(requires_approval=True)
def pay(invoice: str, amount_cents: int) -> dict[str, str]:
    """Pay an invoice."""
    return {"paid": invoice}


@tool()
def note(text: str) -> dict[str, str]:
    """Note something (long text: the trace cuts it)."""
    return {"noted": text}


agents = AgentRegistry()


@agents.agent("payer")
def make_payer(role: str | None = None, twice: bool = False) -> Agent:
    def decide(request):
        paid = [o for o in request.observations if o["action"] == "pay" and o["status"] == "SUCCESS"]
        if not any(o["action"] == "note" for o in request.observations):
            return {"type": "EXECUTE_TOOL", "action": "note", "args": {"text": "n" * 400}}
        if len(paid) >= (2 if twice else 1):
            return {"type": "FINISH", "reason": "paid"}
        invoice = f"INV-{len(paid) + 1}"
        return {"type": "EXECUTE_TOOL", "action": "pay", "args": {"invoice": invoice, "amount_cents": 100}}

    return Agent(
        name="payer", controller=ReActController(ScriptedModel(decide)), tools=ToolRegistry([pay, note]),
        approver_role=role,
    )
'''


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWARD_") and k != "PYTHONPATH"}
    return {**env, **(extra or {})}


def sw(cwd: Path, *args: str, env: dict[str, str] | None = None, as_json: bool = True) -> tuple[int, Any, str]:
    done = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", *args, *(["--json"] if as_json else [])],
        cwd=cwd, env=env if env is not None else _env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    out: Any = done.stdout
    if as_json and done.stdout.strip():
        out = json.loads(done.stdout)
    return done.returncode, out, done.stderr


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project directory: its agents under ops/, named by a stateward.toml (no environment needed)."""
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "payer_agents.py").write_text(AGENTS_MODULE)
    (tmp_path / "stateward.toml").write_text(
        'db = "runs.db"\nagents = ["payer_agents:agents"]\npython_path = ["ops"]\n'
    )
    return tmp_path


def test_keys_create_refuses_a_missing_store(tmp_path: Path) -> None:
    code, out, _ = sw(tmp_path, "keys", "create", "--tenant", "a", "--name", "n", "--role", "admin", "--db", "TYPO.db")
    assert (code, out["error"]["code"]) == (1, "STORE_NOT_FOUND")
    assert not (tmp_path / "TYPO.db").exists()
    for args in (("keys", "list"), ("keys", "revoke", "k"), ("runs", "list"), ("requests", "expire")):
        code, out, _ = sw(tmp_path, *args, "--db", "TYPO.db")
        assert (code, out["error"]["code"]) == (1, "STORE_NOT_FOUND"), args
    assert not (tmp_path / "TYPO.db").exists()
    args = ("keys", "create", "--tenant", "a", "--name", "n", "--role", "admin", "--db", "new.db", "--new-store")
    code, out, _ = sw(tmp_path, *args)
    assert code == 0 and out["key"].startswith("swk_")


def _help_texts(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str]]:
    import click

    found = [(path, command.help or "")]
    found += [(path, p.help or "") for p in command.params if isinstance(p, click.Option)]
    for name, sub in getattr(command, "commands", {}).items():
        found += _help_texts(sub, (*path, name))
    return found


def test_help_texts_print_square_brackets_as_written(tmp_path: Path) -> None:
    code, out, _ = sw(tmp_path, "serve", "--help", as_json=False)
    assert code == 0 and "pip install 'stateward[serve]'" in out
    probe = (
        "import json, typer\n"
        "from stateward.cli.app import _mount, app\n"
        "_mount(None)\n"
        "import tests.cli.test_operator_cli as t\n"
        "print(json.dumps(t._help_texts(typer.main.get_command(app))))\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    bracketed = [(tuple(p), text) for p, text in json.loads(done.stdout) if "[" in text]
    assert bracketed, "some help text has square brackets (the check must see them)"
    for path, text in bracketed:
        code, out, _ = sw(tmp_path, *path, "--help", as_json=False)
        assert code == 0, path
        flat = " ".join(out.split())
        for piece in text.split("["):
            token = piece.split("]")[0] if "]" in piece else None
            if token:
                assert f"[{' '.join(token.split())}]" in flat, (path, token)


def test_approve_json_has_the_fields_of_run_json_and_hints_name_every_flag(project: Path) -> None:
    sub = project / "deep" / "er"
    sub.mkdir(parents=True)
    code, ran, _ = sw(sub, "run", "payer", "--goal", "g", "--param", "role=finance", "--param", "twice=true",
                      "--tenant", "acme")  # fmt: skip
    assert code == 0 and ran["status"] == "WAITING_FOR_USER"
    assert (project / "runs.db").exists()  # the project file's store, found from a subdirectory
    args = ("approve", ran["run_id"], ran["pending_request_id"], "--by", "op", "--role", "finance", "--tenant", "acme")
    code, approved, _ = sw(sub, *args)
    assert code == 0
    assert set(ran) <= set(approved)
    assert approved["pending_request_id"] not in (None, ran["pending_request_id"])
    assert approved["agent_ref"] == ran["agent_ref"]

    code, text, _ = sw(sub, "run", "payer", "--goal", "g", "--param", "role=finance", "--tenant", "acme", as_json=False)
    hint = next(line for line in text.splitlines() if "answer with:" in line)
    assert "--role finance" in hint and "--tenant acme" in hint and f"--db {project / 'runs.db'}" in hint
    command = hint.split("answer with:", 1)[1].split()
    assert command[0] == "stateward"
    code, done, _ = sw(sub, *command[1:], "--by", "op")  # the hint, as printed, answers the request
    assert code == 0 and done["status"] == "COMPLETED", done


def test_text_trace_says_what_it_left_out(project: Path) -> None:
    code, ran, _ = sw(project, "run", "payer", "--goal", "g")
    assert code == 0
    code, text, _ = sw(project, "trace", ran["run_id"], as_json=False)
    assert code == 0
    assert "more chars]" in text
    assert "payloads cut at 120 characters" in text and "--width 0" in text
    code, whole, _ = sw(project, "trace", ran["run_id"], "--width", "0", as_json=False)
    assert "more chars]" not in whole and "payloads cut" not in whole
    done = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", "trace", ran["run_id"], "--json"],
        cwd=project, env=_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    payloads = [json.dumps(row["payload"]) for row in json.loads(done.stdout)]
    assert whole.count('"') == sum(p.count('"') for p in payloads)  # every payload whole (folded across lines)
    assert text.count('"') < whole.count('"')


def test_environment_and_flags_override_the_project_file(project: Path) -> None:
    other = project / "other.db"
    code, _, _ = sw(project, "run", "payer", "--goal", "g", env=_env({"STATEWARD_DB": str(other)}))
    assert code == 0 and other.exists() and not (project / "runs.db").exists()
    flag = project / "flag.db"
    code, _ran, _ = sw(
        project, "run", "payer", "--goal", "g", "--db", str(flag), env=_env({"STATEWARD_DB": str(other)})
    )
    assert code == 0 and flag.exists()


def test_a_pyproject_table_works_and_a_malformed_project_file_is_exit_3(tmp_path: Path) -> None:
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "payer_agents.py").write_text(AGENTS_MODULE)
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.stateward]\ndb = "p.db"\n'
        'agents = ["payer_agents:agents"]\npython_path = ["ops"]\n'
    )
    code, _ran, _ = sw(tmp_path, "run", "payer", "--goal", "g")
    assert code == 0 and (tmp_path / "p.db").exists()
    for body in ('db = "x.db"\nagnets = ["a:b"]\n', "db = [", "db = 5\n", 'python_path = "ops"\n'):
        (tmp_path / "stateward.toml").write_text(body)
        for args in (("runs", "list"), ("approve", "r", "approval_001"), ("worker", "--idle-exit", "0.1")):
            code, out, _ = sw(tmp_path, *args)
            assert (code, out["error"]["code"]) == (3, "INVALID_PROJECT_FILE"), (body, args, out)
