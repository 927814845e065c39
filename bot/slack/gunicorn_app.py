"""`signoff serve` in HTTP mode: gunicorn, with the bot built in its worker process after the fork
(threads do not survive one), its options, and its log lines written through Signoff's logging."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from signoff.bot.settings import Settings
from signoff.bot.slack.wsgi import WsgiApp


class Served(Protocol):
    """What gunicorn's worker builds and serves: the bot's WSGI app, closed as the worker exits."""

    @property
    def wsgi(self) -> WsgiApp: ...

    def close(self, wait: bool = True) -> None: ...


def gunicorn_options(settings: Settings) -> dict[str, Any]:
    # One process with threads: the worker pool and scheduler live in it. More processes (or
    # replicas) are safe, because the store decides every race; see docs/operations.md.
    # No control socket: it would be made under $HOME, which is read-only in a locked-down pod.
    return {"bind": f"0.0.0.0:{settings.port}", "workers": 1, "worker_class": "gthread", "threads": 32,
            "timeout": 30, "graceful_timeout": 30, "accesslog": None, "loglevel": settings.log_level.lower(),
            "control_socket_disable": True}


class Gunicorn:
    """gunicorn with our app built in the worker process, after the fork (threads do not survive one)."""

    def __init__(self, factory: Callable[[], Served], options: dict[str, Any]) -> None:
        from gunicorn.app.base import BaseApplication

        services: list[Served] = []

        def close_services(server: object, worker: object) -> None:
            for service in services:
                service.close(wait=True)

        class Application(BaseApplication):  # type: ignore[misc]  # gunicorn ships no type hints
            def load_config(self) -> None:
                for key, value in options.items():
                    self.cfg.set(key, value)
                self.cfg.set("worker_exit", close_services)
                self.cfg.set("logger_class", _gunicorn_logger())

            def load(self) -> WsgiApp:
                service = factory()
                services.append(service)
                return service.wsgi

        self._application = Application()

    def run(self) -> None:
        self._application.run()


def _gunicorn_logger() -> type:
    """gunicorn's logger, writing through ours: its lines timestamped and formatted (JSON too) as
    Signoff's are, and masked the same way."""
    from gunicorn.glogging import Logger

    class GunicornLogger(Logger):  # type: ignore[misc]  # gunicorn ships no type hints
        def setup(self, cfg: Any) -> None:
            super().setup(cfg)
            for logger in (self.error_log, self.access_log):
                for handler in list(logger.handlers):
                    logger.removeHandler(handler)
                logger.propagate = True

    return GunicornLogger
