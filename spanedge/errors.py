"""The exceptions SpanEdge raises, all rooted at :class:`SpanEdgeError`."""

from __future__ import annotations


class SpanEdgeError(Exception):
    """Root of every error SpanEdge raises on purpose."""


class InvalidDataflow(SpanEdgeError, ValueError):
    """The app's dataflow is malformed (names, scopes, windows, aggregations)."""


class InvalidSites(SpanEdgeError, ValueError):
    """A ``sites.yaml`` file is malformed or inconsistent with the app."""


class InvalidPlan(SpanEdgeError, ValueError):
    """A plan is malformed, forged, stale or does not match its app."""


class InfeasiblePlacement(SpanEdgeError, ValueError):
    """No placement satisfies the scope and capacity constraints."""


class MissingExtra(SpanEdgeError, ImportError):
    """An optional dependency group is not installed."""

    def __init__(self, module: str, extra: str) -> None:
        """Name the missing module and the extra that provides it."""
        super().__init__(
            f"{module} is not installed; it comes with the '{extra}' extra: run pip install 'spanedge[{extra}]'"
        )
        self.module = module
        self.extra = extra
