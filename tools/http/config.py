"""`SIGNOFF_HTTP_TOOLS`: your HTTP APIs as tools, described in one YAML (or JSON) file.

    apis:
      tickets:
        base_url: https://tickets.example.com/api
        headers: {Authorization: "Bearer ${TICKETS_TOKEN}"}
        timeout: 10
        max_response_bytes: 65536
        tools:
          - name: get_ticket
            method: GET
            path: /tickets/{ticket_id}
            description: Read one ticket.
            args: {type: object, properties: {ticket_id: {type: string}}, required: [ticket_id]}

`${VAR}` (or `${VAR:-default}`) in a header value is taken from the environment, so tokens stay
out of the file; a variable that is not set is an error naming the API, the header and the
variable, never a value. Every problem is one line naming the API, the tool and what is wrong, and
any key Signoff does not know is refused: a typo in an override must not leave a tool less guarded
than the operator meant. GET and HEAD are read-only, every other method a side effect; an override
may make a tool stricter, and loosening one needs `trusted: true` on its API.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveFloat,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from signoff.tools.base import TOOL_NAME
from signoff.tools.mcp.schema import InvalidSchema, JsonSchemaArgs
from signoff.tools.strict_yaml import load_yaml

API_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
"""And no `__` (it separates API and tool in `http__<api>__<tool>`)."""
TOOL_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,47}$")
PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# What a path template may hold outside its placeholders: RFC 3986 path characters, already encoded.
_PATH_CHARS = re.compile(r"^[A-Za-z0-9\-._~!$&'()*+,;=:@%/]*$")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
_RESERVED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "idempotency-key"})
"""Set by Signoff or by the HTTP client, never by the file: the key is the approval's, the rest the wire's."""

Method = Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
READ_ONLY_METHODS: frozenset[str] = frozenset({"GET", "HEAD"})
DEFAULT_TIMEOUT_S = 30.0
"""Seconds a call may take when neither the API nor the tool says."""
DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024
MAX_RESPONSE_BYTES_LIMIT = 16 * 1024 * 1024
SECRET_MIN_LENGTH = 4
"""Values from the environment this long or longer are scrubbed from results and errors; shorter
ones would blank out ordinary text (and are no secret worth the name)."""


def tool_name(api: str, tool: str) -> str:
    """The name a model calls an API's tool by, as MCP tools are `mcp__<server>__<tool>`."""
    return f"http__{api}__{tool}"


class HttpConfigError(ValueError):
    """The HTTP tools file cannot be used; every problem found, at once, one line each."""

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems))


def _upper(value: Any) -> Any:
    return value.upper() if isinstance(value, str) else value


class EndpointConfig(BaseModel):
    """One tool of an API: one method on one path template, with the arguments it takes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=TOOL_PART.pattern)
    method: Annotated[Method, BeforeValidator(_upper)]
    path: str
    description: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    args_in: Literal["query", "body"] | None = None
    side_effect: bool | None = None
    idempotent: bool | None = None
    timeout: PositiveFloat | None = None
    redact: tuple[str, ...] = ()

    @field_validator("name")
    @classmethod
    def _one_name_end(cls, name: str) -> str:
        if "__" in name:
            raise ValueError("a tool's name may not contain '__' (it separates API and tool in tool names)")
        return name

    @field_validator("path")
    @classmethod
    def _a_path_on_the_api(cls, path: str) -> str:
        # Only ever a path below base_url: never a URL, a query or a way up (see `placeholders`).
        if not path.startswith("/") or path.startswith("//"):
            raise ValueError("must start with '/' (a path below base_url, never a URL)")
        literal = PLACEHOLDER.sub("", path)
        if "{" in literal or "}" in literal:
            raise ValueError("has an unmatched '{' or '}'")
        if "?" in literal or "#" in literal:
            raise ValueError("may not hold '?' or '#': arguments go in the query with args_in: query")
        if not _PATH_CHARS.match(literal):
            raise ValueError("holds characters a URL path cannot (spaces, quotes, backslashes…)")
        segments = PLACEHOLDER.sub("x", path).split("/")
        if "//" in path or any(segment in (".", "..") for segment in segments):
            raise ValueError("may not hold '//', '.' or '..' segments")
        bad = [name for name in PLACEHOLDER.findall(path) if not _IDENTIFIER.match(name)]
        if bad:
            raise ValueError(f"placeholder {{{bad[0]}}} is not a name (letters, digits, '_')")
        return path

    @model_validator(mode="after")
    def _args_fit_the_request(self) -> EndpointConfig:
        try:
            JsonSchemaArgs(self.args)
        except InvalidSchema as exc:
            raise ValueError(f"args: {exc}") from None
        properties = self.args.get("properties", {})
        required = set(self.args.get("required", []))
        for name in self.placeholders:
            if name not in properties or name not in required:
                raise ValueError(f"path: placeholder {{{name}}} must be a property of args, and required")
            kind = properties[name].get("type") if isinstance(properties[name], dict) else None
            if kind is not None and kind not in ("string", "integer", "number"):
                raise ValueError(f"path: placeholder {{{name}}} must be a string, integer or number in args")
        if self.sends_in == "body" and self.method in READ_ONLY_METHODS:
            raise ValueError(f"args_in: a {self.method} request has no body; use args_in: query")
        in_url = [name for name in self.redact
                  if name in self.placeholders or (self.sends_in == "query" and name in properties)]
        if in_url:
            raise ValueError(f"redact: {in_url[0]} would go in the URL, which servers and proxies log; "
                             "send it in the body (args_in: body)")
        return self

    @property
    def placeholders(self) -> list[str]:
        """The argument names the path template takes, in order."""
        return PLACEHOLDER.findall(self.path)

    @property
    def sends_in(self) -> Literal["query", "body"]:
        """Where the arguments that are not in the path go: `args_in`, else by the method."""
        if self.args_in is not None:
            return self.args_in
        return "query" if self.method in (*READ_ONLY_METHODS, "DELETE") else "body"


class ApiConfig(BaseModel):
    """One API: where it is, what every request carries, and its tools."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=API_NAME.pattern)
    base_url: str
    # Values are usually credentials: kept out of repr and of every message.
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    timeout: PositiveFloat | None = None
    max_response_bytes: int = Field(DEFAULT_MAX_RESPONSE_BYTES, gt=0, le=MAX_RESPONSE_BYTES_LIMIT)
    trusted: bool = False
    tools: tuple[EndpointConfig, ...] = ()
    _secrets: tuple[str, ...] = PrivateAttr(())

    @field_validator("name")
    @classmethod
    def _one_name_end(cls, name: str) -> str:
        if "__" in name:
            raise ValueError("an API's name may not contain '__' (it separates API and tool in tool names)")
        return name

    @field_validator("base_url")
    @classmethod
    def _an_http_origin(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("expected an http(s) URL such as https://api.example.com/v1")
        if parts.username is not None or parts.password is not None:
            raise ValueError("may not hold credentials: put them in headers, from ${VAR}")
        if parts.query or parts.fragment or url.endswith(("?", "#")):
            raise ValueError("may not hold a query or a fragment")
        try:
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError:
            raise ValueError("has a port that is not a number") from None
        return url.rstrip("/")

    @field_validator("headers")
    @classmethod
    def _headers_of_our_own(cls, headers: dict[str, str]) -> dict[str, str]:
        for name, value in headers.items():
            if not _HEADER_NAME.match(name):
                raise ValueError(f"{name!r} is not a header name")
            if name.lower() in _RESERVED_HEADERS:
                raise ValueError(f"{name} is set by Signoff or the HTTP client, not by the file")
            if any(char in value for char in "\r\n\0"):
                raise ValueError(f"{name}: a header value may not hold line breaks")
        return headers

    @property
    def host(self) -> str:
        """Where every request of this API goes, `host[:port]` (the only host it may go to)."""
        return urlsplit(self.base_url).netloc

    @property
    def secrets(self) -> tuple[str, ...]:
        """The values taken from the environment into headers, longest first: never shown anywhere."""
        return self._secrets

    def endpoint(self, name: str) -> EndpointConfig:
        return next(tool for tool in self.tools if tool.name == name)


class HttpConfig(BaseModel):
    """Every configured API, by name, in the file's order."""

    model_config = ConfigDict(frozen=True)

    path: str
    apis: dict[str, ApiConfig]


def load_config(path: str | Path, environ: Mapping[str, str]) -> HttpConfig:
    """Read and check the file at `path`, `${VAR}` in headers taken from `environ`.

    Raises `HttpConfigError` listing every problem, one line each.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise HttpConfigError(f"SIGNOFF_HTTP_TOOLS: cannot read {str(path)!r}: {reason}") from None
    try:
        data = load_yaml(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise HttpConfigError(f"{path}: not valid YAML or JSON{where}: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise HttpConfigError(f"{path}: not valid YAML or JSON: {' '.join(str(exc).split())}") from None
    return parse_config(data, environ, path=str(path))


def parse_config(data: Any, environ: Mapping[str, str], *, path: str = "apis.yaml") -> HttpConfig:
    """`load_config` for a document already read."""
    apis = data.get("apis") if isinstance(data, dict) else None
    if not isinstance(apis, dict) or not apis or set(data) != {"apis"}:
        raise HttpConfigError(f'{path}: expected one key, "apis", mapping each API\'s name to its '
                              "base_url, headers and tools")
    problems: list[str] = []
    parsed: dict[str, ApiConfig] = {}
    for name, entry in apis.items():
        api = _parse_api(str(name), entry, environ, problems)
        if api is not None:
            parsed[api.name] = api
    if problems:
        raise HttpConfigError([f"{path}: {problem}" for problem in problems])
    return HttpConfig(path=path, apis=parsed)


def _parse_api(name: str, entry: Any, environ: Mapping[str, str], problems: list[str]) -> ApiConfig | None:
    """One API entry, or None with what is wrong with it added to `problems`."""
    where = f"api {name}"
    if not isinstance(entry, dict):
        problems.append(f"{where}: expected a mapping with base_url and tools")
        return None
    found = len(problems)
    raw_tools = entry.get("tools")
    headers, secrets = _expand_headers(entry.get("headers", {}), environ, where, problems)
    try:
        api = ApiConfig.model_validate({**entry, "name": name, "headers": headers, "tools": ()})
    except ValidationError as exc:
        problems.extend(f"{where}: {problem}" for problem in _problems(exc))
        api = None
    if not isinstance(raw_tools, list) or not raw_tools:
        problems.append(f"{where}: tools: expected a list of tools (name, method, path, description, args)")
        return None
    tools: list[EndpointConfig] = []
    for position, raw in enumerate(raw_tools, start=1):
        label = raw.get("name") if isinstance(raw, dict) and isinstance(raw.get("name"), str) else f"#{position}"
        tool = _parse_tool(raw, f"{where}, tool {label}", trusted=bool(entry.get("trusted") is True),
                           problems=problems)
        if tool is None:
            continue
        if not TOOL_NAME.match(tool_name(name, tool.name)):
            problems.append(f"{where}, tool {tool.name}: name: {tool_name(name, tool.name)!r} is longer than "
                            "64 characters")
            continue
        if any(other.name == tool.name for other in tools):
            problems.append(f"{where}, tool {tool.name}: name: given twice")
            continue
        tools.append(tool)
    if api is None or len(problems) > found:
        return None
    api = api.model_copy(update={"tools": tuple(tools)})
    api._secrets = tuple(sorted(secrets, key=len, reverse=True))
    return api


def _parse_tool(raw: Any, where: str, *, trusted: bool, problems: list[str]) -> EndpointConfig | None:
    if not isinstance(raw, dict):
        problems.append(f"{where}: expected a mapping with name, method, path, description and args")
        return None
    try:
        tool = EndpointConfig.model_validate(raw)
    except ValidationError as exc:
        problems.extend(f"{where}: {problem}" for problem in _problems(exc))
        return None
    if trusted:
        return tool
    # Stricter is always allowed; looser is the operator vouching for the API, twice.
    loosened = []
    if tool.side_effect is False and tool.method not in READ_ONLY_METHODS:
        loosened.append(f'side_effect: false on a {tool.method} needs "trusted: true" on the API')
    side_effect = tool.side_effect if tool.side_effect is not None else tool.method not in READ_ONLY_METHODS
    if tool.idempotent is True and side_effect:
        loosened.append('idempotent: true needs "trusted: true" on the API (it lets a call cut short by '
                        "a crash run again with the same Idempotency-Key)")
    problems.extend(f"{where}: {why}" for why in loosened)
    return None if loosened else tool


def _expand_headers(headers: Any, environ: Mapping[str, str], where: str,
                    problems: list[str]) -> tuple[Any, list[str]]:
    """`headers` with `${VAR}` replaced from `environ`, and the values put in (the secrets)."""
    if not isinstance(headers, dict):
        return headers, []  # validation says what it should be
    secrets: list[str] = []
    expanded: dict[str, Any] = {}
    for header, value in headers.items():
        if not isinstance(value, str):
            expanded[header] = value
            continue

        def replace(match: re.Match[str], header: Any = header) -> str:
            variable, default = match.group(1), match.group(2)
            if environ.get(variable, "") != "":
                found = environ[variable]
            elif default is not None:
                found = default
            else:
                problems.append(f"{where}: headers.{header} uses ${{{variable}}}, which is not set in the environment")
                return ""
            if len(found) >= SECRET_MIN_LENGTH:
                secrets.append(found)
            return found

        expanded[header] = _VARIABLE.sub(replace, value)
    return expanded, secrets


def _problems(exc: ValidationError) -> list[str]:
    """`field: message` for each error, never quoting the input (a header value is a secret)."""
    problems = []
    for err in exc.errors(include_input=False, include_url=False):
        where = ".".join(str(part) for part in err["loc"])
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "not a key Signoff knows (a typo?)"
        elif err["type"] == "literal_error" and err["loc"] and err["loc"][-1] == "method":
            message = f"expected one of {', '.join(get_args(Method))}"
        problems.append(f"{where}: {message}" if where else message)
    return problems


