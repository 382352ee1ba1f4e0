"""The exceptions SpanEdge raises, all rooted at :class:`SpanEdgeError`."""

from __future__ import annotations


class SpanEdgeError(Exception):
    """Root of every error SpanEdge raises on purpose."""


class InvalidDataflow(SpanEdgeError, ValueError):
    """The app's dataflow is malformed (names, scopes, windows, aggregations)."""


class InvalidName(InvalidDataflow):
    """A name (of an app or a site) outside its documented pattern; see :mod:`spanedge.names`.

    It is an :class:`InvalidDataflow` because an app's name is part of its dataflow.
    """


class InvalidKey(SpanEdgeError, ValueError):
    """A plan-signing key, public key or trust list that cannot be read or used."""


class InvalidToken(SpanEdgeError, ValueError):
    """A configured API token is unusable: too short, malformed, or listed under two scopes."""


class InvalidJoinToken(SpanEdgeError, ValueError):
    """A join token that is malformed, altered, expired, used already or bound to another site."""


class InvalidSites(SpanEdgeError, ValueError):
    """A ``sites.yaml`` file is malformed or inconsistent with the app."""


class InvalidPlan(SpanEdgeError, ValueError):
    """A plan is malformed, forged, stale or does not match its app."""


class InvalidRollout(SpanEdgeError, ValueError):
    """A staged rollout's stages or gates are malformed or select no site, or a rollout step does not apply."""


class InvalidSettings(SpanEdgeError, ValueError):
    """A placement setting (the latency SLO, an objective weight) out of its range, or an unknown weight.

    See :mod:`spanedge.placement_settings`.
    """


class InfeasiblePlacement(SpanEdgeError, ValueError):
    """No placement satisfies the scope and capacity constraints."""


class InvalidSnapshot(SpanEdgeError, ValueError):
    """Operator state that cannot be restored: another version, or not a snapshot at all."""


class InvalidRecords(SpanEdgeError, ValueError):
    """A file of records for ``spanedge preview`` that is malformed, does not fit the app, or is over a limit."""


class MissingExtra(SpanEdgeError, ImportError):
    """An optional dependency group is not installed."""

    def __init__(self, module: str, extra: str) -> None:
        """Name the missing module and the extra that provides it."""
        super().__init__(
            f"{module} is not installed; it comes with the '{extra}' extra: run pip install 'spanedge[{extra}]'"
        )
        self.module = module
        self.extra = extra
