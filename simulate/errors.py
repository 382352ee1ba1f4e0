"""The errors of the simulator: bad options, and a topology that cannot be brought up or run."""

from __future__ import annotations

from spanedge.errors import SpanEdgeError


class SimulationError(SpanEdgeError):
    """A simulated topology could not be brought up or run."""


class InvalidOption(SimulationError, ValueError):
    """An option of a run has a value it cannot take (an unknown placement, mode or broker, a negative time)."""
