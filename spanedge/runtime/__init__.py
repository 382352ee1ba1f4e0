"""The pure dataflow runtime: operators, windows, watermarks, keyed state and snapshots.

Nothing here does I/O. The edge agent, :mod:`spanedge.testing`, the hub's
Python operators and the simulator's reference all run records through it.
"""

from spanedge.runtime.build import edge_part, from_plan, recovery_part
from spanedge.runtime.operators import WINDOW_TIME_OFFSET, apply, failure
from spanedge.runtime.outputs import DeadLetter, HubRecord, Outputs, SinkItem
from spanedge.runtime.pipeline import Node, Pipeline, check_idle_timeout
from spanedge.runtime.snapshot import SNAPSHOT_VERSION, OperatorSnapshot
from spanedge.runtime.windows import FieldError, WindowState

__all__ = [
    "SNAPSHOT_VERSION",
    "WINDOW_TIME_OFFSET",
    "DeadLetter",
    "FieldError",
    "HubRecord",
    "Node",
    "OperatorSnapshot",
    "Outputs",
    "Pipeline",
    "SinkItem",
    "WindowState",
    "apply",
    "check_idle_timeout",
    "edge_part",
    "failure",
    "from_plan",
    "recovery_part",
]
