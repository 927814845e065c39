"""The console's test rig: a real `signoff serve` (a `scenarios.world.World` on fake Slack and
SQLite) signing people in at a real OpenID Connect provider (the npm package oidc-provider, run by
`oidc_provider.mjs`), and Debian's Chromium driven by Playwright, one fresh profile per person.

Without Chromium, Playwright, node or the provider's package the tests skip; with `CI` set they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from scenarios.serve import Serve, free_port
from scenarios.world import ROOT, Policy, World, wait_until
from signoff.receipts import private_key_pem

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
PROVIDER_DIR = ROOT / ".cache" / "oidc-provider"
"""Where `.ci/run` installs oidc-provider (npm install --prefix .cache/oidc-provider oidc-provider@<pinned>)."""
PROVIDER_SCRIPT = Path(__file__).with_name("oidc_provider.mjs")
CLIENT_ID, CLIENT_SECRET = "signoff-console", "console-test-client-secret-0123456789"
ACCOUNTS: dict[str, dict[str, Any]] = {
    # Sign in with Slack's shape: the Slack user id is a claim of the ID token.
    "lead": {"name": "Lea Lead", "email": "lea@example.com", "email_verified": True,
             "https://slack.com/user_id": "U0LEAD", "https://slack.com/team_id": "T0TEST"},
    # Any other issuer's: found in Slack by email (users.lookupByEmail).
    "oncall": {"name": "Otto Oncall", "email": "otto@example.com", "email_verified": True},
    "stranger": {"name": "Sam Stranger", "email": "sam@example.com", "email_verified": True,
                 "https://slack.com/user_id": "U0STRANGER"},
}
EMAILS = {"otto@example.com": "U0ONCALL1", "sam@example.com": "U0STRANGER"}
SCRIPT = [{"tool": "send_note", "args": {"to": "ada@example.com", "text": "Your refund is on its way."}},
          {"final": "Ada has been told."}]
STEP_UP_S = 20
POLICY = f"""
rules:
  - name: risky-notes
    tool: send_note
    when: requester == "U0ONCALL2"
    step_up: {STEP_UP_S}s
"""
"""Notes asked for by U0ONCALL2 need a sign-in no older than STEP_UP_S; everyone else's do not."""


def required(what: str, there: bool) -> None:
    if there:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{what} is required in CI")
    pytest.skip(f"{what} is not installed")


def check_tools() -> None:
    required("Chromium (/usr/bin/chromium)", CHROMIUM.exists())
    try:
        import playwright.sync_api  # noqa: F401
    except ModuleNotFoundError:
        required("Playwright for Python", False)
    required("node", shutil.which("node") is not None)
    required("the npm package oidc-provider (in .cache/oidc-provider)",
             (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir())


class Provider:
    """oidc-provider on 127.0.0.1, with Signoff's client returning to `redirect_uri`."""

    def __init__(self, redirect_uri: str, log: Path) -> None:
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        config = {"port": self.port, "accounts": ACCOUNTS, "clients": [
            {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET, "redirect_uris": [redirect_uri]}]}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OIDC_TEST_CONFIG": json.dumps(config),
               "OIDC_PROVIDER_DIR": str(PROVIDER_DIR)}
        self._log = log.open("ab")
        self.process = subprocess.Popen(["node", str(PROVIDER_SCRIPT)], env=env, stdout=self._log,
                                        stderr=subprocess.STDOUT)
        wait_until(self._answers, 30, 0.1, "the OpenID Connect provider answering")

    def _answers(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"the provider exited with {self.process.returncode}")
        try:
            return httpx.get(f"{self.issuer}/.well-known/openid-configuration", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        self._log.close()


class Rig:
    """The world, its console-serving `signoff serve`, the provider and the browser."""

    def __init__(self, world: World, serve: Serve, provider: Provider, playwright: Any) -> None:
        self.world, self.serve, self.provider, self.playwright = world, serve, provider, playwright
        self.base = f"http://127.0.0.1:{serve.port}"
        self.signed_in_at: dict[str, float] = {}

    def browser(self) -> Any:
        """A fresh Chromium profile: one person's browser."""
        profile = tempfile.mkdtemp(prefix="signoff-chromium-", dir=self.world.dir)
        return self.playwright.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True,
            viewport={"width": 1200, "height": 900})

    def sign_in(self, page: Any, login: str, start: str = "/ui/") -> None:
        """Open `start`, follow Sign in to the provider and log in there as `login`."""
        page.goto(self.base + start)
        page.get_by_role("link", name="Sign in").first.click()
        self.log_in_at_provider(page, login)

    def log_in_at_provider(self, page: Any, login: str) -> None:
        page.wait_for_url(f"{self.provider.issuer}/**")
        page.fill("input[name=login]", login)
        page.fill("input[name=password]", "any password")
        page.click("button[type=submit]")
        page.wait_for_url(f"{self.base}/ui/**")
        self.signed_in_at[login] = time.time()

    def start_run(self, requester: str) -> str:
        from scenarios.drive import started_run

        return started_run(self.serve.command("tell Ada about her refund", requester).text)

    def pending(self, run_id: str) -> Any:
        from scenarios.drive import pending_approval

        return wait_until(lambda: pending_approval(self.world, run_id), 30, what=f"{run_id} asking")

    def effects(self, key: str) -> list[dict[str, Any]]:
        return [line for line in self.world.effect_lines() if line.get("key") == key]


@contextmanager
def rig() -> Iterator[Rig]:
    check_tools()
    from playwright.sync_api import sync_playwright

    world = World("sqlite", SCRIPT, policy=Policy(file=POLICY))
    world.slack.emails.update(EMAILS)
    provider: Provider | None = None
    try:
        serve = Serve(world.serve_env(), log=world.dir / "serve-console.log", root=ROOT)
        provider = Provider(f"http://127.0.0.1:{serve.port}/ui/callback", world.dir / "provider.log")
        signing_key = world.dir / "signing.pem"
        signing_key.write_bytes(private_key_pem(Ed25519PrivateKey.generate()))
        serve.env.update(SIGNOFF_SIGNING_KEY=str(signing_key))  # so each decision's receipt can be shown
        serve.env.update(SIGNOFF_OIDC_ISSUER=provider.issuer, SIGNOFF_OIDC_CLIENT_ID=CLIENT_ID,
                         SIGNOFF_OIDC_CLIENT_SECRET=CLIENT_SECRET, SIGNOFF_PUBLIC_URL=f"http://127.0.0.1:{serve.port}")
        world.serves.append(serve)
        serve.start()
        with sync_playwright() as playwright:
            yield Rig(world, serve, provider, playwright)
    finally:
        if provider is not None:
            provider.stop()
        world.close()
