"""The operator DAG (:class:`OperatorGraph`) and its validation."""

from __future__ import annotations

import graphlib
from collections.abc import Iterator, Mapping

from spanedge.errors import InvalidDataflow
from spanedge.operators import Kind, Operator
from spanedge.schema import fields
from spanedge.scope import Scope


class OperatorGraph:
    """An app's operators by name, with the edges from each operator to those reading from it.

    Immutable. Iterating yields the operator names in a topological order
    (every operator after all its upstream operators; ties keep the order
    the operators were added in), as :attr:`order` does.
    """

    __slots__ = ("_down", "_ops", "_order", "_up", "app")

    def __init__(self, app: str, ops: Mapping[str, Operator]) -> None:
        """Index ``ops`` (operators by name) of app ``app``.

        Raises:
            InvalidDataflow: an operator reads from an unknown operator, or the operators form a cycle.
        """
        self.app = app
        self._ops: dict[str, Operator] = dict(ops)
        self._up: dict[str, tuple[str, ...]] = {}
        down: dict[str, list[str]] = {name: [] for name in self._ops}
        for op in self._ops.values():
            for upstream in op.inputs:
                if upstream not in self._ops:
                    msg = (
                        f"operator {op.describe()} reads from unknown operator '{upstream}'; "
                        f"add an operator named '{upstream}' to app '{app}' or read from one it has"
                    )
                    raise InvalidDataflow(msg)
            self._up[op.name] = tuple(dict.fromkeys(op.inputs))
            for upstream in self._up[op.name]:
                down[upstream].append(op.name)
        self._down = {name: tuple(downs) for name, downs in down.items()}
        sorter: graphlib.TopologicalSorter[str] = graphlib.TopologicalSorter()
        for name in self._ops:  # every node first: ties then keep the order the operators were added in
            sorter.add(name)
        for name, ups in self._up.items():
            sorter.add(name, *ups)
        try:
            self._order = tuple(sorter.static_order())
        except graphlib.CycleError as err:
            cycle = " -> ".join(self._ops[name].describe() for name in err.args[1])
            msg = (
                f"the dataflow of app '{app}' has a cycle: {cycle}; "
                "streams must flow from sources to sinks: make one of these operators read from another stream"
            )
            raise InvalidDataflow(msg) from None

    @property
    def order(self) -> tuple[str, ...]:
        """Every operator's name, each after all its upstream operators."""
        return self._order

    @property
    def edges(self) -> tuple[tuple[str, str], ...]:
        """Every ``(upstream, downstream)`` pair, by upstream in the order the operators were added."""
        return tuple((up, down) for up, downs in self._down.items() for down in downs)

    def op(self, name: str) -> Operator:
        """The operator named ``name``.

        Raises:
            KeyError: the app has no such operator.
        """
        return self._ops[self._known(name)]

    def predecessors(self, name: str) -> tuple[str, ...]:
        """The operators ``name`` reads from, in the order of its inputs."""
        return self._up[self._known(name)]

    def successors(self, name: str) -> tuple[str, ...]:
        """The operators reading from ``name``, in the order they were added."""
        return self._down[self._known(name)]

    def ancestors(self, name: str) -> frozenset[str]:
        """Every operator ``name`` reads from, directly or not (``name`` excluded)."""
        return self._reach(name, self._up)

    def descendants(self, name: str) -> frozenset[str]:
        """Every operator reading from ``name``, directly or not (``name`` excluded)."""
        return self._reach(name, self._down)

    def _known(self, name: str) -> str:
        if name not in self._ops:
            msg = f"app '{self.app}' has no operator '{name}' (it has: {', '.join(self._order)})"
            raise KeyError(msg)
        return name

    def _reach(self, name: str, step: Mapping[str, tuple[str, ...]]) -> frozenset[str]:
        seen: set[str] = set()
        todo = list(step[self._known(name)])
        while todo:
            node = todo.pop()
            if node not in seen:
                seen.add(node)
                todo.extend(step[node])
        return frozenset(seen)

    def __contains__(self, name: object) -> bool:
        """Whether the app has an operator named ``name``."""
        return name in self._ops

    def __iter__(self) -> Iterator[str]:
        """The operator names in :attr:`order`."""
        return iter(self._order)

    def __len__(self) -> int:
        """The number of operators."""
        return len(self._ops)

    def __repr__(self) -> str:
        """Show the app's name and the operator and edge counts."""
        return f"OperatorGraph({self.app!r}, {len(self)} operators, {len(self.edges)} edges)"


def build_graph(app_name: str, ops: Mapping[str, Operator]) -> OperatorGraph:
    """Return the DAG of an app's operators after validating it.

    Raises:
        InvalidDataflow: the dataflow is not valid; the message names the operators and their lines.
    """
    graph = OperatorGraph(app_name, ops)
    if not any(graph.op(n).kind is Kind.SOURCE for n in graph):
        msg = f"app '{app_name}' has no source; add one with app.source('<stream>')"
        raise InvalidDataflow(msg)
    for name in graph:
        op = graph.op(name)
        if op.kind is Kind.SINK and graph.successors(name):
            msg = f"sink {op.describe()} cannot feed other operators"
            raise InvalidDataflow(msg)
        if op.scope is Scope.LOCAL:
            for anc in graph.ancestors(name):
                up = graph.op(anc)
                if up.hub_only:
                    msg = (
                        f"operator {op.describe()} is @local but reads from hub-only operator "
                        f"{up.describe()}; local operators must come before global ones: "
                        f"move {op.name!r} upstream of {up.name!r} or drop @local"
                    )
                    raise InvalidDataflow(msg)
        if op.window is not None:
            _check_window(graph, op)
        if op.model is not None:
            _check_features(graph, op)
    return graph


def known_fields(graph: OperatorGraph, name: str) -> dict[str, str] | None:
    """Return the declared fields of the records ``name`` emits, if known."""
    op = graph.op(name)
    if op.schema is not None:
        return fields(op.schema)
    if op.window is not None:
        spec = op.window
        out = {spec.key: "STRING", "window_start": "DOUBLE", "window_end": "DOUBLE"}
        out.update({field: "DOUBLE" for field, _ in spec.aggs})
        return out
    if op.kind in (Kind.FILTER, Kind.SINK) and op.inputs:
        return known_fields(graph, op.inputs[0])
    if op.kind is Kind.PREDICT and op.output is not None:
        upstream = known_fields(graph, op.inputs[0])
        return None if upstream is None else {**upstream, op.output: "DOUBLE"}
    return None


def _check_features(graph: OperatorGraph, op: Operator) -> None:
    assert op.model is not None
    spec = op.model
    checks = [(op.inputs[0], spec.features, "scores")]
    if spec.train_on in graph:
        wanted = spec.features + ((spec.label,) if spec.label else ())
        checks.append((spec.train_on, wanted, "trains on"))
    for stream, wanted, role in checks:
        available = known_fields(graph, stream)
        missing = [f for f in wanted if available is not None and f not in available]
        if missing:
            msg = (
                f"{op.kind.value} {op.describe()}: {spec.describe()} {role} '{stream}', whose records lack "
                f"{', '.join(repr(f) for f in missing)} (they have: {', '.join(sorted(available or {}))}); "
                "fix the field names or the declared schema"
            )
            raise InvalidDataflow(msg)


def _check_window(graph: OperatorGraph, op: Operator) -> None:
    assert op.window is not None
    available = known_fields(graph, op.inputs[0])
    if available is None:
        return
    wanted = [(op.window.key, "key")] + [
        (a.field, f"aggregation '{out}' ({a.describe()})") for out, a in op.window.aggs if a.field
    ]
    for field, role in wanted:
        if field not in available:
            msg = (
                f"window {op.describe()}: {role} uses field '{field}', which the records of "
                f"'{op.inputs[0]}' do not have (they have: {', '.join(sorted(available))}); "
                "fix the field name or the declared schema"
            )
            raise InvalidDataflow(msg)


def sources_of(graph: OperatorGraph, name: str) -> set[str]:
    """Return the source operators ``name`` (transitively) reads from, ``name`` itself if a source."""
    return {n for n in graph.ancestors(name) | {name} if graph.op(n).kind is Kind.SOURCE}
