"""PostgreSQL: ``steplog_append``, the event store's append as one server-side function, so an
append is one statement and one round trip (autocommit: the statement is its own transaction).

Inside the function each statement takes a new snapshot (PL/pgSQL, READ COMMITTED), so the run's
version and the last position are read *after* the transaction-scoped position lock: positions
stay gapless and commit-ordered. A stale expected version stores nothing and returns
``-1 - current version``; otherwise the first of the batch's consecutive positions. A stored
event id raises the unique violation as a plain ``INSERT`` would. SQLite: nothing to do.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Arguments are text (one per column, not per event): the client joins the batch's ids, versions
# and times into array literals and its payloads and types into JSON arrays, in C, and the server
# parses each once. ``p_at`` is NULL when every event takes ``p_now``.
APPEND_FUNCTION = """\
CREATE FUNCTION steplog_append(
    p_run_id text, p_expected integer, p_now timestamptz, p_ids text, p_types text,
    p_versions text, p_at text, p_payloads text
) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_version integer;
    v_position bigint;
BEGIN
    -- The lock of store_append.POSITION_LOCK_SQL: one per events table (its OID).
    PERFORM pg_advisory_xact_lock((x'57E9106'::bigint << 32) | 'events'::regclass::oid::bigint);
    SELECT coalesce(max(seq) + 1, 0) INTO v_version FROM events WHERE run_id = p_run_id;
    IF p_expected IS NOT NULL AND v_version <> p_expected THEN
        RETURN -1 - v_version;
    END IF;
    SELECT coalesce(max(position), 0) INTO v_position FROM events;
    INSERT INTO events (position, event_id, run_id, seq, type, schema_version, recorded_at,
                        payload)
    SELECT v_position + u.n, u.id, p_run_id, v_version + u.n - 1, u.type, u.ver,
           coalesce(u.at, p_now), u.payload
    FROM ROWS FROM (
        unnest(p_ids::uuid[]),
        jsonb_array_elements_text(p_types::jsonb),
        unnest(p_versions::integer[]),
        unnest(p_at::timestamptz[]),
        jsonb_array_elements(p_payloads::jsonb)
    ) WITH ORDINALITY AS u(id, type, ver, at, payload, n);
    RETURN v_position + 1;
END
$$"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(APPEND_FUNCTION)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "DROP FUNCTION steplog_append(text, integer, timestamptz, text, text, text, text, text)"
        )
