from __future__ import annotations

from datetime import timedelta

import pytest

from signoff.bot.settings import ENV_DESCRIPTIONS, ENV_VARS, Settings, mask_url, parse_duration
from signoff.runtime.budget import Budget
from signoff.runtime.errors import ConfigError

SECRETS = {
    "SLACK_BOT_TOKEN": "xoxb-very-secret-bot",
    "SLACK_SIGNING_SECRET": "signing-very-secret",
    "SLACK_APP_TOKEN": "xapp-very-secret-app",
}


def test_defaults_match_the_documented_table():
    settings = Settings.from_env({})
    assert settings == Settings()
    assert settings.slack_api_url == ENV_VARS["SLACK_API_URL"] == "https://slack.com/api/"
    assert settings.database_url == "sqlite:///signoff.db"
    assert settings.model == "scripted:demo"
    assert settings.approval_ttl == timedelta(minutes=30)
    assert settings.sweep_interval == timedelta(seconds=15)
    assert settings.budget == Budget(max_steps=8)
    assert (settings.port, settings.workers, settings.lease_seconds, settings.extend_steps) == (3000, 4, 60, 4)
    assert settings.approvers == frozenset() and settings.allow_self_approval is False
    assert settings.socket_mode is False


def test_every_variable_is_documented_and_belongs_to_our_prefixes():
    assert set(ENV_VARS) == set(ENV_DESCRIPTIONS)
    assert len(ENV_VARS) == 48
    for name, text in ENV_DESCRIPTIONS.items():
        # The on-call services' keys go by the names their own tools give them.
        assert name.startswith(("SLACK_", "SIGNOFF_")) or name in ("PAGERDUTY_TOKEN", "OPSGENIE_API_KEY")
        assert text and "\n" not in text


def test_reads_only_slack_and_signoff_keys():
    environ = {"SIGNOFF_MAX_STEPS": "3", "MAX_STEPS": "99", "PORT": "1", "OPENAI_API_KEY": "sk-x"}
    settings = Settings.from_env(environ)
    assert settings.max_steps == 3 and settings.port == 3000


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("15m", 900), ("2h", 7200), ("1h30m", 5400), ("1h0m5s", 3605), ("45", 45), (" 2H ", 7200),
     ("1d", 86400), ("1d12h", 129600)],
)
def test_parse_duration_accepts_documented_forms(text, seconds):
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "0s", "m", "1.5h", "10 minutes", "-5m", "h1", "d1"])
def test_parse_duration_refuses_nonsense(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_every_bad_variable_is_named_in_one_error():
    environ = {
        "SIGNOFF_APPROVAL_TTL": "soon",
        "SIGNOFF_PORT": "70000",
        "SIGNOFF_APPROVERS": "U123ABC,lead",
        "SIGNOFF_MAX_COST_USD": "-1",
        "SIGNOFF_ALLOW_SELF_APPROVAL": "perhaps",
        "SIGNOFF_APPROVAL_CHANNEL": "#general",
        "SIGNOFF_LOG_LEVEL": "loud",
        "SLACK_API_URL": "slack.com",
    }
    with pytest.raises(ConfigError) as info:
        Settings.from_env(environ)
    named = {p.split(":")[0] for p in info.value.problems}
    assert named == set(environ)
    assert "'soon'" in str(info.value) and "lead" in str(info.value)


def test_secrets_never_appear_in_repr_or_errors():
    environ = {**SECRETS, "SIGNOFF_DATABASE_URL": "postgresql+psycopg://signoff:hunter2@db/signoff"}
    settings = Settings.from_env(environ)
    shown = repr(settings) + str(settings)
    for secret in [*SECRETS.values(), "hunter2"]:
        assert secret not in shown
    assert "postgresql+psycopg://signoff:***@db/signoff" in shown
    assert settings.slack_bot_token.get_secret_value() == "xoxb-very-secret-bot"
    assert settings.database_url.endswith("hunter2@db/signoff")


def test_invalid_secret_values_are_not_echoed():
    with pytest.raises(ConfigError) as info:
        Settings.from_env({**SECRETS, "SLACK_APP_TOKEN": "xoxb-wrong-kind-of-token", "SIGNOFF_APPROVERS": "*"}).for_serve()
    assert info.value.problems == ["SLACK_APP_TOKEN: expected an app-level token starting with xapp-"]
    assert "wrong-kind" not in str(info.value)


def test_serve_in_http_mode_needs_bot_token_signing_secret_and_approvers():
    with pytest.raises(ConfigError) as info:
        Settings.from_env({}).for_serve()
    assert [p.split(":")[0] for p in info.value.problems] == ["SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET",
                                                              "SIGNOFF_APPROVERS"]
    ok = Settings.from_env({"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s", "SIGNOFF_APPROVERS": "U0LEAD"})
    assert ok.for_serve() is ok and not ok.socket_mode


def test_serve_in_socket_mode_needs_no_signing_secret():
    settings = Settings.from_env({"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1", "SIGNOFF_APPROVERS": "*"})
    assert settings.socket_mode and settings.for_serve() is settings


def test_serve_refuses_no_approvers_and_takes_channel_members_only_when_asked():
    base = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s"}
    with pytest.raises(ConfigError) as info:
        Settings.from_env({**base, "SIGNOFF_APPROVERS": " , "}).for_serve()
    [problem] = info.value.problems
    assert problem.startswith("SIGNOFF_APPROVERS: required by `signoff serve`") and "*" in problem
    assert Settings.from_env({**base, "SIGNOFF_APPROVERS": "*"}).for_serve().approvers == frozenset({"*"})
    with pytest.raises(ConfigError, match=r"SIGNOFF_APPROVERS: .*got \*\*"):
        Settings.from_env({**base, "SIGNOFF_APPROVERS": "**"})


def test_empty_values_count_as_unset():
    settings = Settings.from_env({"SLACK_APP_TOKEN": "", "SIGNOFF_MAX_STEPS": "  ", "SIGNOFF_APPROVERS": ""})
    assert settings.slack_app_token is None and settings.max_steps == 8 and not settings.socket_mode


def test_approvers_and_api_url_are_normalised():
    settings = Settings.from_env({
        "SIGNOFF_APPROVERS": " U01LEAD , S0ONCALL,W0ENT , *",
        "SLACK_API_URL": "http://127.0.0.1:8080/api",
        "SIGNOFF_ALLOW_SELF_APPROVAL": "TRUE",
    })
    assert settings.approvers == frozenset({"U01LEAD", "S0ONCALL", "W0ENT", "*"})
    assert settings.slack_api_url == "http://127.0.0.1:8080/api/"
    assert settings.allow_self_approval is True


def test_settings_are_frozen():
    settings = Settings.from_env({})
    with pytest.raises(ValueError):
        settings.max_steps = 100


def test_mask_url_leaves_urls_without_password_alone():
    assert mask_url("sqlite:///signoff.db") == "sqlite:///signoff.db"
    assert mask_url("postgresql://u@h/db") == "postgresql://u@h/db"
    assert mask_url("postgresql://u:p%40ss@h:5432/db") == "postgresql://u:***@h:5432/db"
