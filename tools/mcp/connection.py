"""One MCP server's session, owned by a background event-loop thread, called from sync tool threads.

The SDK is async and our tools are sync: each server gets a thread running its own event loop,
and a supervisor there holds the session. A tool call is submitted to that loop and waited for
with the tool's time limit. When the connection ends (the server exited, the network went), the
supervisor starts it again, waiting longer each time it fails quickly; calls made meanwhile fail as
"server git is unavailable: ...". A server that says its tool list changed (or lists other tools
after a restart) is listed again, and `on_tools_changed` is told the new listing. `close()` ends the session the SDK's way (stdin closed, then
SIGTERM, then SIGKILL for a stdio server) and joins the thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import tempfile
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TextIO, cast

from mcp import Client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, RequestParamsMeta, ToolListChangedNotification

from signoff.tools.mcp.config import ServerConfig
from signoff.tools.mcp.transport import open_transport

log = logging.getLogger("signoff.tools.mcp")

IDEMPOTENCY_META_KEY = "signoff/idempotency_key"
"""The `_meta` key that carries `run_id:step` with every call, so servers that can dedupe do."""

FIRST_RESTART_DELAY_S = 0.5
MAX_RESTART_DELAY_S = 30.0
STABLE_AFTER_S = 10.0
"""A connection that lasted this long resets the delay: a server that crashes now and then is
restarted at once, one that crashes as it starts is not restarted in a busy loop."""
RECONNECT_WAIT_S = 10.0
"""How long a call waits for a restart under way (at most half its time limit, so that it fails as
"unavailable" rather than as a timeout)."""
ANSWER_GRACE_S = 1.0
"""A call is cancelled this long after its time limit: `run_tool` has given up on it by then."""
CLOSE_CONFIRM_S = 1.0
"""How long to wait, after the SDK says a call's connection closed, for the connection's end to show."""
MAX_TOOL_PAGES = 100
STDERR_TAIL_CHARS = 600


class ServerUnavailable(Exception):
    """The call was not sent: the server is down, restarting or stopped."""


class ConnectionLost(Exception):
    """The connection ended while the call was in flight: it may or may not have run."""


class ServerRefused(Exception):
    """The server answered the call with a protocol error (unknown tool, invalid arguments, ...)."""


class ServerStartFailed(Exception):
    """The server did not start, or did not list its tools, within its start-up time."""


@dataclass(frozen=True)
class CallOutcome:
    """What a server answered: its structured content, its content blocks as JSON, and `isError`."""

    structured: Any
    blocks: list[dict[str, Any]]
    is_error: bool


class ServerConnection:
    """The supervised session with one server; thread-safe."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.name = config.name
        self.came_up = False
        self.listing: list[dict[str, Any]] = []
        """The tools as the server first listed them (what Signoff's toolsets load, once)."""
        self.listing_now: list[dict[str, Any]] = []
        """The tools as the server lists them now."""
        self.on_tools_changed: Callable[[list[dict[str, Any]]], None] | None = None
        """Told each new listing, on the connection's thread (`follow_tools`)."""
        self._following: asyncio.Event | None = None
        self.last_error: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: Client | None = None
        self._ended: asyncio.Event | None = None
        self._holding: asyncio.Future[None] | None = None
        self._up: asyncio.Event | None = None
        self._ready = threading.Event()
        self._supervising = threading.Event()
        self._first_attempt = threading.Event()
        self._stopping = threading.Event()
        self._stop: asyncio.Event | None = None

    # -- from any thread ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the supervisor thread; `wait_started` tells how the first connection went."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._main, name=f"mcp-{self.name}", daemon=True)
        self._thread.start()

    def wait_started(self) -> list[dict[str, Any]]:
        """The server's tools (as listed, JSON) once connected; raises `ServerStartFailed` otherwise."""
        self._first_attempt.wait()
        if not self.came_up:
            raise ServerStartFailed(self.last_error or "it did not start")
        return self.listing

    def call(self, tool: str, args: dict[str, Any], key: str, timeout_s: float | None) -> CallOutcome:
        """Call `tool` with `args`, the key in `_meta`; raises `ServerUnavailable` (nothing was sent),
        `ConnectionLost` (it was sent), `ServerRefused`, or `TimeoutError` after the time limit."""
        wait = RECONNECT_WAIT_S if timeout_s is None else min(RECONNECT_WAIT_S, timeout_s / 2)
        if not self._connected(wait):
            raise ServerUnavailable(self.last_error or "it is not running")
        future = self._submit(self._call(tool, args, key, wait))
        try:
            return future.result(timeout=None if timeout_s is None else timeout_s + ANSWER_GRACE_S)
        except concurrent.futures.TimeoutError:
            future.cancel()  # the SDK tells the server the request is cancelled
            raise TimeoutError(f"no answer within {timeout_s:g}s") from None
        except concurrent.futures.CancelledError:
            raise ConnectionLost("the server was stopped during the call") from None

    def follow_tools(self, listener: Callable[[list[dict[str, Any]]], None]) -> None:
        """Tell `listener` each new listing, from now on (the gateway offers what is listed now).
        Only then does the connection hold a `subscriptions/listen` stream open: Signoff's toolsets
        keep the tools they loaded, and an open stream would hold up a remote server's shutdown."""
        self.on_tools_changed = listener
        loop, following = self._loop, self._following
        if loop is not None and following is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed between the check and the call
                loop.call_soon_threadsafe(following.set)

    def _connected(self, wait: float) -> bool:
        """Whether the session is up, waiting up to `wait` seconds for a connection being made."""
        if self._stopping.is_set() or self._loop is None:
            return False
        if self._ready.is_set():
            return True
        return self._supervising.is_set() and self._ready.wait(wait)

    def close(self, timeout: float = 15.0) -> None:
        """Stop the server and the thread (idempotent). Calls in flight end as `ConnectionLost`."""
        self._stopping.set()
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed between the check and the call
                loop.call_soon_threadsafe(stop.set)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("MCP server %s did not stop within %gs", self.name, timeout)

    def _submit(self, coroutine: Coroutine[Any, Any, CallOutcome]) -> concurrent.futures.Future[CallOutcome]:
        assert self._loop is not None
        try:
            return asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        except RuntimeError:  # the loop is closed: the server was stopped
            coroutine.close()
            raise ServerUnavailable("it was stopped") from None

    # -- on the server's own loop ---------------------------------------------------------------------

    def _main(self) -> None:
        self._supervising.set()
        try:
            asyncio.run(self._supervise())
        except Exception as exc:  # a bug in the supervisor: say so once, the tools fail as unavailable
            log.error("MCP server %s: supervisor stopped: %s", self.name, exc)
            self.last_error = f"its supervisor stopped ({type(exc).__name__})"
        finally:
            self._supervising.clear()
            self._ready.clear()
            self._first_attempt.set()

    async def _supervise(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._up = asyncio.Event()
        self._stop = asyncio.Event()
        self._following = asyncio.Event()
        if self.on_tools_changed is not None:
            self._following.set()
        if self._stopping.is_set():
            return
        delay = FIRST_RESTART_DELAY_S
        while not self._stop.is_set():
            started = self._loop.time()
            try:
                self._went_down(await self._connect_once())
            except Exception as exc:
                self._went_down(describe(exc))
            if self._stop.is_set() or not self.came_up:
                return  # stopped, or never came up: start-up reports it, nothing retries
            if self._loop.time() - started >= STABLE_AFTER_S:
                delay = FIRST_RESTART_DELAY_S
            log.warning("MCP server %s is down (%s); restarting in %gs", self.name, self.last_error, delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
            delay = min(delay * 2, MAX_RESTART_DELAY_S)

    async def _connect_once(self) -> str:
        """One connection: start, list the tools, then hold it until it ends or we stop; why it ended."""
        assert self._stop is not None
        up, ended = asyncio.Event(), asyncio.Event()
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
            holding = self._holding = asyncio.ensure_future(self._hold(errlog, up, ended))
            watchers = [asyncio.ensure_future(up.wait()), asyncio.ensure_future(self._stop.wait())]
            done, _ = await asyncio.wait({holding, *watchers}, timeout=self.config.startup_timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
            for watcher in watchers:
                watcher.cancel()
            if not done:
                holding.cancel()
                await asyncio.gather(holding, return_exceptions=True)
                raise ServerStartFailed(f"it did not answer within {self.config.startup_timeout:g}s"
                                        + _tail(errlog))
            try:
                await holding
            except Exception as exc:
                raise ServerStartFailed(describe(exc) + _tail(errlog)) from None
            return "the connection closed" + _tail(errlog)

    async def _hold(self, errlog: TextIO, up: asyncio.Event, ended: asyncio.Event) -> None:
        assert self._stop is not None
        changed = asyncio.Event()

        async def on_message(message: Any) -> None:  # a server of the handshake era says so this way
            if isinstance(message, ToolListChangedNotification):
                changed.set()

        async with Client(open_transport(self.config, errlog, ended.set), cache=None,
                          message_handler=on_message) as client:
            listing = await _list_tools(client)
            if self.came_up and listing != self.listing:
                log.warning("MCP server %s lists different tools since it restarted; Signoff's toolsets keep "
                            "the ones they loaded (restart Signoff to load the new ones)", self.name)
            if not self.came_up:
                self.listing, self.came_up = listing, True
            self._listed(listing)
            self.last_error = None
            self._session(client, ended)
            up.set()
            self._first_attempt.set()
            waits = [asyncio.ensure_future(self._stop.wait()), asyncio.ensure_future(ended.wait()),
                     asyncio.ensure_future(self._watch_tools(client, changed))]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()
                self._session(None)

    async def _watch_tools(self, client: Client, changed: asyncio.Event) -> None:
        """List the tools again each time the server says they changed, for as long as the session
        lasts (a server of the 2026 protocol says so on a `subscriptions/listen` stream)."""
        listening = asyncio.ensure_future(self._listen(client, changed))  # once someone follows the tools
        try:
            while True:
                await changed.wait()
                changed.clear()
                try:
                    self._listed(await _list_tools(client))
                except MCPError as exc:
                    log.warning("MCP server %s said its tools changed but did not list them: %s", self.name, exc)
        finally:
            listening.cancel()

    async def _listen(self, client: Client, changed: asyncio.Event) -> None:
        if self._following is not None:
            await self._following.wait()
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _ in subscription:
                    changed.set()
        except (ListenNotSupportedError, SubscriptionLost, MCPError):
            return  # an older server (its notification reaches `on_message`), or one that does not tell

    def _listed(self, listing: list[dict[str, Any]]) -> None:
        if listing == self.listing_now:
            return
        self.listing_now = listing
        if self.on_tools_changed is not None:
            try:
                self.on_tools_changed(listing)
            except Exception:  # the listener's fault must not end the session
                log.exception("MCP server %s: a listener of tool list changes failed", self.name)

    def _session(self, client: Client | None, ended: asyncio.Event | None = None) -> None:
        """The session calls go to (None: none now), on the loop and for the threads that call."""
        self._client, self._ended = client, ended
        if client is None:
            self._ready.clear()
            if self._up is not None:
                self._up.clear()
        else:
            self._ready.set()
            if self._up is not None:
                self._up.set()

    def _went_down(self, reason: str) -> None:
        self._session(None)
        if not self._stop or not self._stop.is_set():
            self.last_error = reason
        self._first_attempt.set()

    async def _call(self, tool: str, args: dict[str, Any], key: str, wait: float) -> CallOutcome:
        if self._client is None and self._up is not None:
            # The connection ended after the caller saw it up: wait for the restart, as it would have.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._up.wait(), wait)
        client, ended = self._client, self._ended
        if client is None:
            raise ServerUnavailable(self.last_error or "it is restarting")
        meta = cast(RequestParamsMeta, {IDEMPOTENCY_META_KEY: key})
        try:
            result = await client.call_tool(tool, args, meta=meta)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED and await self._connection_ended(ended):
                if self._client is client:
                    self._session(None)
                raise ConnectionLost("the connection closed during the call") from None
            raise ServerRefused(exc.message) from None
        except RuntimeError as exc:  # the SDK's check of a result against the tool's output schema
            raise ServerRefused(str(exc)) from None
        blocks = [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content]
        return CallOutcome(result.structured_content, blocks, result.is_error)


    async def _connection_ended(self, ended: asyncio.Event | None) -> bool:
        """After the SDK's "connection closed": whether the connection really ended (its stream, or
        the session holding it), rather than a server answering with the same error code."""
        waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(ended.wait())] if ended is not None else []
        if self._holding is not None:
            waits.append(self._holding)
        if not waits:
            return True
        done, _ = await asyncio.wait(waits, timeout=CLOSE_CONFIRM_S, return_when=asyncio.FIRST_COMPLETED)
        if ended is not None:
            waits[0].cancel()  # only our own waiter: the session is not ours to cancel
        return bool(done)


async def _list_tools(client: Client) -> list[dict[str, Any]]:
    """Every tool the server lists, page after page, as the JSON it sent."""
    tools: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def describe(exc: BaseException) -> str:
    """One line for an exception, looking inside the exception groups anyio raises."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(inner) for inner in exc.exceptions)
    if isinstance(exc, MCPError):
        return exc.message
    if isinstance(exc, ServerStartFailed | ConnectionLost | ServerUnavailable):
        return str(exc)
    if isinstance(exc, FileNotFoundError) and exc.filename:
        return f"{exc.filename}: command not found"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _tail(errlog: TextIO) -> str:
    """The last lines the server wrote to stderr, to quote with a failure to start."""
    try:
        errlog.seek(0)
        text = errlog.read()[-STDERR_TAIL_CHARS:].strip()
    except (OSError, ValueError):
        return ""
    return f" (its stderr ends: {' | '.join(line for line in text.splitlines()[-5:] if line.strip())})" if text else ""
