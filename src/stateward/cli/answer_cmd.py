"""``stateward approve / reject / reply``: Typer's definitions (help, usage errors); the short path
that answers without importing Typer is cli/answers.py, and both end in its :func:`answer`."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from stateward.cli import DEFAULT_DB
from stateward.cli.plugins import DbOpt, JsonOpt

ByOpt = Annotated[str, typer.Option("--by", help="Who answers (recorded).")]


RoleOpt = Annotated[list[str] | None, typer.Option("--role", help="A role the answerer holds (repeatable).")]


TenantOpt = Annotated[str | None, typer.Option("--tenant", help="The answerer's tenant; must match the run's.")]


DigestOpt = Annotated[
    str | None, typer.Option("--digest", help="Digest of the guarded action you reviewed; must match the request's.")
]


NoDriveOpt = Annotated[bool, typer.Option("--no-drive", help="Record the answer only; a worker continues the run.")]


def approve(
    run_id: str,
    request_id: str,
    db: DbOpt = DEFAULT_DB,
    by: ByOpt = os.environ.get("USER", "operator"),
    comment: Annotated[str | None, typer.Option()] = None,
    role: RoleOpt = None,
    tenant: TenantOpt = None,
    digest: DigestOpt = None,
    no_drive: NoDriveOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Approve a pending request and resume the run to its next stop.

    For a reconciliation this says "it happened": the call is recorded as succeeded, confirmed by you."""
    from stateward.cli.answers import AnswerChecks, answer

    checks = AnswerChecks(role or [], tenant, digest, not no_drive)
    answer("approved", run_id, request_id, db, by, comment, as_json, checks)


def reject(
    run_id: str,
    request_id: str,
    db: DbOpt = DEFAULT_DB,
    by: ByOpt = os.environ.get("USER", "operator"),
    comment: Annotated[str | None, typer.Option()] = None,
    role: RoleOpt = None,
    tenant: TenantOpt = None,
    digest: DigestOpt = None,
    no_drive: NoDriveOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Reject a pending request (with a comment) and resume the run to its next stop.

    For a reconciliation this says "it did not happen": NOT_EXECUTED, then the tool's retry policy decides."""
    from stateward.cli.answers import AnswerChecks, answer

    checks = AnswerChecks(role or [], tenant, digest, not no_drive)
    answer("rejected", run_id, request_id, db, by, comment, as_json, checks)


def reply(
    run_id: str,
    request_id: str,
    text: Annotated[str, typer.Option("--text")],
    db: DbOpt = DEFAULT_DB,
    by: ByOpt = os.environ.get("USER", "operator"),
    role: RoleOpt = None,
    tenant: TenantOpt = None,
    no_drive: NoDriveOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Answer a question with text and resume the run to its next stop."""
    from stateward.cli.answers import AnswerChecks, answer

    answer("replied", run_id, request_id, db, by, text, as_json, AnswerChecks(role or [], tenant, None, not no_drive))
