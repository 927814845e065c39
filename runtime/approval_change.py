"""What a transition of an approval did (`Change`), as `approval` and `break_glass` return it and
the stores save it whole. Pure."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from signoff.runtime.approval_events import ApprovalEvent
from signoff.runtime.notices import Notice, card_redraws
from signoff.runtime.records import ApprovalRecord, GrantRecord, Vote


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
    """The change that sets `fields` (and adds `vote`), owing `notices` and, when its card no
    longer shows the approval as it is, a redraw of the card (`notices.card_redraws`)."""
    if vote is not None:
        fields["votes"] = (*before.votes, vote)
    after = dataclasses.replace(before, **fields)
    return Change(before, after, events, vote, grant, (*notices, *card_redraws(before, after)))
