"""Operator placement: an integer program over the operator DAG (a networkx graph), the sites and link latencies.

The solver comes with the ``placement`` extra (``pip install 'spanedge[placement]'``,
included in ``hub``, ``sim`` and ``all``); without it, importing this package raises
:class:`~spanedge.errors.MissingExtra`, which names that command.

>>> from placement import plan_app, solve, Weights, LatencyMatrix
"""

from placement.cost import Weights
from placement.latency import LatencyMatrix
from placement.planner import plan_app, solve
from placement.problem import Previous

__all__ = ["LatencyMatrix", "Previous", "Weights", "plan_app", "solve"]
