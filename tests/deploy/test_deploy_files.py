"""The deploy files agree with the code: ports, paths, commands, environment names, Slack scopes."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from signoff.bot import settings
from signoff.bot.slack import blocks

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PROVIDER_VARS = {"OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"}
OUR_PREFIXES = ("SIGNOFF_", "SLACK_", "OPENAI_", "ANTHROPIC_")
PORT = int(settings.ENV_VARS["SIGNOFF_PORT"])

# Every Slack Web API method the bot calls, and the bot scopes it needs.
SCOPE_OF_METHOD: dict[str, tuple[str, ...]] = {
    "chat_postMessage": ("chat:write",),
    "chat_postEphemeral": ("chat:write",),
    "chat_update": ("chat:write",),
    "conversations_open": ("im:write",),
    # One scope per kind of conversation a run can start in: channel, private channel, DM, group DM.
    "conversations_members": ("channels:read", "groups:read", "im:read", "mpim:read"),
    "usergroups_users_list": ("usergroups:read",),
    "users_lookupByEmail": ("users:read", "users:read.email"),
    "views_open": (),
    "views_publish": (),
    "views_update": (),
    "auth_test": (),
}


def known_env_names() -> set[str]:
    return set(settings.ENV_VARS) | PROVIDER_VARS


def load_yaml(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


@pytest.fixture(scope="module")
def manifest() -> dict[str, Any]:
    [doc] = load_yaml(DEPLOY / "slack-manifest.yaml")
    return doc


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    [doc] = load_yaml(DEPLOY / "docker-compose.yml")
    return doc


@pytest.fixture(scope="module")
def k8s() -> dict[str, dict[str, Any]]:
    docs = [doc for path in sorted((DEPLOY / "k8s").glob("*.yaml")) for doc in load_yaml(path)]
    by_kind = {doc["kind"]: doc for doc in docs}
    assert len(by_kind) == len(docs) == 4
    return by_kind


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    text = (DEPLOY / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in joined.splitlines() if line.strip()]


def final_stage() -> list[tuple[str, str]]:
    instructions = dockerfile()
    last_from = max(i for i, (name, _) in enumerate(instructions) if name == "FROM")
    return instructions[last_from:]


def dotenv_example() -> dict[str, str]:
    """Every `NAME=value` in .env.example, commented out or not."""
    pairs = re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=(.*)$", (ROOT / ".env.example").read_text(), re.MULTILINE)
    names = [name for name, _ in pairs]
    assert len(names) == len(set(names)), "a variable is listed twice"
    return dict(pairs)


def systemd_unit() -> dict[str, list[tuple[str, str]]]:
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in (DEPLOY / "signoff.service").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), [])
            continue
        key, _, value = line.partition("=")
        assert current is not None, line
        current.append((key.strip(), value.strip()))
    return sections


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return doc["spec"]["template"]["spec"]["containers"]


def signoff_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: svc for name, svc in compose["services"].items() if svc.get("image", "").startswith("signoff")}


def signoff(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Run the `signoff` console script's entry point in this process: exit code and stdout."""
    from signoff.bot.cli import main

    with pytest.raises(SystemExit) as exited:
        main(list(args))
    out, err = capsys.readouterr()
    assert exited.value.code == 0 or not out, out
    return exited.value.code, out if exited.value.code == 0 else err


def bot_sources() -> str:
    return "\n".join(path.read_text() for path in sorted((ROOT / "bot").rglob("*.py")))


# -- Slack app manifest -----------------------------------------------------------------------


def test_manifest_names_the_app_and_its_slash_command_as_the_code_does(manifest):
    assert manifest["display_information"]["name"] == "Signoff"
    assert manifest["features"]["bot_user"]["display_name"] == "Signoff"
    [command] = manifest["features"]["slash_commands"]
    assert command["command"] == blocks.COMMAND == "/signoff"
    assert command["usage_hint"] and command["description"]


def test_manifest_request_urls_all_end_in_slack_events(manifest):
    urls = [
        manifest["features"]["slash_commands"][0]["url"],
        manifest["settings"]["interactivity"]["request_url"],
        manifest["settings"]["event_subscriptions"]["request_url"],
    ]
    for url in urls:
        assert url.startswith("https://") and url.endswith("/slack/events")


def test_manifest_bot_scopes_are_exactly_what_the_code_calls(manifest):
    called = set(re.findall(r"client\.([a-z]+_[A-Za-z_]+)\(", bot_sources()))
    assert "api_call" not in called, "map the method behind api_call to its scope here"
    unmapped = called - set(SCOPE_OF_METHOD)
    assert not unmapped, f"the bot calls {sorted(unmapped)}: add them and their scopes to SCOPE_OF_METHOD"
    needed = {"commands"} | {scope for m in called for scope in SCOPE_OF_METHOD[m]}
    scopes = manifest["oauth_config"]["scopes"]["bot"]
    assert len(scopes) == len(set(scopes))
    assert set(scopes) == needed == {"commands", "chat:write", "im:write", "usergroups:read", "channels:read",
                                     "groups:read", "im:read", "mpim:read", "users:read", "users:read.email"}
    assert "user" not in manifest["oauth_config"]["scopes"]


def test_manifest_subscribes_to_the_events_the_code_listens_for(manifest):
    registered = set(re.findall(r"""app\.event\(\s*["']([a-z_]+)["']""", bot_sources()))
    assert registered == {"app_home_opened"}
    assert set(manifest["settings"]["event_subscriptions"]["bot_events"]) == registered


def test_manifest_enables_interactivity_app_home_and_socket_mode(manifest):
    assert manifest["settings"]["interactivity"]["is_enabled"] is True
    home = manifest["features"]["app_home"]
    assert home["home_tab_enabled"] is True
    assert home["messages_tab_enabled"] is True
    assert manifest["settings"]["socket_mode_enabled"] is True


def test_signoff_manifest_prints_this_manifest(capsys):
    code, out = signoff(capsys, "manifest")
    assert code == 0, out
    assert out == (DEPLOY / "slack-manifest.yaml").read_text()


def test_the_server_paths_are_the_ones_deployed(manifest, k8s):
    from signoff.bot.slack.serve import EVENTS_PATH, HEALTH_PATH, READY_PATH

    assert manifest["settings"]["interactivity"]["request_url"].endswith(EVENTS_PATH)
    probes = containers(k8s["Deployment"])[0]
    assert probes["readinessProbe"]["httpGet"]["path"] == READY_PATH == "/readyz"
    assert probes["livenessProbe"]["httpGet"]["path"] == HEALTH_PATH == "/healthz"


# -- ports ------------------------------------------------------------------------------------


def test_every_file_serves_on_the_default_port(compose, k8s):
    assert PORT == 3000
    stage = final_stage()
    assert ("EXPOSE", str(PORT)) in stage
    assert ("ENV", f"SIGNOFF_PORT={PORT}") in [(n, a) for n, a in stage if n == "ENV" for a in a.split()]
    assert compose["services"]["signoff"]["ports"] == [f"{PORT}:{PORT}"]
    [container] = containers(k8s["Deployment"])
    assert [p["containerPort"] for p in container["ports"]] == [PORT]
    assert {"name": "SIGNOFF_PORT", "value": str(PORT)} in container["env"]
    target = k8s["Service"]["spec"]["ports"][0]["targetPort"]
    assert target in (PORT, container["ports"][0]["name"])


# -- the image --------------------------------------------------------------------------------


def test_the_image_is_slim_non_root_and_installs_the_extras():
    stage = final_stage()
    assert stage[0] == ("FROM", "python:3.12-slim")
    [user] = [args for name, args in stage if name == "USER"]
    assert user.split(":")[0] not in ("0", "root")
    installs = [args for name, args in dockerfile() if name == "RUN" and "pip install" in args]
    extras = {extra for cmd in installs for found in re.findall(r"""["']?\.\[([a-z,]+)\]["']?""", cmd)
              for extra in found.split(",")}
    # PostgreSQL, both model providers, and MCP servers, which the MCP guide's container step relies on.
    assert extras >= {"postgres", "openai", "anthropic", "mcp"}
    assert ("CMD", '["signoff", "serve"]') in stage


class _Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/healthz" else 404)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (503, False)])
def test_the_image_health_check_asks_healthz_on_the_configured_port(status, healthy):
    [check] = [args for name, args in final_stage() if name == "HEALTHCHECK"]
    command = json.loads(check[check.index("CMD") + 3 :])
    assert command[0] == "python" and "/healthz" in command[-1] and "127.0.0.1" in command[-1]
    handler = type("Handler", (_Health,), {"status": status})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {"SIGNOFF_PORT": str(server.server_address[1]), "PATH": "/usr/bin:/bin"}
        done = subprocess.run([sys.executable, *command[1:]], env=env, capture_output=True, timeout=30)
    finally:
        server.shutdown()
        server.server_close()
    assert (done.returncode == 0) is healthy


def test_the_build_context_leaves_secrets_and_local_state_out():
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".env", ".git", "*.db", "outbox"} <= ignored
    assert "README.md" not in ignored and "pyproject.toml" not in ignored


# -- compose ----------------------------------------------------------------------------------


def test_compose_runs_migrations_before_signoff_starts(compose):
    services = compose["services"]
    assert services["postgres"]["image"] == "postgres:16"
    assert services["postgres"]["healthcheck"]["test"]
    assert services["migrate"]["command"] == ["signoff", "db", "upgrade"]
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["signoff"]["command"] == ["signoff", "serve"]
    assert services["signoff"]["depends_on"] == {
        "postgres": {"condition": "service_healthy"},
        "migrate": {"condition": "service_completed_successfully"},
    }


def test_compose_builds_this_repository_and_reads_the_env_file(compose):
    services = signoff_services(compose)
    assert set(services) == {"migrate", "signoff"}
    for service in services.values():
        assert (DEPLOY / service["build"]["context"]).resolve() == ROOT
        assert (ROOT / service["build"]["dockerfile"]).is_file()
        assert (DEPLOY / service["env_file"]).resolve() == ROOT / ".env"
        assert service["environment"]["SIGNOFF_DATABASE_URL"].startswith("postgresql+psycopg://")


# -- Kubernetes -------------------------------------------------------------------------------


def test_the_deployment_runs_replicas_in_http_mode_with_probes(k8s):
    deployment = k8s["Deployment"]
    assert deployment["spec"]["replicas"] >= 2
    assert "namespace" not in deployment["metadata"]
    [container] = containers(deployment)
    assert container["command"] == ["signoff", "serve"]
    port_name = container["ports"][0]["name"]
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        assert container[probe]["httpGet"] == {"path": path, "port": port_name}
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    # An app-level token would switch every replica to Socket Mode.
    names = {e["name"] for e in container["env"]} | set(k8s["Secret"]["stringData"])
    assert "SLACK_APP_TOKEN" not in names
    assert {"SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SIGNOFF_DATABASE_URL"} <= set(k8s["Secret"]["stringData"])


def test_every_deployment_says_who_approves(k8s):
    # `signoff serve` refuses to start without SIGNOFF_APPROVERS: the examples set it, or say to.
    [container] = containers(k8s["Deployment"])
    approvers = {e["name"]: e.get("value") for e in container["env"]}["SIGNOFF_APPROVERS"]
    assert settings.Settings.from_env({"SIGNOFF_APPROVERS": approvers}).approvers
    comment = (ROOT / ".env.example").read_text().split("\nSIGNOFF_APPROVERS=")[0].rsplit("\n", 2)[-2:]
    assert "required by `signoff serve`" in comment[0] and "*" in comment[1]


def test_the_migration_job_and_the_deployment_share_image_and_secret(k8s):
    job, deployment = k8s["Job"], k8s["Deployment"]
    [migrate], [serve] = containers(job), containers(deployment)
    assert migrate["command"] == ["signoff", "db", "upgrade"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] in ("OnFailure", "Never")
    assert migrate["image"] == serve["image"]
    secret = k8s["Secret"]["metadata"]["name"]
    assert migrate["envFrom"] == serve["envFrom"] == [{"secretRef": {"name": secret}}]
    assert all("namespace" not in doc["metadata"] for doc in k8s.values())


def test_the_service_selects_the_deployment_pods(k8s):
    labels = k8s["Deployment"]["spec"]["template"]["metadata"]["labels"]
    selector = k8s["Service"]["spec"]["selector"]
    assert selector.items() <= labels.items()
    assert k8s["Deployment"]["spec"]["selector"]["matchLabels"].items() <= labels.items()


# -- systemd ----------------------------------------------------------------------------------


def test_the_systemd_unit_upgrades_then_serves_as_an_unprivileged_user():
    unit = systemd_unit()
    service = dict(unit["Service"])
    assert service["EnvironmentFile"].startswith("/")
    assert service["Restart"] == "on-failure"
    assert service.get("DynamicUser") == "yes" or service.get("User") not in (None, "root")
    for key, command in (("ExecStartPre", ["db", "upgrade"]), ("ExecStart", ["serve"])):
        program, *args = shlex.split(service[key])
        assert program.startswith("/") and Path(program).name == "signoff" and args == command
    assert dict(unit["Install"])["WantedBy"] == "multi-user.target"


# -- commands and environment names -----------------------------------------------------------


@pytest.mark.parametrize("command", [["db", "upgrade"], ["serve"]])
def test_the_deployed_commands_exist_in_the_cli(capsys, command):
    code, out = signoff(capsys, *command, "--help")
    assert code == 0, out
    assert out.startswith(f"Usage: signoff {' '.join(command)}")


def env_names_used() -> dict[str, set[str]]:
    """Every environment variable name that a deploy file sets, by file."""
    compose = load_yaml(DEPLOY / "docker-compose.yml")[0]
    k8s = [doc for path in (DEPLOY / "k8s").glob("*.yaml") for doc in load_yaml(path)]
    docker_env = {
        pair.split("=")[0] for name, args in dockerfile() if name == "ENV" for pair in args.split()
        if "=" in pair
    }
    unit_env = [v for k, v in systemd_unit()["Service"] if k == "Environment"]
    return {
        "docker-compose.yml": {
            name for svc in signoff_services(compose).values() for name in svc.get("environment", {})
        },
        "k8s": {e["name"] for doc in k8s if "template" in doc.get("spec", {}) for c in containers(doc)
                for e in c.get("env", [])}
        | {name for doc in k8s if doc["kind"] == "Secret" for name in doc.get("stringData", {})},
        "Dockerfile": {name for name in docker_env if name.startswith(OUR_PREFIXES)},
        "signoff.service": {assignment.split("=")[0] for value in unit_env for assignment in shlex.split(value)},
        ".env.example": set(dotenv_example()),
    }


def test_every_environment_name_in_the_deploy_files_is_one_signoff_reads():
    for where, names in env_names_used().items():
        unknown = names - known_env_names()
        assert not unknown, f"{where} sets {sorted(unknown)}, which Signoff does not read"
        assert names, where


def test_env_example_lists_every_variable_with_its_default():
    listed = dotenv_example()
    assert set(listed) == known_env_names()
    for name, default in settings.ENV_VARS.items():
        assert listed[name] == default, name
