"""`GET /readyz`: whether this replica can do its work now (the database answers, Slack takes the token)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from signoff.runtime.runner import Runner

log = logging.getLogger("signoff.bot.slack.serve")


class Readiness:
    """What `GET /readyz` answers: whether the database answers (one read by primary key) and Slack
    takes the token (`auth.test`, asked at most once every `slack_every` seconds, not per probe).

    A change either way is logged once, not at every probe."""

    def __init__(self, runner: Runner, client: WebClient, *, slack_every: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.runner, self.client, self.slack_every, self.clock = runner, client, slack_every, clock
        self._slack: tuple[float, str] | None = None
        self._said: dict[str, str] = {}
        self._lock = threading.Lock()

    def __call__(self) -> dict[str, str]:
        """Each check with "ok" or why not."""
        return {"database": self._told("database", self._database()), "slack": self._told("slack", self._slack_says())}

    def _database(self) -> str:
        try:
            self.runner.get_run("readyz-probe", history=False)  # the database answers, and has our tables
        except Exception as exc:  # whatever the database says, the answer is "not ready"
            return f"unavailable ({type(exc).__name__})"
        return "ok"

    def _slack_says(self) -> str:
        now = self.clock()
        with self._lock:
            if self._slack is not None and now - self._slack[0] < self.slack_every:
                return self._slack[1]
            # Claimed before asking: probes arriving meanwhile answer with the last result.
            self._slack = (now, self._slack[1] if self._slack is not None else "ok")
        try:
            self.client.auth_test()
            said = "ok"
        except SlackApiError as exc:
            said = f"error ({exc.response.get('error') or exc.response.status_code})"
        except OSError as exc:
            said = f"unreachable ({type(exc).__name__})"
        with self._lock:
            self._slack = (now, said)
        return said

    def _told(self, check: str, said: str) -> str:
        with self._lock:
            was, self._said[check] = self._said.get(check, "ok"), said
        if said != was:
            if said == "ok":
                log.info("ready: %s answers again", check)
            else:
                log.warning("not ready: %s %s", check, said)
        return said
