"""The App Home tab: published when opened, and again after a decision made from it; Revoke beside
each grant it lists."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, assert_never

from slack_bolt import Ack

from signoff.bot.slack import home_tab
from signoff.bot.slack.notices import Notices
from signoff.bot.slack.notifier import SlackNotifier
from signoff.bot.slack.payloads import GrantClick, parse_click
from signoff.bot.slack.replies import already_text, not_done_text
from signoff.runtime.records import AlreadyDone, Done, Missing, NotAllowed, Refused, RunOutcome
from signoff.runtime.runner import Runner


class Home:
    """Publishes a viewer's Home tab: the approvals waiting on them, the grants in force that they
    made or that cover their runs, and their recent runs."""

    def __init__(self, runner: Runner, notifier: SlackNotifier, notices: Notices) -> None:
        self.runner, self.notifier, self.notices = runner, notifier, notices

    def on_opened(self, event: dict[str, Any]) -> None:
        viewer = event.get("user")
        if event.get("tab", "home") == "home" and isinstance(viewer, str):
            self.publish(viewer)

    def publish(self, viewer: str) -> None:
        view = home_tab.home_view(viewer, self.runner.waiting_on(viewer), self.runner.runs_for(viewer),
                                  displays={name: self.notifier.display(name) for name in self.notifier.tools},
                                  grants=self.runner.grants_for(viewer), console=self.notifier.console_url)
        self.notifier.client.views_publish(user_id=viewer, view=view)

    def on_revoke_grant(self, ack: Ack, body: dict[str, Any]) -> Callable[[], None] | None:
        ack()
        click = parse_click(body)
        if not isinstance(click, GrantClick):
            self.notices.refuse_malformed(body, click)
            return None
        return lambda: self._revoke(click)

    def _revoke(self, click: GrantClick) -> None:
        outcome = self.runner.revoke_grant(click.grant_id, click.where.user)
        self.notices.tell(click.where, revoked_text(outcome))
        self.publish(click.where.user)


def revoked_text(outcome: RunOutcome) -> str:
    """What the person who pressed Revoke is told."""
    match outcome:
        case Done():
            return "Revoked: from now on, the calls it covered are asked about again."
        case AlreadyDone(what=what, by=by, at=at):
            return already_text(what, by, at)
        case NotAllowed(reason=reason) | Refused(reason=reason):
            return not_done_text(reason)
        case Missing():
            return "This grant no longer exists."
        case _:
            assert_never(outcome)
