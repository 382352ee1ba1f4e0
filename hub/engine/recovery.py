"""Restarting the failed queries of the deployed apps from their checkpoints (waits: :mod:`hub.engine.restarts`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from hub.engine.queries import Deployed
from hub.engine.restarts import RestartBook
from spanedge.app import App
from spanedge.plan import Plan

log = logging.getLogger(__name__)


class Recovery:
    """The failures and restarts of every hub query (not thread-safe: callers lock)."""

    def __init__(self) -> None:
        """Start with no failures."""
        self.book = RestartBook()

    def total(self, app: str, slot: str) -> int:
        """How often the query in ``slot`` of ``app`` was restarted."""
        return self.book.total(app, slot)

    def forget(self, app: str, slot: str) -> None:
        """Drop the history of a query that no longer exists."""
        self.book.forget(app, slot)

    def recover(self, apps: Mapping[str, Deployed], deploy: Callable[[App, Plan], None], now: float) -> list[str]:
        """Redeploy each app with a failed query whose wait is over, which restarts the queries that are not running.

        Returns:
            ``<app>/<slot>`` of the queries restarted by this call.
        """
        restarted: list[str] = []
        for name, deployed in list(apps.items()):
            due = []
            for slot, q in deployed.queries.items():
                error = q.failure()  # None while running, and for a finished availableNow query
                if error is not None and self.book.failed(name, slot, error, now):
                    due.append(slot)
            if not due:
                continue
            try:
                deploy(deployed.app, deployed.plan)  # rebuilds exactly the queries that are not running
            except Exception:
                log.exception("app %s: restarting queries %s failed; trying again later", name, ", ".join(due))
                for slot in due:
                    self.book.retry_later(name, slot, now)
                continue
            for slot in due:
                self.book.restarted(name, slot, now)
                restarted.append(f"{name}/{slot}")
        return restarted
