"""Operator placement: an integer program over the DAG, sites and link latencies.

>>> from placement import plan_app, solve, Weights, LatencyMatrix
"""

from placement.cost import Weights
from placement.latency import LatencyMatrix
from placement.planner import plan_app, solve

__all__ = ["LatencyMatrix", "Weights", "plan_app", "solve"]
