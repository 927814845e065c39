"""What a transition of an approval did (`Change`), as `approval` and `break_glass` return it and
the stores save it whole. Pure."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from signoff.runtime.approval_events import ApprovalEvent
from signoff.runtime.records import ApprovalRecord, GrantRecord, Vote

if TYPE_CHECKING:  # notices name what they are about by id; this module only carries them
    from signoff.runtime.notices import Notice


@dataclass(frozen=True)
class Change:
    """What a transition did: the approval as it is now, the audit events of its run that say so,
    the rows it adds (a person's vote, the grant an approve made) and the messages it owes people
    (`notices`, kept in the store's outbox). A store saves it whole."""

    before: ApprovalRecord
    after: ApprovalRecord
    events: tuple[ApprovalEvent, ...] = ()
    vote: Vote | None = None
    grant: GrantRecord | None = None
    notices: tuple[Notice, ...] = ()

    @property
    def changed(self) -> dict[str, Any]:
        """The approval's fields this change sets, by name (votes are rows of their own: `vote`)."""
        return {field.name: getattr(self.after, field.name) for field in dataclasses.fields(ApprovalRecord)
                if field.name != "votes" and getattr(self.after, field.name) != getattr(self.before, field.name)}


def change_of(before: ApprovalRecord, *events: ApprovalEvent, vote: Vote | None = None,
              grant: GrantRecord | None = None, notices: tuple[Notice, ...] = (), **fields: Any) -> Change:
    if vote is not None:
        fields["votes"] = (*before.votes, vote)
    return Change(before, dataclasses.replace(before, **fields), events, vote, grant, notices)
