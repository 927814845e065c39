"""The App Home tab: published when opened, and again after a decision made from it."""

from __future__ import annotations

from typing import Any

from signoff.bot.slack import messages
from signoff.bot.slack.notifier import SlackNotifier
from signoff.runtime.runner import Runner


class Home:
    """Publishes a viewer's Home tab: the approvals waiting on them and their recent runs."""

    def __init__(self, runner: Runner, notifier: SlackNotifier) -> None:
        self.runner, self.notifier = runner, notifier

    def on_opened(self, event: dict[str, Any]) -> None:
        viewer = event.get("user")
        if event.get("tab", "home") == "home" and isinstance(viewer, str):
            self.publish(viewer)

    def publish(self, viewer: str) -> None:
        view = messages.home_view(viewer, self.runner.waiting_on(viewer), self.runner.runs_for(viewer),
                                  displays={name: self.notifier.display(name) for name in self.notifier.tools})
        self.notifier.client.views_publish(user_id=viewer, view=view)
