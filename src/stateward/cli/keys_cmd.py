"""``stateward keys``: API keys of the HTTP service, managed by the operator with direct store access."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from stateward.cli import DEFAULT_DB
from stateward.cli.output import emit_json, print_table, reported_errors

app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="API keys of the HTTP service (stored hashed; secrets shown once).",
)

DbOpt = Annotated[
    str, typer.Option("--db", envvar="STATEWARD_DB", help="SQLite path or postgresql:// URL (default ./stateward.db).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _keys(db: str, *, create: bool = False, writes: bool = False) -> Any:
    from stateward.api.app import key_store
    from stateward.cli.plugins import open_runtime

    return key_store(open_runtime(db, create=create, writes=writes))


def _row(record: Any) -> dict[str, Any]:
    return {
        "key_id": record.key_id,
        "name": record.name,
        "tenant": record.tenant,
        "roles": list(record.roles),
        "created_at": record.created_at.isoformat(),
        "revoked_at": None if record.revoked_at is None else record.revoked_at.isoformat(),
    }


@app.command("create")
def create(
    tenant: Annotated[str, typer.Option("--tenant", help="The tenant every call with this key acts in.")],
    name: Annotated[str, typer.Option("--name", help="Who holds the key; recorded on every answer it gives.")],
    role: Annotated[
        list[str],
        typer.Option(
            "--role",
            help="viewer, submitter, approver, operator or admin (repeatable); other names are domain roles matched"
            " against a request's approver_role.",
        ),
    ],
    db: DbOpt = DEFAULT_DB,
    new_store: Annotated[
        bool,
        typer.Option("--new-store", help="Create the store if there is none (the first key of a new deployment)."),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Make a key and print its secret once (only its SHA-256 is stored). A missing store is refused
    (STORE_NOT_FOUND: a mistyped --db never becomes a new empty store) unless --new-store."""
    from stateward.api.identity import mint_key

    with reported_errors(as_json):
        record, token = mint_key(
            _keys(db, create=new_store, writes=True), tenant=tenant, name=name, roles=role, now=datetime.now(UTC)
        )
    out = {**_row(record), "key": token}
    if as_json:
        emit_json(out)
        return
    typer.echo(f"key {record.key_id} for {record.name} in tenant {record.tenant}, roles {', '.join(record.roles)}")
    typer.echo(f"secret (shown once; send as 'Authorization: Bearer <secret>'):\n{token}")


@app.command("list")
def list_keys(db: DbOpt = DEFAULT_DB, as_json: JsonOpt = False) -> None:
    """Every key (revoked ones too), oldest first; never a secret."""
    with reported_errors(as_json):
        rows = [_row(r) for r in _keys(db).list_api_keys()]
    if as_json:
        emit_json({"keys": rows})
        return
    print_table("keys", ("key_id", "name", "tenant", "roles", "created_at", "revoked_at"), rows)


@app.command("revoke")
def revoke(key_id: str, db: DbOpt = DEFAULT_DB, as_json: JsonOpt = False) -> None:
    """Revoke a key: every later call with it is 401 (KEY_NOT_FOUND if there is no such key)."""
    with reported_errors(as_json):
        record = _keys(db, writes=True).revoke_api_key(key_id, datetime.now(UTC))
    if as_json:
        emit_json(_row(record))
    else:
        typer.echo(f"revoked {record.key_id} ({record.name}) at {record.revoked_at}")
