"""``stateward worker`` has two parsers: Typer's (help, usage errors) and the short path that starts a worker
without importing Typer (cli/worker_cmd.py). Every option of the Typer command must mean the same on both."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Iterator

import pytest
from typer.models import OptionInfo
from typer.testing import CliRunner

from stateward.cli import worker_cmd
from stateward.cli.app import app, worker
from stateward.cli.worker_cmd import WorkerOptions, parse


def typer_options() -> Iterator[tuple[str, str, type, OptionInfo]]:
    """(parameter, option, its value type, Typer's OptionInfo) of each option the Typer command declares."""
    hints = typing.get_type_hints(worker, include_extras=True)
    for name in inspect.signature(worker).parameters:
        info = next(m for m in hints[name].__metadata__ if isinstance(m, OptionInfo))
        base = hints[name].__origin__  # the annotated type: int, float | None, bool, str
        kind = next(t for t in (*typing.get_args(base), base) if t is not type(None))
        # In the Annotated form Typer reads a leading "--name" given as the default as the option's name.
        named = [info.default] if isinstance(info.default, str) else []
        decls = [d for d in (*named, *(info.param_decls or ())) if d.startswith("--")]
        yield name, decls[0] if decls else "--" + name.replace("_", "-"), kind, info


def sample(kind: type, info: OptionInfo) -> list[str]:
    """A value in range for an option of type ``kind`` (none for a flag)."""
    if kind is bool:
        return []
    if kind is str:
        return ["somewhere"]
    low = info.min if info.min is not None else 0
    return [str(kind(low) + kind(2))]


def through_typer(monkeypatch: pytest.MonkeyPatch, args: list[str]) -> WorkerOptions:
    """The options the Typer command hands to start_worker for ``worker ARGS`` (the worker is not started)."""
    seen: list[WorkerOptions] = []

    def capture(opts: WorkerOptions) -> int:
        seen.append(opts)
        return 0

    monkeypatch.setattr(worker_cmd, "start_worker", capture)
    result = CliRunner().invoke(app, ["worker", *args])
    assert result.exit_code == 0, result.output
    return seen[0]


def test_the_typer_command_declares_options_the_short_path_knows() -> None:
    names = [name for name, *_ in typer_options()]
    assert names == [f.name for f in WorkerOptions.__dataclass_fields__.values()]


@pytest.mark.parametrize("option", [o for _, o, *_ in typer_options()])
def test_each_option_means_the_same_on_both_paths(monkeypatch: pytest.MonkeyPatch, option: str) -> None:
    monkeypatch.delenv("STATEWARD_DB", raising=False)
    name, _, kind, info = next(t for t in typer_options() if t[1] == option)
    args = [option, *sample(kind, info)]
    fast = parse(args)
    assert fast is not None and fast == through_typer(monkeypatch, args)
    assert getattr(fast, name) != getattr(WorkerOptions(), name)  # the option did set its field


def test_no_options_and_the_db_variable_mean_the_same_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STATEWARD_DB", raising=False)
    assert parse([]) == through_typer(monkeypatch, []) == WorkerOptions()
    monkeypatch.setenv("STATEWARD_DB", "from-env.db")
    assert parse([]) == through_typer(monkeypatch, []) == WorkerOptions(db="from-env.db")


def _below_minimum() -> list[tuple[str, str]]:
    out = []
    for _, option, kind, info in typer_options():
        if info.min is not None:
            out.append((option, str(kind(info.min) - (1 if kind is int else kind(0.001)))))
    return out


@pytest.mark.parametrize(("option", "value"), _below_minimum())
def test_a_value_out_of_range_is_left_to_typer_which_refuses_it(option: str, value: str) -> None:
    assert parse([option, value]) is None
    result = CliRunner().invoke(app, ["worker", option, value])
    assert result.exit_code == 2  # Click's usage error


@pytest.mark.parametrize(
    "args", [["--help"], ["--concurrency"], ["--concurrency", "two"], ["--no-such-option"], ["extra"], ["--conc", "2"]]
)
def test_help_and_malformed_command_lines_are_left_to_typer(args: list[str]) -> None:
    assert parse(args) is None


def test_a_worker_command_line_runs_on_the_short_path(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[WorkerOptions] = []

    def start(opts: WorkerOptions) -> int:
        started.append(opts)
        return 5  # troubled

    monkeypatch.setattr(worker_cmd, "start_worker", start)
    with pytest.raises(SystemExit) as exc:
        worker_cmd.run_fast(["worker", "--db", "x.db", "--json"])
    assert exc.value.code == 5 and started == [WorkerOptions(db="x.db", as_json=True)]
    assert worker_cmd.run_fast(["worker", "--help"]) is False and len(started) == 1
