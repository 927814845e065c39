"""The database schema: runs, their history, approvals, the audit log (and its webhook's cursor) and the
execution ledger.

Alembic migrations (runtime/migrations) are the source of truth for existing databases; this
module describes the same tables for queries and for the first migration.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)

LIVE_APPROVAL = "status IN ('pending', 'approved', 'consumed')"
"""The approvals still in force (`approval.LIVE`, as the migrations wrote it): at most one per key."""


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite forgets the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: object) -> datetime | None:
        if value is None:
            return None
        assert value.tzinfo is not None, "store only timezone-aware datetimes"
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: object) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)

runs = Table(
    "runs",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("goal", Text, nullable=False),
    Column("requester", String(64), nullable=False),
    Column("origin", Text, nullable=False, default="{}"),
    Column("model", String(200), nullable=False),
    Column("status", String(32), nullable=False),
    # The run state without its history, which lives in run_history (appended, never rewritten).
    Column("state", Text, nullable=False),
    Column("history_len", Integer, nullable=False, default=0),
    Column("pending_key", String(160), nullable=True),
    Column("version", Integer, nullable=False, default=1),
    Column("event_count", Integer, nullable=False, default=0),
    # A person's request (cancel, extend, retry, reconcile) waiting for the run's worker to apply it.
    Column("command", Text, nullable=True),
    Column("lease_owner", String(128), nullable=True),
    Column("lease_expires_at", UTCDateTime, nullable=True),
    Column("request_id", String(200), nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    UniqueConstraint("request_id"),
    Index(None, "status", "lease_expires_at"),
    Index(None, "requester", "created_at"),
    Index(None, "updated_at"),
)

run_history = Table(
    "run_history",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("entry", Text, nullable=False),
)

approvals = Table(
    "approvals",
    metadata,
    Column("approval_id", String(64), primary_key=True),
    Column("run_id", String(64), nullable=False, index=True),
    Column("step", Integer, nullable=False),
    Column("tool", String(64), nullable=False),
    Column("args", Text, nullable=False),
    Column("key", String(160), nullable=False),
    Column("digest", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("requester", String(64), nullable=False),
    Column("requested_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Column("decided_at", UTCDateTime, nullable=True),
    Column("decided_by", String(64), nullable=True),
    Column("note", Text, nullable=True),
    Column("message", Text, nullable=True),
    Column("consumed_at", UTCDateTime, nullable=True),
    # The hash of the tool's contract the call was proposed under (see `Tool.contract`).
    Column("contract", String(32), nullable=True),
    # Distinct allowed people who must approve, and what the approval policy required (JSON).
    Column("quorum", Integer, nullable=False, server_default=text("1")),
    Column("asked", Text, nullable=True),
    # The next reminder or escalation (None: none left), and how many were made.
    Column("nudge_at", UTCDateTime, nullable=True),
    Column("nudges", Integer, nullable=False, server_default=text("0")),
    # What its card showed when it was asked (JSON: the preview it is bound to, the budget figures then).
    Column("asked_with", Text, nullable=True),
    # Approved by breaking the glass (JSON: who, why, when, review by when, who is told), its review
    # (JSON), where its review card is, and its follow-ups: the next one due and how many were made.
    Column("glass", Text, nullable=True),
    Column("glass_review", Text, nullable=True),
    Column("glass_message", Text, nullable=True),
    Column("glass_due_at", UTCDateTime, nullable=True),
    Column("glass_nudges", Integer, nullable=False, server_default=text("0")),
    # One approval in force per call; a superseded one (its tool changed) stays for the record.
    Index(None, "key"),
    Index("uq_approvals_live_key", "key", unique=True, sqlite_where=text(LIVE_APPROVAL),
          postgresql_where=text(LIVE_APPROVAL)),
    Index(None, "status", "expires_at"),
    Index(None, "status", "requested_at"),
    Index(None, "requested_at"),
    Index(None, "status", "nudge_at"),
    Index(None, "glass_due_at"),
)

approval_votes = Table(
    "approval_votes",
    metadata,
    # One decision per person per approval: a second click, on any replica, counts for nothing.
    Column("approval_id", String(64), primary_key=True),
    Column("user_id", String(64), primary_key=True),
    Column("seq", Integer, nullable=False),  # 1, 2, ... per approval: the order people decided in
    Column("approved", Boolean, nullable=False),
    Column("note", Text, nullable=True),
    Column("at", UTCDateTime, nullable=False),
)

grants = Table(
    "grants",
    metadata,
    # "Approve + allow similar": later calls of `tool` under `rule` with the `same` arguments run
    # unasked until `expires_at`, in the run (scope run) or the requester's runs (scope requester).
    Column("grant_id", String(64), primary_key=True),
    Column("approval_id", String(64), nullable=False),
    Column("run_id", String(64), nullable=False),
    Column("requester", String(64), nullable=False),
    Column("tool", String(64), nullable=False),
    Column("rule", String(200), nullable=True),
    Column("same", Text, nullable=False),
    Column("scope", String(16), nullable=False),
    Column("created_by", String(64), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Column("revoked_at", UTCDateTime, nullable=True),
    Column("revoked_by", String(64), nullable=True),
    Column("uses", Integer, nullable=False, server_default=text("0")),
    Column("last_used_at", UTCDateTime, nullable=True),
    Index(None, "run_id"),
    Index(None, "requester", "expires_at"),
)

events = Table(
    "events",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("run_id", String(64), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("type", String(64), nullable=False),
    Column("payload", Text, nullable=False),
    Column("at", UTCDateTime, nullable=False),
    # The run's hash chain (`runtime/audit.py`): every write sets both; NULL only in a row written
    # around Signoff, which `signoff audit verify` reports.
    Column("prev_hash", String(64), nullable=True),
    Column("hash", String(64), nullable=True),
    UniqueConstraint("run_id", "seq"),
)

run_chain = Table(
    "run_chain",
    metadata,
    # A link when a run is created (seq 1), and a seal each time a step leaves it waiting or ended
    # (seq: its last event then), in the order they were made: a run deleted, or its events cut
    # back, leaves them behind.
    Column("position", Integer, primary_key=True, autoincrement=False),
    Column("run_id", String(64), nullable=False),
    Column("seq", Integer, nullable=False, server_default=text("1")),
    Column("event_hash", String(64), nullable=False),
    Column("prev_hash", String(64), nullable=False),
    Column("hash", String(64), nullable=False),
    Index(None, "run_id"),
)

audit_head = Table(
    "audit_head",
    metadata,
    # One row (id 1): the end of the chain of runs. Only creating a run, or sealing one, takes it.
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("links", Integer, nullable=False),
    Column("hash", String(64), nullable=False),
)

audit_webhook = Table(
    "audit_webhook",
    metadata,
    # One row (id 1): how far the audit events have been delivered to the webhook, and which
    # replica delivers them (a lease, as on a run). `through` is an `events.id`.
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("target", String(64), nullable=False),
    Column("source", String(64), nullable=False),
    Column("through", BigInteger, nullable=False),
    Column("started_at", UTCDateTime, nullable=False),
    Column("lease_owner", String(128), nullable=True),
    Column("lease_expires_at", UTCDateTime, nullable=True),
    # The failed deliveries in a row: when the first was, how many, and what the last one met.
    Column("failures", Integer, nullable=False, server_default=text("0")),
    Column("failing_since", UTCDateTime, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("delivered_at", UTCDateTime, nullable=True),
)

api_keys = Table(
    "api_keys",
    metadata,
    # A key a program asks for approvals with (`signoff keys create`): only its SHA-256 is kept.
    Column("name", String(64), primary_key=True),
    Column("secret_hash", String(64), nullable=False, unique=True),
    Column("callback_secret", String(80), nullable=False),
    Column("channel", String(32), nullable=False),
    # JSON list of the other channels a request may name for its card.
    Column("other_channels", Text, nullable=False, server_default=text("'[]'")),
    # JSON list of the tool name globs it may ask about (["*"]: any).
    Column("tools", Text, nullable=False),
    Column("requester", String(32), nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("revoked_at", UTCDateTime, nullable=True),
    Column("last_used_at", UTCDateTime, nullable=True),
)

api_callbacks = Table(
    "api_callbacks",
    metadata,
    # The callback of an approval asked for with a `callback_url`, once it is decided: tried until
    # the caller's server answers 2xx, `next_at` also fencing two replicas off one attempt.
    Column("run_id", String(64), primary_key=True),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("next_at", UTCDateTime, nullable=False),
    Column("delivered_at", UTCDateTime, nullable=True),
    Column("last_error", Text, nullable=True),
)

receipts = Table(
    "receipts",
    metadata,
    # The signed receipt of each decision (`runtime/receipts.py`), written in the decision's own
    # transaction: a person's approve or deny (`approval_id`), or a call a rule or grant let start
    # (`approval_id` NULL). `receipt` is the signed JSON as it was signed.
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("run_id", String(64), nullable=False),
    Column("approval_id", String(64), nullable=True),
    Column("key", String(160), nullable=False),
    Column("key_id", String(32), nullable=False),
    Column("receipt", Text, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Index(None, "approval_id"),
    Index(None, "key"),
    Index(None, "run_id"),
)

tool_executions = Table(
    "tool_executions",
    metadata,
    Column("key", String(160), primary_key=True),
    Column("run_id", String(64), nullable=False, index=True),
    Column("tool", String(64), nullable=False),
    Column("digest", String(64), nullable=False),
    # started, succeeded or failed; "started" found after a crash means the outcome is unknown.
    Column("status", String(16), nullable=False),
    Column("result", Text, nullable=True),
    Column("error", Text, nullable=True),
    Column("attempts", Integer, nullable=False, default=1),
    Column("started_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime, nullable=True),
    Column("seconds", Float, nullable=True),
)

notices = Table(
    "notices",
    metadata,
    # The outbox: a message owed to people (`runtime/notices.py`), written in the transaction of the
    # change that owes it and deleted once sent. `next_at` is when it may be taken: a take moves it
    # a fence ahead (no other replica sends it meanwhile), a failed try by its backoff.
    Column("seq", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("run_id", String(64), nullable=False),
    Column("approval_id", String(64), nullable=True),  # None: the run's own (`notices.RunNotice`)
    Column("kind", String(32), nullable=False),
    Column("body", Text, nullable=False),
    Column("made_at", UTCDateTime, nullable=False),
    Column("next_at", UTCDateTime, nullable=False),
    Column("tries", Integer, nullable=False, server_default=text("0")),
    Column("last_error", Text, nullable=True),
    Index(None, "approval_id", "seq"),
    Index(None, "run_id", "seq"),
    Index(None, "next_at"),
    # A notice is dropped by its `seq`, perhaps late (a second taker's redraw), so no seq is ever
    # given twice: SQLite would otherwise give a dropped last one's to the next notice owed.
    sqlite_autoincrement=True,
)

access_reviews = Table(
    "access_reviews",
    metadata,
    # One review of standing access per period of SIGNOFF_REVIEW_SCHEDULE; `period` (its start, by
    # the database's clock) is unique, so of several replicas exactly one opens it. `posting_until`
    # fences the replica posting it; a review still without `ts` after that is posted again.
    Column("review_id", String(64), primary_key=True),
    Column("period", UTCDateTime, nullable=False, unique=True),
    Column("opened_at", UTCDateTime, nullable=False),
    Column("posting_until", UTCDateTime, nullable=True),
    Column("channel", String(32), nullable=True),
    Column("ts", String(32), nullable=True),
    Column("posted_at", UTCDateTime, nullable=True),
    Column("reminded_at", UTCDateTime, nullable=True),
    Column("escalated_at", UTCDateTime, nullable=True),
)

access_review_lines = Table(
    "access_review_lines",
    metadata,
    # A grant (`kind` grant, `subject` its id) or an API key (`kind` key, `subject` its name) put
    # to a review, and its verdict (keep or revoke): set once, by a conditional UPDATE.
    Column("review_id", String(64), primary_key=True),
    Column("kind", String(8), primary_key=True),
    Column("subject", String(64), primary_key=True),
    Column("position", Integer, nullable=False),
    Column("verdict", String(8), nullable=True),
    Column("decided_by", String(64), nullable=True),
    Column("decided_at", UTCDateTime, nullable=True),
)
