"""The statements of the approval path and of every run's pass, built once at import.

SQLAlchemy finds a statement's compiled form in its cache by a key it keeps on the statement
object: a statement built per call pays for its construction and for hashing that key every time,
about as much as executing it on SQLite. These run on every claim, decision, start of a call and
read of a run, so they are built here, once, with named parameters (`b_...`: a name must differ
from the columns a statement sets).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Column, bindparam, insert, or_, select, update

from signoff.runtime.adapters.tables import approval_votes, approvals, run_history, runs, tool_executions
from signoff.runtime.rules import NOT_ENDED
from signoff.runtime.schema import REOPENABLE


def param(name: str, column: Column[Any]) -> Any:
    """A named parameter typed like `column` (its type decides how a moment is stored)."""
    return bindparam(f"b_{name}", type_=column.type)


_RUN_ID = param("run_id", runs.c.run_id)
_NOW = param("now", runs.c.lease_expires_at)
_OWNER = param("owner", runs.c.lease_owner)
_UNTIL = param("until", runs.c.lease_expires_at)


def lease_params(run_id: str, owner: str, now: datetime, lease: timedelta) -> dict[str, Any]:
    """The parameters of a statement that leases `run_id` to `owner` from `now` for `lease`."""
    return {"b_run_id": run_id, "b_owner": owner, "b_now": now, "b_until": now + lease}

CLAIMABLE = or_(runs.c.status.in_(sorted(NOT_ENDED)),
                runs.c.status.in_(sorted(REOPENABLE)) & runs.c.command.is_not(None))
"""`rules.claimable` as a condition on the runs table."""

_FREE = or_(runs.c.lease_owner.is_(None), runs.c.lease_expires_at < _NOW)

# -- reads -------------------------------------------------------------------------------

RUN_BY_ID = select(runs).where(runs.c.run_id == _RUN_ID)
HISTORY_OF_RUN = select(run_history.c.entry).where(run_history.c.run_id == _RUN_ID).order_by(run_history.c.seq)
_IN_FORCE_FIRST = ((approvals.c.status == "superseded").asc(), approvals.c.requested_at.desc())
APPROVAL_BY_ID = (select(approvals).where(approvals.c.approval_id == param("approval_id", approvals.c.approval_id))
                  .order_by(*_IN_FORCE_FIRST).limit(1))
APPROVAL_BY_KEY = select(approvals).where(approvals.c.key == param("key", approvals.c.key)).order_by(
    *_IN_FORCE_FIRST).limit(1)
"""The call's approval in force (or, when none is, its latest)."""

# -- leases ------------------------------------------------------------------------------

CLAIM = (update(runs).where(runs.c.run_id == _RUN_ID, CLAIMABLE, or_(_FREE, runs.c.lease_owner == _OWNER))
         .values(lease_owner=_OWNER, lease_expires_at=_UNTIL))
"""Take the run's lease: nobody holds a live one (the holder may claim again), and the run has not ended."""
TAKE_FREE_LEASE = update(runs).where(runs.c.run_id == _RUN_ID, CLAIMABLE, _FREE).values(
    lease_owner=_OWNER, lease_expires_at=_UNTIL)
"""A decider's claim on the run it decided, in the decision's transaction: only a lease nobody holds."""
HOLD = update(runs).where(runs.c.run_id == _RUN_ID, _FREE).values(lease_owner=_OWNER, lease_expires_at=_UNTIL)
RENEW = update(runs).where(runs.c.run_id == _RUN_ID, runs.c.lease_owner == _OWNER).values(lease_expires_at=_UNTIL)
RELEASE = update(runs).where(runs.c.run_id == _RUN_ID, runs.c.lease_owner == _OWNER).values(
    lease_owner=None, lease_expires_at=None)
FENCE = (update(runs).where(runs.c.run_id == _RUN_ID, runs.c.lease_owner == _OWNER, runs.c.lease_expires_at > _NOW)
         .values(lease_expires_at=_UNTIL).returning(runs.c.command, runs.c.version, runs.c.requester, runs.c.status))
"""Renew a live lease its holder still has, or change nothing: what a call may start behind."""

# -- decisions ---------------------------------------------------------------------------

_APPROVAL_ID = param("approval_id", approvals.c.approval_id)
RUN_OF_APPROVAL = select(approvals.c.run_id).where(approvals.c.approval_id == _APPROVAL_ID)
LOCK_RUN = select(runs.c.run_id).where(runs.c.run_id == _RUN_ID).with_for_update()
HELD_RUN = (select(runs.c.requester, runs.c.status, runs.c.version, runs.c.command)
            .where(runs.c.run_id == _RUN_ID).with_for_update())
"""What a person's request is taken or refused on, the run's row held until the transaction ends."""
INSERT_VOTE = insert(approval_votes)

# -- starting a call ---------------------------------------------------------------------

_KEY = param("key", tool_executions.c.key)
EXECUTION_BY_KEY = select(tool_executions).where(tool_executions.c.key == _KEY)
INSERT_EXECUTION = insert(tool_executions)
