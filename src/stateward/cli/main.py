"""Entry point of the ``stateward`` command."""

from __future__ import annotations

import gc
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

ANSWER_COMMANDS = ("approve", "reject", "reply")


@contextmanager
def _long_lived_imports() -> Iterator[None]:
    """Imports build objects that live as long as the process (modules, pydantic schemas).

    The collector would scan them again and again while they are built and once more at exit, for
    nothing: collect nothing while importing, then freeze what was built (the pattern CPython's
    ``gc.freeze`` documents). About a sixth of a short command's wall time.
    """
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


@contextmanager
def _ended_as_typer_ends() -> Iterator[None]:
    """Ctrl-C and a closed pipe end the short path the way they end a Typer command: exit 1, no traceback."""
    try:
        yield
    except KeyboardInterrupt:
        sys.stderr.write("Aborted!\n")
        raise SystemExit(1) from None
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): send what is still buffered nowhere, as Python's docs advise.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None


def _refuse_undecodable(argv: list[str]) -> None:
    """Bytes that are not UTF-8 reach Python as lone surrogates, which no store or JSON output can hold:
    refuse them as a usage error before anything runs."""
    for position, arg in enumerate(argv, start=1):
        try:
            arg.encode()
        except UnicodeEncodeError:
            message = f"argument {position} is not valid UTF-8"
            if "--json" in argv:
                sys.stdout.write(json.dumps({"error": {"code": "USAGE_ERROR", "message": message}}) + "\n")
            else:
                sys.stderr.write(f"error: USAGE_ERROR: {message}\n")
            raise SystemExit(2) from None


def _take_agents_option(argv: list[str]) -> list[str]:
    """``--agents module:attr`` (any command, repeatable) names agent registries this process may build;
    it joins ``STATEWARD_AGENTS`` so every command, the short answer path included, sees the same list."""
    rest: list[str] = []
    specs: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg == "--":
            rest += [arg, *args]
            break
        if arg == "--agents":
            value = next(args, None)
            if value is None:
                sys.stderr.write("error: USAGE_ERROR: --agents needs a value (module:attr[,module:attr])\n")
                raise SystemExit(2)
            specs.append(value)
        elif arg.startswith("--agents="):
            specs.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    if specs:
        known = os.environ.get("STATEWARD_AGENTS", "")
        os.environ["STATEWARD_AGENTS"] = ",".join(part for part in [known, *specs] if part)
    return rest


def _project_file(argv: list[str]) -> None:
    """The nearest ``stateward.toml`` / ``[tool.stateward]`` fills STATEWARD_DB, STATEWARD_AGENTS and the
    import path where the environment leaves them unset; a malformed one is INVALID_PROJECT_FILE, exit 3."""
    from stateward.cli.project import apply_to_process
    from stateward.core.errors import StatewardError

    try:
        apply_to_process()
    except StatewardError as exc:
        if "--json" in argv:
            sys.stdout.write(json.dumps({"error": exc.to_dict()}) + "\n")
        else:
            sys.stderr.write(f"error: {exc.code}: {exc.message}\n")
        raise SystemExit(3) from None


def _telemetry_from_env() -> None:
    """Every command honours the standard OTEL_* variables (nothing is imported unless one is set)."""
    if any(key.startswith("OTEL_") for key in os.environ):
        with _long_lived_imports():
            from stateward.observability.sdk import configure_from_env

            configure_from_env()


def main() -> None:
    """Answers to pending requests and ``worker`` take a short path; every other command goes through Typer."""
    try:
        _main()
    except SystemExit as ended:
        _leave_past_temporal(ended.code)
        raise
    _leave_past_temporal(0)


def _leave_past_temporal(code: object) -> None:
    """A process that opened a Temporal client ends without the interpreter's teardown: the SDK's native threads
    can outlive it and crash the exit (temporalio/sdk-python#300). Output is flushed, the status kept."""
    connection = sys.modules.get("stateward.temporal.connection")
    if connection is None or not connection.clients_opened():
        return
    sys.stdout.flush()
    sys.stderr.flush()
    status = code if isinstance(code, int) else 0 if code is None else 1
    os._exit(status)


def _main() -> None:
    argv = sys.argv[1:]
    _refuse_undecodable(argv)
    _project_file(argv)
    argv = _take_agents_option(argv)
    sys.argv[1:] = argv
    _telemetry_from_env()
    if argv and argv[0] in ANSWER_COMMANDS:
        with _long_lived_imports():
            from stateward.cli.answers import run_fast
        with _ended_as_typer_ends():
            if run_fast(argv):
                return
    if argv and argv[0] == "worker":
        with _long_lived_imports():
            from stateward.cli.worker_cmd import run_fast as run_worker
        with _ended_as_typer_ends():
            if run_worker(argv):
                return
    with _long_lived_imports():
        from stateward.cli.app import run
    with _ended_as_typer_ends():
        run()


if __name__ == "__main__":
    main()
