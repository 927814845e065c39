"""SlackNotifier: `runtime.telling_ports.Notifier` over the Slack Web API.

Only `chat.update` is retried (it is idempotent); a failed `chat.postMessage` propagates, the
runner logs it, and the database keeps what is needed to post again (see `Runner.recover`).

It reads nothing of the store: what a card shows besides its approval (a turn's other calls, the
grant an approve made, the receipt) comes with the call (`runtime.cards.Card`), read by the runner.
What this process posted is remembered in memory, a bounded amount: both copies of a stopped-run
notice (its thread and the requester's DM), the notices someone acted on (to show where the run
went next), and the model's words and the edit on each card. A press on another replica, or after a
restart, finds none of it and still works: the other copy of a notice loses its buttons when
pressed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from signoff.bot.arguments import ToolDisplay
from signoff.bot.slack import deadlines, messages
from signoff.bot.slack.approval_cards import FORGOTTEN, AskedWith, OnCallLookup, asked_with
from signoff.bot.slack.blocks import Message
from signoff.bot.slack.followed_notices import FollowedNotices
from signoff.bot.slack.glass_cards import GlassNotices
from signoff.bot.slack.recent import Recent
from signoff.bot.slack.run_headers import RunHeaders
from signoff.bot.slack.updates import update_with_retries
from signoff.bot.words import edited_changes, goes_on_after_expiry
from signoff.runtime.caller_runs import run_tools
from signoff.runtime.cards import Card
from signoff.runtime.digests import batch_place
from signoff.runtime.people import is_slack_user
from signoff.runtime.records import ApprovalRecord, GrantRecord, RunRecord
from signoff.runtime.runner_config import RunnerConfig
from signoff.runtime.schema import REOPENABLE
from signoff.runtime.state import DEFAULT_REDACT_KEYS, STOPPED
from signoff.tools.base import Tool

log = logging.getLogger("signoff.bot.slack.notifier")

# Slack answers these when the bot may not post in a channel; the requester's DM is the fallback.
UNPOSTABLE = frozenset({"not_in_channel", "channel_not_found", "is_archived", "restricted_action"})
TELL_REQUESTER = STOPPED | REOPENABLE
"""A run stopped and waiting for a person's request, or ended as its requester may open again
(expired: Request again): its requester is told in a DM too, with the notice's buttons."""

Ref = tuple[str, str]
"""Where a message is: (channel, ts)."""


class SlackNotifier(GlassNotices):
    """Posts runs, approval requests and outcomes to Slack, threading progress under the run message."""

    def __init__(self, client: WebClient, *, tools: Mapping[str, Tool] | None = None,
                 approval_channel: str | None = None, redact_keys: Iterable[str] = DEFAULT_REDACT_KEYS,
                 extend_steps: int = RunnerConfig.extend_steps,
                 update_attempts: int = 4, sleep: Callable[[float], None] = time.sleep,
                 on_call: OnCallLookup | None = None, console_url: str | None = None) -> None:
        self.client = client
        self.console_url = console_url
        """Where the web console is (`SIGNOFF_PUBLIC_URL`), for the cards that link to an approval's
        page; None: it is off."""
        self.on_call = on_call
        """Who is on call in a schedule named as an approver, for the card to name them (None: unnamed)."""
        self.tools = dict(tools or {})
        self.approval_channel = approval_channel
        self.redact_keys = frozenset(redact_keys)
        self.extend_steps = extend_steps
        """What Extend adds to steps and tool calls (`SIGNOFF_EXTEND_STEPS`, as the runner's config has it)."""
        self.update_attempts = update_attempts
        self.sleep = sleep
        self._threads: dict[str, tuple[str, str]] = {}
        self._dms: dict[str, str] = {}
        self._told_expired: set[str] = set()
        self._copies: Recent[tuple[str, int], list[Ref]] = Recent()
        """(run id, version) -> every copy of the stopped-run notice posted for the run at that version."""
        self._said: Recent[str, str] = Recent()
        """approval id -> the model's words on its card, for a card re-drawn from a run read without history."""
        self._marked_done: Recent[tuple[str, str], bool] = Recent()
        """Mark done requests whose outcome the thread has been told of."""
        self._edited: Recent[str, Mapping[str, Any]] = Recent()
        """approval id -> who edited its call and how (`pending_calls.Edited`), for a card re-drawn later."""
        self._headers = RunHeaders(self._update)
        self._followed = FollowedNotices(self._update)
        self._lock = threading.Lock()

    # -- runtime.telling_ports.Notifier --------------------------------------------------------

    def run_started(self, run: RunRecord) -> dict[str, Any] | None:
        channel = run.origin.get("channel")
        if not channel:
            return None  # a run started outside Slack (the CLI): nothing to announce here
        response = self._post_or_dm(channel, run.requester, messages.run_message(run))
        ref = {"channel": response["channel"], "ts": response["ts"]}
        with self._lock:
            self._threads[run.run_id] = (ref["channel"], ref["ts"])
        self._headers.told(run)
        return ref

    def approval_requested(self, run: RunRecord, approval: ApprovalRecord, card: Card) -> dict[str, Any] | None:
        channel = self.approval_channel or run.origin.get("channel")
        if not channel:
            return None
        if batch_place(approval.key) is not None:  # one of a turn's calls: on the card of them all
            return self._batch_card(run, _calls(approval, card), channel)
        said = messages.card_words(run, approval)
        edited = edited_changes(run.state.get("pending"), approval)
        with self._lock:
            if said:
                self._said.put(approval.approval_id, said)
            if edited:
                self._edited.put(approval.approval_id, edited)
        message = messages.approval_message(run, approval, display=self.display(approval.tool, run),
                                            asked=self._asked_as(run, [approval])[approval.approval_id],
                                            on_call=self.on_call, console=self.console_url)
        response = self._post(channel, message)
        self._followed.show(run, done=True)  # the run waits for a person now
        self._headers.waiting(run, self._thread(run), [approval])
        return {"channel": response["channel"], "ts": response["ts"]}

    def batch_requested(self, run: RunRecord, approvals: list[ApprovalRecord]) -> dict[str, Any] | None:
        channel = self.approval_channel or run.origin.get("channel")
        if not channel:
            return None
        said = messages.card_words(run, approvals[0])
        if said:
            with self._lock:
                for approval in approvals:
                    self._said.put(approval.approval_id, said)
        response = self._post(channel, self._batch_message(run, approvals))
        self._followed.show(run, done=True)  # the run waits for people now
        self._headers.waiting(run, self._thread(run), approvals)
        return {"channel": response["channel"], "ts": response["ts"]}

    def _batch_card(self, run: RunRecord, calls: list[ApprovalRecord], channel: str) -> dict[str, Any]:
        """Where a call of a turn's several is shown: the card of its turn's `calls`, redrawn with it
        (an edit, a reconsidered call), or, if none was posted, a new card of them."""
        shown = next((a.message for a in calls if a.message and a.message.get("ts")), None)
        if shown is not None:
            self._update(shown["channel"], shown["ts"], self._batch_message(run, calls))
            ref = {"channel": shown["channel"], "ts": shown["ts"]}
        else:
            response = self._post(channel, self._batch_message(run, calls))
            ref = {"channel": response["channel"], "ts": response["ts"]}
        self._headers.waiting(run, self._thread(run), calls)
        return ref

    def _batch_message(self, run: RunRecord, approvals: list[ApprovalRecord]) -> Message:
        with self._lock:
            said = next((s for a in approvals if (s := self._said.get(a.approval_id))), None)
        return messages.batch_message(run, approvals, displays={a.tool: self.display(a.tool, run) for a in approvals},
                                      said=said, asked=self._asked_as(run, approvals), console=self.console_url)

    def approval_decided(self, run: RunRecord, approval: ApprovalRecord, card: Card) -> None:
        self._show_outcome(run, approval, card)

    def approval_updated(self, run: RunRecord, approval: ApprovalRecord, card: Card) -> None:
        self._show_outcome(run, approval, card)

    def approval_expired(self, run: RunRecord, approval: ApprovalRecord, card: Card) -> None:
        self._show_outcome(run, approval, card)
        with self._lock:
            # Every late click on an expired approval reports it expired again; tell the requester once.
            first = approval.approval_id not in self._told_expired
            self._told_expired.add(approval.approval_id)
        # A run that ends as expired tells its requester with its ending's notice (`run_stopped`),
        # which offers Request again; one that goes on is told here.
        if first and is_slack_user(run.requester) and goes_on_after_expiry(approval.asked):
            self._dm(run.requester, deadlines.expired_dm(run, approval))

    def approval_reminded(self, run: RunRecord, approval: ApprovalRecord, tell: list[str]) -> None:
        card = self._card(approval)
        if card is not None:
            self._post(card[0], deadlines.reminder_message(approval, self.on_call), thread_ts=card[1])
        for person in tell:
            self._dm(person, deadlines.reminder_dm(run, approval))

    def approval_escalated(self, run: RunRecord, approval: ApprovalRecord, added: list[str], tell: list[str]) -> None:
        card = self._card(approval)
        if card is not None:
            self._post(card[0], deadlines.escalation_message(approval, added), thread_ts=card[1])
        for person in tell:
            self._dm(person, deadlines.escalation_dm(run, approval))

    def tool_result(self, run: RunRecord, entry: dict[str, Any], grant: GrantRecord | None) -> None:
        thread = self._thread(run)
        if thread is not None:
            secrets = self.display(str(entry.get("tool") or ""), run).secret_names
            message = messages.tool_result_message(run, entry, secret_names=secrets,
                                                   marked_done=self._marked_done_by(run, entry), grant=grant)
            self._post(thread[0], message, thread_ts=thread[1])
        self._headers.working(run, thread)
        self._followed.show(run, done=False)

    def run_finished(self, run: RunRecord) -> None:
        thread = self._thread(run)
        if thread is not None:
            self._post(thread[0], messages.answer_message(run), thread_ts=thread[1])
            self._headers.ended(run, thread)
        self._followed.show(run, done=True)

    def run_stopped(self, run: RunRecord) -> None:
        pending_tool = (run.state.get("pending") or {}).get("tool") or ""
        message = messages.stopped_message(run, display=self.display(pending_tool, run), extend_steps=self.extend_steps)
        copies: list[Ref] = []
        thread = self._thread(run)
        if thread is not None:
            posted = self._post(thread[0], message, thread_ts=thread[1])
            copies.append((posted["channel"], posted["ts"]))
            self._headers.ended(run, thread)
        if run.status in TELL_REQUESTER and is_slack_user(run.requester):
            copies.append(self._dm(run.requester, message))
        with self._lock:
            self._copies.put((run.run_id, run.version), copies)
        self._followed.show(run, done=True)

    # -- also used by the listeners --------------------------------------------------------

    def show_approval(self, run: RunRecord, approval: ApprovalRecord, card: Card) -> None:
        """Bring an approval message in line with the stored approval (e.g. after a lost race)."""
        self._show_outcome(run, approval, card)

    def update(self, channel: str, ts: str, message: Message) -> None:
        self._update(channel, ts, message)

    def notice_copies(self, run_id: str, version: int) -> list[Ref]:
        """Every copy of the stopped-run notice posted for `run_id` at `version` (its buttons carry
        that version), as far as this process posted them."""
        with self._lock:
            return list(self._copies.get((run_id, version)) or ())

    def follow(self, run_id: str, notices: Iterable[Ref], note: str) -> None:
        """Show, on `notices`, `note` and where the run stands each time it moves on: working, then
        how its worker left it (waiting for a person, stopped again, done)."""
        self._followed.follow(run_id, notices, note)

    def tool(self, tool_name: str, run: RunRecord | None = None) -> Tool | None:
        """The tool `run` calls by `tool_name` (a caller's run calls its own call's: `run_tools`)."""
        return (run_tools(run, self.tools) if run is not None else self.tools).get(tool_name)

    def display(self, tool_name: str, run: RunRecord | None = None) -> ToolDisplay:
        """How approvers are shown `tool_name` (as `run` calls it): description, argument order,
        secret names."""
        return ToolDisplay.of(self.tool(tool_name, run), self.redact_keys)

    def _card(self, approval: ApprovalRecord) -> Ref | None:
        where = approval.message or {}
        channel, ts = where.get("channel"), where.get("ts")
        return (str(channel), str(ts)) if channel and ts else None

    # -- what this process remembers ------------------------------------------------------------

    @staticmethod
    def _asked_as(run: RunRecord, approvals: Iterable[ApprovalRecord]) -> dict[str, AskedWith]:
        """What each approval's card shows of the moment it was asked, by approval id: as the
        approval keeps it (`approval_cards.asked_with`); neither preview nor budget for one asked
        before approvals kept it, once its run moved on, rather than the run's newer state."""
        return {approval.approval_id: asked_with(run, approval) or FORGOTTEN for approval in approvals}

    def _marked_done_by(self, run: RunRecord, entry: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The Mark done request `entry` is the outcome of, if it is: the first result told while the
        run carries that request (the call's settled outcome, saved before the model is asked again)."""
        command = run.command or {}
        if command.get("op") != "reconcile" or command.get("action") != "done" or "result" not in entry:
            return None
        told = (run.run_id, f"{command.get('shown_version')}:{command.get('by')}")
        with self._lock:
            if self._marked_done.get(told):
                return None
            self._marked_done.put(told, True)
        return command

    # -- Slack calls ---------------------------------------------------------------------------

    def _show_outcome(self, run: RunRecord, approval: ApprovalRecord, card: Card) -> None:
        where = approval.message or {}
        if not where.get("channel") or not where.get("ts"):
            return
        if batch_place(approval.key) is not None:
            calls = _calls(approval, card)
            self._update(where["channel"], where["ts"], self._batch_message(run, calls))
            self._headers.going_on(run, self._thread(run), calls)
            return
        with self._lock:
            said = self._said.get(approval.approval_id)
            edited = self._edited.get(approval.approval_id)
        display, asked = self.display(approval.tool, run), self._asked_as(run, [approval])[approval.approval_id]
        if approval.status == "pending":
            message = messages.approval_message(run, approval, display=display, said=said, edited=edited, asked=asked,
                                                on_call=self.on_call, console=self.console_url)
        else:
            message = messages.decided_message(run, approval, display=display, said=said, edited=edited,
                                               grant=card.grant, asked=asked, receipt=card.receipt)
        self._update(where["channel"], where["ts"], message)
        self._headers.going_on(run, self._thread(run), [approval])

    def _thread(self, run: RunRecord) -> tuple[str, str] | None:
        if run.origin.get("channel") and run.origin.get("ts"):
            return run.origin["channel"], run.origin["ts"]
        with self._lock:
            return self._threads.get(run.run_id)

    def _post(self, channel: str, message: Message, thread_ts: str | None = None) -> Any:
        return self.client.chat_postMessage(channel=channel, unfurl_links=False, unfurl_media=False,
                                            thread_ts=thread_ts or None, **message.as_kwargs())

    def _post_or_dm(self, channel: str, user: str, message: Message) -> Any:
        try:
            return self._post(channel, message)
        except SlackApiError as exc:
            if exc.response.get("error") not in UNPOSTABLE or not is_slack_user(user):
                raise
            log.warning("cannot post in %s (%s); using %s's DM", channel, exc.response.get("error"), user)
            return self._post(self._dm_channel(user), message)

    def _dm(self, user: str, message: Message) -> Ref:
        posted = self._post(self._dm_channel(user), message)
        return str(posted["channel"]), str(posted["ts"])

    def _dm_channel(self, user: str) -> str:
        with self._lock:
            known = self._dms.get(user)
        if known:
            return known
        channel = str(self.client.conversations_open(users=user)["channel"]["id"])
        with self._lock:
            self._dms[user] = channel
        return channel

    def _update(self, channel: str, ts: str, message: Message) -> None:
        update_with_retries(self.client, channel, ts, message, attempts=self.update_attempts, sleep=self.sleep)


def _calls(approval: ApprovalRecord, card: Card) -> list[ApprovalRecord]:
    """The calls of the turn card `approval` is on, as the runner read them (itself alone, should
    it have read none)."""
    return list(card.calls) or [approval]
