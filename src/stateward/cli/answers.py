"""``approve``, ``reject`` and ``reply``: the commands that resume a stopped run from another process.

They are the latency a person waits on, so a well-formed answer is parsed here with argparse and
goes straight to the runtime without importing Typer (about a tenth of the process). Anything this
parser does not fully accept (``--help``, a typo, a missing argument) is left to the Typer app, which
owns the help text and the usage errors; both paths run the same :func:`answer`.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from typing import NoReturn

from stateward.cli import DEFAULT_DB
from stateward.cli.output import EXIT_NOT_DRIVEN, answer_hint, emit_json, print_summary, reported_errors
from stateward.cli.stores import open_backend
from stateward.core.errors import StatewardError
from stateward.runtime.summary import run_summary

VERDICTS = {"approve": "approved", "reject": "rejected", "reply": "replied"}


@dataclass(frozen=True)
class AnswerChecks:
    """What the answerer claims, checked by the runtime against the request."""

    roles: list[str] = field(default_factory=list)
    tenant: str | None = None
    digest: str | None = None
    drive: bool = True


def answer(
    verdict: str, run_id: str, request_id: str, db: str, by: str, text: str | None, as_json: bool, check: AnswerChecks
) -> None:
    """Record the answer, resume the run to its next stop (unless told not to) and print its summary."""
    with reported_errors(as_json):
        runtime = open_backend(db, writes=True)
        roles = frozenset(check.roles)
        if verdict == "replied":
            result = runtime.reply(
                run_id, request_id, by=by, text=text or "", tenant=check.tenant, roles=roles, drive=check.drive
            )
        else:
            respond = runtime.approve if verdict == "approved" else runtime.reject
            result = respond(
                run_id,
                request_id,
                by=by,
                comment=text,
                tenant=check.tenant,
                roles=roles,
                digest=check.digest,
                drive=check.drive,
            )
        summary = run_summary(runtime.store, result.state)
    state = result.state
    summary["pending_request_id"] = None if state.pending is None else state.pending.request_id  # as `run --json`
    summary["agent_ref"] = state.agent.model_dump(mode="json")
    summary["already_answered"] = result.already_answered
    summary["answer"] = result.answer.model_dump(mode="json")
    summary["driven"] = result.not_driven is None
    if result.not_driven is not None:
        summary["not_driven"] = {**result.not_driven.to_dict(), "next": f"stateward resume {run_id} --db {db}"}
    if as_json:
        emit_json(summary)
    else:
        if result.already_answered:
            print(f"{request_id} was already {result.answer.verdict} by {result.answer.by}; nothing was done again")
        print_summary(summary)
        if state.pending is not None and result.not_driven is None:
            print(f"  answer with: {answer_hint(run_id, state.pending, db, state.tenant)}")
    if result.not_driven is not None:
        _not_driven(run_id, db, result.not_driven)


def _not_driven(run_id: str, db: str, error: StatewardError) -> NoReturn:
    """The answer stands; say what moves the run on, and exit with the code that says so."""
    sys.stdout.flush()
    sys.stderr.write(
        f"answer recorded; this process cannot build the run's agent ({error.code}: {error.message}).\n"
        f"The run stays RUNNING: run `stateward resume {run_id} --db {db}` where that agent is registered,"
        " or a `stateward worker` that has it (it picks the run up by itself).\n"
    )
    raise SystemExit(EXIT_NOT_DRIVEN)


class _NotForUs(Exception):
    """The command line is not a plain, well-formed answer: the Typer app handles it."""


class _StrictParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _NotForUs(message)


def _parser(command: str) -> _StrictParser:
    parser = _StrictParser(prog=f"stateward {command}", add_help=False, allow_abbrev=False)
    parser.add_argument("run_id")
    parser.add_argument("request_id")
    parser.add_argument("--db", default=os.environ.get("STATEWARD_DB") or DEFAULT_DB)  # empty means unset, as in Typer
    parser.add_argument("--by", default=os.environ.get("USER", "operator"))
    if command == "reply":
        parser.add_argument("--text", required=True)
    else:
        parser.add_argument("--comment", dest="text")
        parser.add_argument("--digest")
    parser.add_argument("--role", action="append", default=[])
    parser.add_argument("--tenant")
    parser.add_argument("--no-drive", action="store_true")
    parser.add_argument("--json", dest="as_json", action="store_true")
    return parser


def run_fast(argv: list[str]) -> bool:
    """Run ``argv`` if it is a well-formed answer command; False leaves it to the Typer app."""
    if not argv or argv[0] not in VERDICTS or any(a in ("--help", "-h") or a.startswith("--help=") for a in argv):
        return False
    command = argv[0]
    try:
        args = _parser(command).parse_args(argv[1:])
    except _NotForUs:
        return False
    checks = AnswerChecks(args.role, args.tenant, getattr(args, "digest", None), not args.no_drive)
    answer(VERDICTS[command], args.run_id, args.request_id, args.db, args.by, args.text, args.as_json, checks)
    sys.stdout.flush()
    return True
