"""PostgreSQL: ``steplog_append_one``, the append of a single event (the recorder's and most
callers' batch) as a server-side function of scalar arguments.

``steplog_append`` (migration 0007) takes each column as an array or JSON document that the
server parses and unnests (five set-returning functions, one ``INSERT ... SELECT``); for one
event that machinery costs more than the insert itself. This one takes the event's columns as
they are (``uuid``, ``jsonb``, ...) and inserts one ``VALUES`` row, under the same lock, with
the same version check, return value and errors. SQLite: nothing to do.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Each statement takes a new snapshot (PL/pgSQL, READ COMMITTED, VOLATILE), so the version and
# the last position are read after the position lock (see 0007). A stale expected version
# stores nothing and returns ``-1 - current version``; otherwise the event's position.
APPEND_ONE_FUNCTION = """\
CREATE FUNCTION steplog_append_one(
    p_run_id text, p_expected integer, p_now timestamptz, p_id uuid, p_type text,
    p_version integer, p_at timestamptz, p_payload jsonb
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
    SELECT coalesce(max(position), 0) + 1 INTO v_position FROM events;
    INSERT INTO events (position, event_id, run_id, seq, type, schema_version, recorded_at,
                        payload)
    VALUES (v_position, p_id, p_run_id, v_version, p_type, p_version, coalesce(p_at, p_now),
            p_payload);
    RETURN v_position;
END
$$"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(APPEND_ONE_FUNCTION)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "DROP FUNCTION steplog_append_one(text, integer, timestamptz, uuid, text, integer, "
            "timestamptz, jsonb)"
        )
