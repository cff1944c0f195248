"""Schema migrations, applied in order on open. Never edit a released entry; append a new one."""

from __future__ import annotations

_AGENT_NAMES = """UPDATE runs SET agent = CASE agent
        WHEN 'stateward.demos.blog:build_agent' THEN 'blog'
        WHEN 'stateward.demos.payment.agent:build_agent' THEN 'payment-migration'
        WHEN 'stateward.chaos.agent:build_agent' THEN 'chaos-ledger'
        ELSE agent END"""

_REQUEST_TENANTS = (
    "UPDATE pending_requests SET tenant = (SELECT r.tenant FROM runs AS r WHERE r.run_id = pending_requests.run_id)"
)
_OPEN_BY_TENANT = (
    "CREATE INDEX pending_requests_open_by_tenant ON pending_requests(tenant, run_id, request_id) WHERE answer IS NULL"
)


def _OPEN_BY(column: str) -> str:
    """A tenant's open requests by ``column``, in the inbox's order."""
    return (
        f"CREATE INDEX pending_requests_open_by_{column} ON pending_requests(tenant, {column}, run_id, request_id)"
        " WHERE answer IS NULL"
    )


# Where the server was built with lz4 (PostgreSQL 14+; pg_settings lists only the methods it has).
_LZ4 = """DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)) THEN
        ALTER TABLE runs ALTER COLUMN snapshot SET COMPRESSION lz4;
        ALTER TABLE checkpoints ALTER COLUMN snapshot SET COMPRESSION lz4;
        ALTER TABLE state_parts ALTER COLUMN body SET COMPRESSION lz4;
        ALTER TABLE event_batches ALTER COLUMN events SET COMPRESSION lz4;
    END IF;
END $$"""

SQLITE_MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE runs (
            run_key INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused, even after a run is deleted by hand
            run_id TEXT NOT NULL UNIQUE,
            agent TEXT NOT NULL,
            status TEXT NOT NULL,
            terminal_reason TEXT,
            snapshot TEXT NOT NULL,
            last_seq INTEGER NOT NULL,
            tenant TEXT NOT NULL DEFAULT 'default',
            control TEXT,
            lease_owner TEXT,
            lease_version INTEGER NOT NULL DEFAULT 0,
            lease_expires_at REAL,
            created_at TEXT NOT NULL,
            updated_at REAL NOT NULL)""",
        "CREATE INDEX runs_by_status ON runs(status)",
        # The events one transaction appends are one row: seq is the batch's last event, the batch holds
        # events seq - count + 1 .. seq as a JSON array of [type, payload] (Temporal keeps its history
        # the same way, a batch per task). Rows are clustered by (run_key, seq): run_key grows with
        # creation, so the runs being driven (the newest) append at the right edge of the B-tree.
        """CREATE TABLE event_batches (
            run_key INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            count INTEGER NOT NULL CHECK (count > 0),
            events TEXT NOT NULL,
            lease_version INTEGER NOT NULL DEFAULT 0,
            at INTEGER NOT NULL,
            PRIMARY KEY (run_key, seq)) WITHOUT ROWID""",
        # One row per event, for people reading the file with the sqlite3 shell.
        """CREATE VIEW events AS
            SELECT r.run_id AS run_id, b.seq - b.count + 1 + e.key AS seq,
                   json_extract(e.value, '$[0]') AS type, json_extract(e.value, '$[1]') AS payload,
                   b.lease_version AS lease_version, b.at AS at
            FROM event_batches AS b JOIN runs AS r USING (run_key), json_each(b.events) AS e""",
        """CREATE TABLE pending_requests (
            run_id TEXT NOT NULL,
            request_id TEXT NOT NULL,
            body TEXT NOT NULL,
            answer TEXT,
            PRIMARY KEY (run_id, request_id))""",
        """CREATE TABLE artifacts (
            run_id TEXT NOT NULL,
            name TEXT NOT NULL,
            version INTEGER NOT NULL,
            sha256 TEXT NOT NULL,
            media_type TEXT NOT NULL,
            content TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (run_id, name, version))""",
        """CREATE TABLE tool_attempts (
            attempt_id TEXT PRIMARY KEY,
            run_id TEXT NOT NULL,
            step INTEGER NOT NULL,
            body TEXT NOT NULL)""",
        "CREATE INDEX tool_attempts_by_run ON tool_attempts(run_id, step)",
        """CREATE TABLE side_effects (
            idempotency_key TEXT PRIMARY KEY,
            run_id TEXT NOT NULL,
            tool TEXT NOT NULL,
            status TEXT NOT NULL,
            body TEXT NOT NULL)""",
        "CREATE TABLE breakers (tool TEXT PRIMARY KEY, body TEXT NOT NULL)",
        """CREATE TABLE checkpoints (
            run_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            reason TEXT NOT NULL,
            snapshot TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (run_id, seq))""",
    ],
    # 2: single-use approvals (the journal row that starts a guarded call holds its grant, one key per
    # grant); agents by registered name (the runs.agent column named an import path before); a run may
    # be held back until a time (a crashed step's backoff, a model outage's retry): claim_next skips a
    # RUNNING run until then, and the retry sweep finds PAUSED ones that are due.
    [
        "ALTER TABLE side_effects ADD COLUMN grant_id TEXT",
        "CREATE UNIQUE INDEX side_effects_one_use_per_grant ON side_effects(run_id, grant_id)"
        " WHERE grant_id IS NOT NULL",
        _AGENT_NAMES,
        "ALTER TABLE runs ADD COLUMN not_before REAL",
        "CREATE INDEX runs_due ON runs(status, not_before) WHERE not_before IS NOT NULL",
    ],
    # 3: listings page by keyset, newest first on (created_at, run_id), each filter with its own index
    # so a first page reads a page of index entries whatever the number of runs; the status index
    # gains the same key (one index still, so a status change rewrites no more than before). Open
    # requests have their own partial index, as in PostgreSQL.
    [
        "CREATE INDEX runs_by_created ON runs(created_at, run_id)",
        "DROP INDEX runs_by_status",
        "CREATE INDEX runs_by_status ON runs(status, created_at, run_id)",
        "CREATE INDEX runs_by_tenant ON runs(tenant, created_at, run_id)",
        "CREATE INDEX runs_by_agent ON runs(agent, created_at, run_id)",
        "CREATE INDEX pending_requests_open ON pending_requests(run_id, request_id) WHERE answer IS NULL",
    ],
    # 4: the HTTP service's identities (API keys: the SHA-256 of the secret, never the secret) and the
    # first response to each Idempotency-Key of a tenant, so a replayed answer returns it.
    [
        """CREATE TABLE api_keys (
            key_id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            tenant TEXT NOT NULL,
            roles TEXT NOT NULL,
            secret_sha256 TEXT NOT NULL,
            created_at TEXT NOT NULL,
            revoked_at TEXT)""",
        """CREATE TABLE api_responses (
            tenant TEXT NOT NULL,
            idempotency_key TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            status_code INTEGER NOT NULL,
            body TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (tenant, idempotency_key))""",
    ],
    # 5: webhooks: per-tenant subscriptions and the outbox of deliveries a step writes in its own
    # transaction (store/outbox.py); times are epoch seconds, as in PostgreSQL. Requests carry their tenant.
    [
        """CREATE TABLE webhooks (
            subscription_id TEXT PRIMARY KEY,
            tenant TEXT NOT NULL,
            url TEXT NOT NULL,
            secret TEXT NOT NULL,
            kinds TEXT NOT NULL,
            created_at REAL NOT NULL)""",
        "CREATE INDEX webhooks_by_tenant ON webhooks(tenant)",
        """CREATE TABLE webhook_deliveries (
            delivery_id TEXT PRIMARY KEY,
            subscription_id TEXT NOT NULL,
            event_id TEXT NOT NULL,
            tenant TEXT NOT NULL,
            run_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            body TEXT NOT NULL,
            status TEXT NOT NULL,
            attempts INTEGER NOT NULL,
            next_attempt_at REAL NOT NULL,
            delivered_at REAL,
            last_error TEXT,
            created_at REAL NOT NULL)""",
        "CREATE INDEX webhook_deliveries_due ON webhook_deliveries(status, next_attempt_at)",
        "CREATE INDEX webhook_deliveries_by_tenant ON webhook_deliveries(tenant, created_at)",
        # A tenant's inbox pages by its own index: the request rows carry their run's tenant (it never
        # changes), so the first page reads a page of index entries however many tenants share the store.
        "ALTER TABLE pending_requests ADD COLUMN tenant TEXT",
        _REQUEST_TENANTS,
        _OPEN_BY_TENANT,
    ],
    # 6: large memo entries (a plan) are parts of their run, addressed by the SHA-256 of their JSON and
    # written only when they change (store/parts.py); a run's row and a checkpoint name theirs in ``parts``.
    [
        """CREATE TABLE state_parts (
            run_key INTEGER NOT NULL,
            digest TEXT NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (run_key, digest))""",
        "ALTER TABLE runs ADD COLUMN parts TEXT",
        "ALTER TABLE checkpoints ADD COLUMN parts TEXT",
    ],
    # 7: browser sessions signed out (their ids, until they would have expired), so a sign-out holds
    # across restarts and processes (store/sessions.py).
    [
        """CREATE TABLE revoked_sessions (
            session_id TEXT PRIMARY KEY,
            expires_at REAL NOT NULL)""",
    ],
    # 8: a run's agent version beside its name, so a worker claims only runs its build may drive
    # (runtime/agent_registry.py); runs recorded before have theirs copied from their snapshot.
    [
        "ALTER TABLE runs ADD COLUMN agent_version TEXT",
        "UPDATE runs SET agent_version = json_extract(snapshot, '$.agent.version') WHERE json_valid(snapshot)",
    ],
    # 9: the console searches runs by goal text and filters them by agent version in the query: the
    # goal's first 500 characters (paging.GOAL_SEARCH_CHARS) beside the run (copied from the snapshots of
    # runs recorded before), read from an index a tenant's search walks in the listing's order without
    # touching the rows, and a tenant's runs by version in that order too.
    [
        "ALTER TABLE runs ADD COLUMN goal TEXT",
        "UPDATE runs SET goal = substr(json_extract(snapshot, '$.goal'), 1, 500) WHERE json_valid(snapshot)",
        "CREATE INDEX runs_search ON runs(tenant, created_at, run_id, goal)",
        "CREATE INDEX runs_by_version ON runs(tenant, agent_version, created_at, run_id)",
    ],
    # 10: the inbox filters open requests by kind, agent and approver role in the query: each request row
    # carries them (copied from its body and its run for rows recorded before), each with a partial index
    # of a tenant's open requests in the listing's order.
    [
        "ALTER TABLE pending_requests ADD COLUMN kind TEXT",
        "ALTER TABLE pending_requests ADD COLUMN approver_role TEXT",
        "ALTER TABLE pending_requests ADD COLUMN agent TEXT",
        """UPDATE pending_requests SET
            kind = CASE WHEN json_valid(body) THEN coalesce(json_extract(body, '$.kind'), 'approval') END,
            approver_role = CASE WHEN json_valid(body) THEN json_extract(body, '$.approver_role') END,
            agent = (SELECT r.agent FROM runs AS r WHERE r.run_id = pending_requests.run_id)""",
        _OPEN_BY("kind"),
        _OPEN_BY("agent"),
        _OPEN_BY("approver_role"),
    ],
    # 11: lineage. A fork shares its source's history up to ``fork_seq`` (its events are read from the
    # source's rows, never copied: see runtime/fork.py); the source's forks are found by this index.
    [
        "ALTER TABLE runs ADD COLUMN forked_from TEXT",
        "ALTER TABLE runs ADD COLUMN fork_seq INTEGER",
        "CREATE INDEX runs_forks ON runs(forked_from, created_at, run_id) WHERE forked_from IS NOT NULL",
    ],
]

# PostgreSQL: the same tables. Identifiers sort byte-wise (COLLATE "C") so listings order exactly as
# in SQLite; JSON is kept as text so every document round-trips byte for byte (cast to jsonb to
# query it); times are the database's clock; lease expiry is epoch seconds by that clock.
POSTGRES_MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE runs (
            run_id TEXT COLLATE "C" PRIMARY KEY,
            agent TEXT NOT NULL,
            status TEXT NOT NULL,
            terminal_reason TEXT,
            snapshot TEXT NOT NULL,
            last_seq BIGINT NOT NULL,
            tenant TEXT NOT NULL DEFAULT 'default',
            control TEXT,
            lease_owner TEXT,
            lease_version BIGINT NOT NULL DEFAULT 0,
            lease_expires_at DOUBLE PRECISION,
            created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            updated_at TIMESTAMPTZ NOT NULL DEFAULT now())""",
        "CREATE INDEX runs_by_status ON runs(status, updated_at, run_id)",
        "CREATE INDEX runs_by_created ON runs(created_at DESC, run_id)",
        """CREATE TABLE events (
            run_id TEXT COLLATE "C" NOT NULL,
            seq BIGINT NOT NULL,
            type TEXT NOT NULL,
            payload TEXT NOT NULL,
            lease_version BIGINT NOT NULL DEFAULT 0,
            at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (run_id, seq))""",
        """CREATE TABLE pending_requests (
            run_id TEXT COLLATE "C" NOT NULL,
            request_id TEXT COLLATE "C" NOT NULL,
            body TEXT NOT NULL,
            answer TEXT,
            PRIMARY KEY (run_id, request_id))""",
        "CREATE INDEX pending_requests_open ON pending_requests(run_id, request_id) WHERE answer IS NULL",
        """CREATE TABLE artifacts (
            run_id TEXT COLLATE "C" NOT NULL,
            name TEXT COLLATE "C" NOT NULL,
            version BIGINT NOT NULL,
            sha256 TEXT NOT NULL,
            media_type TEXT NOT NULL,
            content TEXT NOT NULL,
            created_at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (run_id, name, version))""",
        """CREATE TABLE tool_attempts (
            attempt_id TEXT COLLATE "C" PRIMARY KEY,
            run_id TEXT COLLATE "C" NOT NULL,
            step BIGINT NOT NULL,
            body TEXT NOT NULL)""",
        "CREATE INDEX tool_attempts_by_run ON tool_attempts(run_id, step)",
        """CREATE TABLE side_effects (
            idempotency_key TEXT COLLATE "C" PRIMARY KEY,
            run_id TEXT COLLATE "C" NOT NULL,
            tool TEXT NOT NULL,
            status TEXT NOT NULL,
            body TEXT NOT NULL)""",
        "CREATE INDEX side_effects_by_run ON side_effects(run_id, status)",
        'CREATE TABLE breakers (tool TEXT COLLATE "C" PRIMARY KEY, body TEXT NOT NULL)',
        """CREATE TABLE checkpoints (
            run_id TEXT COLLATE "C" NOT NULL,
            seq BIGINT NOT NULL,
            reason TEXT NOT NULL,
            snapshot TEXT NOT NULL,
            created_at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (run_id, seq))""",
    ],
    [
        'ALTER TABLE side_effects ADD COLUMN grant_id TEXT COLLATE "C"',
        "CREATE UNIQUE INDEX side_effects_one_use_per_grant ON side_effects(run_id, grant_id)"
        " WHERE grant_id IS NOT NULL",
        _AGENT_NAMES,
        "ALTER TABLE runs ADD COLUMN not_before DOUBLE PRECISION",
        "CREATE INDEX runs_due ON runs(status, not_before) WHERE not_before IS NOT NULL",
    ],  # 3: keyset listings newest first on (created_at, run_id), one direction so a row comparison
    # bounds an index scan; runs_by_status stays (status, updated_at, run_id) for claim_next.
    [
        "DROP INDEX runs_by_created",
        "CREATE INDEX runs_by_created ON runs(created_at, run_id)",
        "CREATE INDEX runs_by_status_created ON runs(status, created_at, run_id)",
        "CREATE INDEX runs_by_tenant ON runs(tenant, created_at, run_id)",
        "CREATE INDEX runs_by_agent ON runs(agent, created_at, run_id)",
    ],
    # 4: API keys and idempotent responses, as in SQLite.
    [
        """CREATE TABLE api_keys (
            key_id TEXT COLLATE "C" PRIMARY KEY,
            name TEXT NOT NULL,
            tenant TEXT COLLATE "C" NOT NULL,
            roles TEXT NOT NULL,
            secret_sha256 TEXT NOT NULL,
            created_at TIMESTAMPTZ NOT NULL,
            revoked_at TIMESTAMPTZ)""",
        """CREATE TABLE api_responses (
            tenant TEXT COLLATE "C" NOT NULL,
            idempotency_key TEXT COLLATE "C" NOT NULL,
            fingerprint TEXT NOT NULL,
            status_code INTEGER NOT NULL,
            body TEXT NOT NULL,
            created_at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (tenant, idempotency_key))""",
    ],
    # 5: webhooks and their outbox, and requests carrying their tenant, as in SQLite.
    [
        """CREATE TABLE webhooks (
            subscription_id TEXT COLLATE "C" PRIMARY KEY,
            tenant TEXT COLLATE "C" NOT NULL,
            url TEXT NOT NULL,
            secret TEXT NOT NULL,
            kinds TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL)""",
        "CREATE INDEX webhooks_by_tenant ON webhooks(tenant)",
        """CREATE TABLE webhook_deliveries (
            delivery_id TEXT COLLATE "C" PRIMARY KEY,
            subscription_id TEXT COLLATE "C" NOT NULL,
            event_id TEXT COLLATE "C" NOT NULL,
            tenant TEXT COLLATE "C" NOT NULL,
            run_id TEXT COLLATE "C" NOT NULL,
            kind TEXT NOT NULL,
            body TEXT NOT NULL,
            status TEXT NOT NULL,
            attempts INTEGER NOT NULL,
            next_attempt_at DOUBLE PRECISION NOT NULL,
            delivered_at DOUBLE PRECISION,
            last_error TEXT,
            created_at DOUBLE PRECISION NOT NULL)""",
        "CREATE INDEX webhook_deliveries_due ON webhook_deliveries(status, next_attempt_at)",
        "CREATE INDEX webhook_deliveries_by_tenant ON webhook_deliveries(tenant, created_at)",
        # A tenant's inbox pages by its own index: the request rows carry their run's tenant (it never
        # changes), so the first page reads a page of index entries however many tenants share the store.
        'ALTER TABLE pending_requests ADD COLUMN tenant TEXT COLLATE "C"',
        _REQUEST_TENANTS,
        _OPEN_BY_TENANT,
    ],
    # 6: large memo entries as parts of their run, written only when they change, as in SQLite.
    [
        """CREATE TABLE state_parts (
            run_id TEXT COLLATE "C" NOT NULL,
            digest TEXT NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (run_id, digest))""",
        "ALTER TABLE runs ADD COLUMN parts TEXT",
        "ALTER TABLE checkpoints ADD COLUMN parts TEXT",
    ],
    # 7: a worker's step writes two tuples and one index entry (its events'). The run row's update is
    # heap-only (HOT: no index entry; the page's dead versions are pruned to make room) when no indexed
    # column changes: claim_next orders by queued_at (set by a write that leaves the run without a lease)
    # instead of updated_at, which every step changes. Pages stay full (fillfactor 100): pruning made room
    # for 100% of 3,000 steps over 300 runs on full pages. A step's events are one row, as in SQLite; the
    # ``events`` view shows one row per event. Large documents (a snapshot over ~2 KB) are compressed
    # with lz4 where the server has it: pglz cost 1.6-2.6x the server CPU of a step at 5-15 KB snapshots,
    # for the same stored size.
    [
        "ALTER TABLE runs ADD COLUMN queued_at TIMESTAMPTZ",
        "UPDATE runs SET queued_at = updated_at",
        "ALTER TABLE runs ALTER COLUMN queued_at SET DEFAULT now(), ALTER COLUMN queued_at SET NOT NULL",
        "DROP INDEX runs_by_status",
        "CREATE INDEX runs_claim_order ON runs(status, queued_at, run_id)",
        """CREATE TABLE event_batches (
            run_id TEXT COLLATE "C" NOT NULL,
            seq BIGINT NOT NULL,
            count INTEGER NOT NULL CHECK (count > 0),
            events TEXT NOT NULL,
            lease_version BIGINT NOT NULL DEFAULT 0,
            at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (run_id, seq))""",
        """INSERT INTO event_batches(run_id, seq, count, events, lease_version, at)
            SELECT run_id, seq, 1, '[[' || to_json(type)::text || ',' || payload || ']]', lease_version, at
            FROM events""",
        "DROP TABLE events",
        _LZ4,
        """CREATE VIEW events AS
            SELECT b.run_id, b.seq - b.count + e.n AS seq, e.item->>0 AS type, (e.item->1)::text AS payload,
                   b.lease_version, b.at
            FROM event_batches AS b
                CROSS JOIN LATERAL json_array_elements(b.events::json) WITH ORDINALITY AS e(item, n)""",
    ],
    # 8: signed-out browser sessions, as in SQLite.
    [
        """CREATE TABLE revoked_sessions (
            session_id TEXT COLLATE "C" PRIMARY KEY,
            expires_at DOUBLE PRECISION NOT NULL)""",
    ],
    # 9: a run's agent version beside its name, as in SQLite (8).
    [
        "ALTER TABLE runs ADD COLUMN agent_version TEXT",
        # A snapshot that is no JSON leaves every version unknown (NULL: built as before versions existed).
        """DO $$ BEGIN
            UPDATE runs SET agent_version = (snapshot::json -> 'agent' ->> 'version');
        EXCEPTION WHEN others THEN NULL;
        END $$""",
    ],
    # 10: a run's goal (its first 500 characters) searchable, and versions filtered by index,
    # as in SQLite (9).
    [
        "ALTER TABLE runs ADD COLUMN goal TEXT",
        """DO $$ BEGIN
            UPDATE runs SET goal = left(snapshot::json ->> 'goal', 500);
        EXCEPTION WHEN others THEN NULL;
        END $$""",
        "CREATE INDEX runs_search ON runs(tenant, created_at, run_id) INCLUDE (goal)",
        "CREATE INDEX runs_by_version ON runs(tenant, agent_version, created_at, run_id)",
    ],
    # 11: open requests filtered by kind, agent and approver role by index, as in SQLite (10).
    [
        'ALTER TABLE pending_requests ADD COLUMN kind TEXT COLLATE "C"',
        'ALTER TABLE pending_requests ADD COLUMN approver_role TEXT COLLATE "C"',
        'ALTER TABLE pending_requests ADD COLUMN agent TEXT COLLATE "C"',
        """DO $$ BEGIN
            UPDATE pending_requests SET kind = coalesce(body::json ->> 'kind', 'approval'),
                approver_role = body::json ->> 'approver_role';
        EXCEPTION WHEN others THEN NULL;
        END $$""",
        "UPDATE pending_requests AS p SET agent = r.agent FROM runs AS r WHERE r.run_id = p.run_id",
        _OPEN_BY("kind"),
        _OPEN_BY("agent"),
        _OPEN_BY("approver_role"),
    ],
    # 12: lineage, as in SQLite (11).
    [
        'ALTER TABLE runs ADD COLUMN forked_from TEXT COLLATE "C"',
        "ALTER TABLE runs ADD COLUMN fork_seq BIGINT",
        "CREATE INDEX runs_forks ON runs(forked_from, created_at, run_id) WHERE forked_from IS NOT NULL",
    ],
]
