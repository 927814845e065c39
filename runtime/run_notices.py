"""Sending a run's own notices (`notices.RunNotice`): its run message, a call's result, its cards
and its ending, each as the run and its approvals are when it is sent.

A run's message is owed first, when the run is made (a caller's run is announced only once it
asks a person or stops for one: `telling.Teller`), so everything after it is threaded under it; a
card is posted only for a call whose approval is still open and unposted; an ending only while
the run is still in it.
"""

from __future__ import annotations

from datetime import timedelta

from signoff.runtime.notices import Announce, HeldNotice, PostCards, RunNotice, TellEnd, TellResult
from signoff.runtime.ports import Store
from signoff.runtime.records import RunRecord
from signoff.runtime.telling import Teller

REPOST_AFTER = timedelta(seconds=30)
"""A card is posted no sooner than this after its last try, by anyone: a post the Slack client
gave up on (after 30 s) may still land in Slack, and one that landed while the database could not
record where is recorded by the replica that posted it (`Teller.record_posts`) before another,
which cannot know of it, posts it again; a person may act on either copy first (a click on a copy
takes its buttons away too)."""


def run_told(store: Store, teller: Teller, run: RunRecord, held: HeldNotice) -> RunRecord | None:
    """Tell `held`'s notice of `run` (as its lease holder has it, with its history: a card quotes
    what the model said beside its call, a stopped run's message shows its last steps): the run as
    it is now (announced, maybe), or None if telling failed.

    A card's notice is fenced for `REPOST_AFTER` before it is posted, past the run's lease: a
    database that fails before the fence is written stops the post; one that fails after it, with
    the card posted but its place not recorded, leaves nobody else to post it meanwhile."""
    notice = held.notice
    assert isinstance(notice, RunNotice)
    match notice:
        case Announce():
            return teller.announce(run)
        case TellResult(entry=entry):
            told = teller.tool_result(run, entry)
        case PostCards(keys=keys):
            found = [store.approval_for_key(key) for key in keys]
            unposted = [approval for approval in found if approval is not None and approval.run_id == run.run_id
                        and approval.status == "pending" and approval.message is None]
            if unposted and not store.hold_notice(held.seq, REPOST_AFTER):
                return run  # told meanwhile, by a holder of the run before this one
            told = teller.post_approvals(run, unposted) if unposted else True
        case TellEnd(status=status):
            told = run.status != status or teller.tell_end(run)
    return run if told else None
