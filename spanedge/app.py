"""The user-facing dataflow API: :class:`App` and :class:`Stream`."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from spanedge import topics
from spanedge.aggregations import Agg
from spanedge.dag import OperatorGraph, build_graph
from spanedge.durations import parse_duration
from spanedge.errors import InvalidDataflow
from spanedge.models.predict import Predictor
from spanedge.models.spec import FIELD_PATTERN, ModelSpec, check_model
from spanedge.names import check_app_name, check_stream_name
from spanedge.numbers import require_number
from spanedge.operators import Kind, Operator, SinkSpec, WindowKind, WindowSpec
from spanedge.schema import to_ddl
from spanedge.scope import Scope, hints_of

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _caller_location() -> str:
    """Return ``file:line`` of the first stack frame outside this package."""
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_PACKAGE_DIR):
            return f"{os.path.basename(path)}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return "<unknown>"


def _func_location(func: Callable[..., Any]) -> str:
    code = getattr(func, "__code__", None)
    if code is None:
        return _caller_location()
    return f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"


def _parse_scope(scope: str | Scope | None, where: str) -> Scope:
    if scope is None:
        return Scope.ANY
    try:
        return Scope(scope)
    except ValueError:
        msg = f"{where}: scope must be 'local', 'global' or None, got {scope!r}"
        raise InvalidDataflow(msg) from None


def _estimates(where: str, cost: float | None, selectivity: float | None) -> tuple[float | None, float | None]:
    """Check placement hints: each absent, or a finite number >= 0."""
    for label, value in (("cost", cost), ("selectivity", selectivity)):
        if value is None:
            continue
        require_number(value, f"{where}: {label}", minimum=0, error=InvalidDataflow)
    return (None if cost is None else float(cost)), (None if selectivity is None else float(selectivity))


def _first(*values: float | None) -> float:
    """The first value that is not None (the last one is the default)."""
    return next(v for v in values if v is not None)


class App:
    """One dataflow: named sources, operators and sinks.

    >>> from spanedge import App
    >>> app = App("demo")
    >>> app.source("readings").map(lambda r: r).sink(console())  # doctest: +SKIP
    """

    def __init__(self, name: str) -> None:
        """Create an empty app; ``name`` (see :mod:`spanedge.names`) appears in MQTT topics, REST paths and file names."""
        self.name = check_app_name(name, f"App(...) at {_caller_location()}")
        self._ops: dict[str, Operator] = {}
        self._models: dict[str, ModelSpec] = {}
        self._auto: dict[str, int] = {}

    @property
    def operators(self) -> Mapping[str, Operator]:
        """Operators by name, in the order they were added."""
        return dict(self._ops)

    @property
    def models(self) -> Mapping[str, ModelSpec]:
        """Models by name, in the order they were declared."""
        return dict(self._models)

    def model(
        self,
        name: str,
        *,
        algorithm: str,
        features: Iterable[str],
        train_on: Stream,
        label: str | None = None,
        every: str | float | None = None,
        min_rows: int = 100,
        max_psi: float = 0.25,
        max_error: float | None = None,
        history: str | float | None = None,
        history_rows: int | None = None,
        **params: int,
    ) -> ModelSpec:
        """Declare a model the hub trains with Spark MLlib on the records of ``train_on``.

        ``algorithm`` is one of :class:`spanedge.models.Algorithm`; ``features``
        and ``label`` are record fields (``label`` for the supervised kinds only);
        ``every`` is the schedule (e.g. ``"1h"``; None: on demand only); a
        training needs ``min_rows`` records; ``params`` are the algorithm's
        (``k``, ``trees``, ``depth``, ``max_iter``). Score with :meth:`Stream.predict`.
        A site reporting a population stability index over ``max_psi``, or a live
        error over ``max_error``, makes the hub train a new version. The hub keeps
        the records of ``train_on`` of the last ``history`` (default ``"7d"``), the
        newest ``history_rows`` at most (default 100 000, or ``min_rows`` if more), and trains on those.
        """
        location = _caller_location()
        if not isinstance(train_on, Stream) or train_on.app is not self:
            msg = f"model {name!r} ({location}): train_on must be a stream of app '{self.name}', got {train_on!r}"
            raise InvalidDataflow(msg)
        spec = check_model(
            name=name,
            algorithm=algorithm,
            features=list(features) if not isinstance(features, str) else features,
            label=label,
            train_on=train_on.name,
            every=every,
            min_rows=min_rows,
            params=params,
            location=location,
            max_psi=max_psi,
            max_error=max_error,
            history=history,
            history_rows=history_rows,
        )
        existing = self._models.get(spec.name)
        if existing is not None:
            msg = f"model '{spec.name}' ({location}) is already declared at {existing.location}; rename one"
            raise InvalidDataflow(msg)
        self._models[spec.name] = spec
        return spec

    def source_streams(self) -> set[str]:
        """The sensor streams the app's sources read."""
        return {op.stream_name for op in self._ops.values() if op.kind is Kind.SOURCE}

    def _auto_name(self, kind: str) -> str:
        self._auto[kind] = self._auto.get(kind, 0) + 1
        return f"{kind}_{self._auto[kind]}"

    def _add(self, op: Operator) -> Stream:
        kind = "stream" if op.kind is Kind.SOURCE else "operator"
        check_stream_name(op.name, f"{op.kind.value} at {op.location}", kind)
        existing = self._ops.get(op.name)
        if existing is not None:
            msg = (
                f"operator name '{op.name}' ({op.location}) is already used by {existing.describe()}; "
                "operator names must be unique: rename the function or pass name=..."
            )
            raise InvalidDataflow(msg)
        self._ops[op.name] = op
        return Stream(self, op.name)

    def _replace(self, op: Operator) -> None:
        self._ops[op.name] = op

    def source(
        self,
        stream: str,
        *,
        time_field: str | None = None,
        schema: Any = None,
        record_bytes: float | None = None,
    ) -> Stream:
        """A named sensor stream; each site binds it to an MQTT topic filter in sites.yaml.

        ``time_field`` names the record field holding the event time (seconds
        since the epoch); without it the arrival time is used.
        """
        location = _caller_location()
        check_stream_name(stream, f"source at {location}")
        ddl = self._schema(schema, f"source '{stream}' ({location})")
        return self._add(
            Operator(
                name=stream,
                kind=Kind.SOURCE,
                location=location,
                cost=0.0,
                schema=ddl,
                stream=stream,
                time_field=time_field,
                record_bytes=record_bytes,
            )
        )

    @staticmethod
    def _schema(schema: Any, where: str) -> str | None:
        if schema is None:
            return None
        try:
            return to_ddl(schema)
        except TypeError as exc:
            msg = f"{where}: {exc}"
            raise InvalidDataflow(msg) from None

    def union(
        self, *streams: Stream, name: str | None = None, scope: str | None = None, cost: float | None = None
    ) -> Stream:
        """Merge several streams into one (``cost``: a placement hint, CPU core-seconds per record)."""
        location = _caller_location()
        cost = _estimates(f"union at {location}", cost, None)[0]
        if len(streams) < 2:
            msg = f"union at {location}: needs at least two streams, got {len(streams)}"
            raise InvalidDataflow(msg)
        for s in streams:
            if s.app is not self:
                msg = f"union at {location}: stream '{s.name}' belongs to another app"
                raise InvalidDataflow(msg)
        return self._add(
            Operator(
                name=name or self._auto_name("union"),
                kind=Kind.UNION,
                inputs=tuple(s.name for s in streams),
                scope=_parse_scope(scope, f"union at {location}"),
                location=location,
                cost=_first(cost, 1e-6),
            )
        )

    def graph(self) -> OperatorGraph:
        """Return the validated DAG of the app's operators.

        Raises:
            InvalidDataflow: the dataflow is not valid (a cycle, a @local operator after a hub-only one, ...).
        """
        return build_graph(self.name, self.operators)

    def __repr__(self) -> str:
        """Show the app's name and operator count."""
        return f"App({self.name!r}, {len(self._ops)} operators)"


@dataclasses.dataclass(frozen=True)
class Stream:
    """The output of one operator; methods add downstream operators."""

    app: App
    name: str

    def _record_op(
        self,
        kind: Kind,
        func: Callable[..., Any],
        name: str | None,
        default_selectivity: float,
        estimates: tuple[float | None, float | None],
    ) -> Stream:
        if not callable(func):
            msg = f"{kind.value} at {_caller_location()}: expected a function, got {func!r}"
            raise InvalidDataflow(msg)
        hints = hints_of(func)
        fname = getattr(func, "__name__", "")
        chosen = name or hints.name or (fname if fname.isidentifier() else None)
        location = _func_location(func)
        cost, selectivity = _estimates(f"{kind.value} '{chosen or kind.value}' ({location})", *estimates)
        op = Operator(
            name=chosen or self.app._auto_name(kind.value),
            kind=kind,
            inputs=(self.name,),
            scope=hints.scope,
            location=location,
            func=func,
            cost=_first(cost, hints.cost, 2e-5),
            selectivity=_first(selectivity, hints.selectivity, default_selectivity),
        )
        return self.app._add(op)

    def map(
        self,
        func: Callable[[Any], Any],
        *,
        name: str | None = None,
        cost: float | None = None,
        selectivity: float | None = None,
    ) -> Stream:
        """Apply ``func`` to every record.

        ``cost`` (CPU core-seconds per record) and ``selectivity`` (records out per
        record in) are placement hints; they win over the function's decorator.
        """
        return self._record_op(Kind.MAP, func, name, 1.0, (cost, selectivity))

    def filter(
        self,
        func: Callable[[Any], bool],
        *,
        name: str | None = None,
        cost: float | None = None,
        selectivity: float | None = None,
    ) -> Stream:
        """Keep the records for which ``func`` is true (placement hints as in :meth:`map`)."""
        return self._record_op(Kind.FILTER, func, name, 0.5, (cost, selectivity))

    def flat_map(
        self,
        func: Callable[[Any], Iterable[Any]],
        *,
        name: str | None = None,
        cost: float | None = None,
        selectivity: float | None = None,
    ) -> Stream:
        """Replace each record by the records ``func`` returns (placement hints as in :meth:`map`)."""
        return self._record_op(Kind.FLAT_MAP, func, name, 1.0, (cost, selectivity))

    def predict(
        self,
        model: ModelSpec,
        *,
        output: str,
        name: str | None = None,
        scope: str | None = None,
        cost: float | None = None,
    ) -> Stream:
        """Add field ``output`` to every record: what ``model`` predicts from its features.

        Classifiers give the probability of label 1, regressions their value,
        k-means the index of the nearest cluster. The operator runs wherever the
        placement puts it, with the newest version trained by the hub; ``cost``
        (CPU core-seconds per record) overrides the model's estimate.
        """
        location = _caller_location()
        op_name = name or self.app._auto_name("predict")
        where = f"predict '{op_name}' ({location})"
        if not isinstance(model, ModelSpec) or self.app._models.get(model.name) is not model:
            msg = f"{where}: expected a model declared with app.model(...) of app '{self.app.name}', got {model!r}"
            raise InvalidDataflow(msg)
        if not isinstance(output, str) or not FIELD_PATTERN.match(output):
            msg = (
                f"{where}: output must be a record field name for the prediction, e.g. output='p_fail', got {output!r}"
            )
            raise InvalidDataflow(msg)
        if output in model.features:
            msg = f"{where}: output {output!r} would overwrite feature {output!r} of {model.describe()}; pick another name"
            raise InvalidDataflow(msg)
        cost = _estimates(where, cost, None)[0]
        op = Operator(
            name=op_name,
            kind=Kind.PREDICT,
            inputs=(self.name,),
            scope=_parse_scope(scope, where),
            location=location,
            func=Predictor(self.app.name, model, output),
            cost=_first(cost, model.cost_per_record),
            selectivity=1.0,
            model=model,
            output=output,
        )
        return self.app._add(op)

    def transform(self, func: Callable[[Any], Any], *, name: str | None = None) -> Stream:
        """Apply a PySpark ``DataFrame -> DataFrame`` function; runs at the hub only."""
        hints = hints_of(func)
        location = _func_location(func)
        fname = getattr(func, "__name__", "")
        chosen = name or hints.name or (fname if fname.isidentifier() else None)
        if hints.scope is Scope.LOCAL:
            msg = (
                f"transform '{chosen}' ({location}) is marked @local, but transforms are "
                "PySpark DataFrame functions that run at the hub only; remove @local "
                "(or mark it @global_), or use map/filter/flat_map for edge processing"
            )
            raise InvalidDataflow(msg)
        op = Operator(
            name=chosen or self.app._auto_name("transform"),
            kind=Kind.TRANSFORM,
            inputs=(self.name,),
            scope=Scope.GLOBAL,
            location=location,
            func=func,
            cost=hints.cost if hints.cost is not None else 5e-5,
            selectivity=hints.selectivity if hints.selectivity is not None else 1.0,
        )
        return self.app._add(op)

    def window(
        self,
        *,
        key: str | None,
        aggs: Mapping[str, Agg],
        size: str | float | None = None,
        slide: str | float | None = None,
        gap: str | float | None = None,
        allowed_lateness: str | float = 0.0,
        name: str | None = None,
        scope: str | None = None,
        keys: int = 100,
        cost: float | None = None,
        selectivity: float | None = None,
    ) -> Stream:
        """Aggregate keyed records over event-time windows.

        Give ``size`` alone for tumbling windows, ``size`` and ``slide`` for
        sliding windows, ``gap`` alone for session windows. ``aggs`` maps output
        field names to aggregations from :mod:`spanedge.aggregations`. ``keys``
        estimates the distinct keys per window, for placement; so do ``cost``
        (CPU core-seconds per record) and ``selectivity`` (at most this many
        results per input record; by default only ``keys`` per window period).
        """
        location = _caller_location()
        op_name = name or self.app._auto_name("window")
        where = f"window '{op_name}' ({location})"
        if not key or not isinstance(key, str):
            msg = f"{where}: windows are keyed; got key={key!r}; pass key='<record field>', e.g. key='device'"
            raise InvalidDataflow(msg)
        if not aggs:
            msg = f"{where}: needs at least one aggregation, e.g. aggs={{'n': agg.count()}}"
            raise InvalidDataflow(msg)
        for out, a in aggs.items():
            if not isinstance(a, Agg):
                msg = f"{where}: aggregation '{out}' must come from spanedge.agg (count, sum, mean, min, max, custom), got {a!r}"
                raise InvalidDataflow(msg)

        def seconds(label: str, value: str | float | None) -> float | None:
            if value is None:
                return None
            try:
                return parse_duration(value)
            except ValueError as exc:
                msg = f"{where}: bad {label}: {exc}"
                raise InvalidDataflow(msg) from None

        size_s, slide_s, gap_s = seconds("size", size), seconds("slide", slide), seconds("gap", gap)
        lateness = 0.0 if allowed_lateness in (0, 0.0, "0", "0s") else seconds("allowed_lateness", allowed_lateness)
        if gap_s is not None:
            if size_s is not None or slide_s is not None:
                msg = f"{where}: give gap= alone for session windows, not with size= or slide="
                raise InvalidDataflow(msg)
            kind = WindowKind.SESSION
        elif size_s is None:
            msg = f"{where}: give size='10s' (tumbling), size= and slide= (sliding) or gap= (session)"
            raise InvalidDataflow(msg)
        elif slide_s is None or slide_s == size_s:
            kind = WindowKind.TUMBLING
        else:
            if slide_s > size_s:
                msg = f"{where}: slide ({slide_s}s) must not exceed size ({size_s}s)"
                raise InvalidDataflow(msg)
            kind = WindowKind.SLIDING
        spec = WindowSpec(
            key,
            kind,
            size_s,
            slide_s if kind is WindowKind.SLIDING else None,
            gap_s,
            tuple(aggs.items()),
            lateness or 0.0,
            keys,
        )
        cost, selectivity = _estimates(where, cost, selectivity)
        op = Operator(
            name=op_name,
            kind=Kind.WINDOW,
            inputs=(self.name,),
            scope=_parse_scope(scope, where),
            location=location,
            cost=_first(cost, 5e-6),
            selectivity=_first(selectivity, 1.0),
            window=spec,
            record_bytes=float(40 + 24 * len(aggs)),
        )
        return self.app._add(op)

    def union(
        self, *others: Stream, name: str | None = None, scope: str | None = None, cost: float | None = None
    ) -> Stream:
        """Merge this stream with ``others`` (``cost``: a placement hint, CPU core-seconds per record)."""
        return self.app.union(self, *others, name=name, scope=scope, cost=cost)

    def schema(self, schema: Any) -> Stream:
        """Declare the fields of this stream's records (a dataclass or Spark DDL)."""
        op = self.app._ops[self.name]
        ddl = App._schema(schema, f"schema of {op.describe()}")
        self.app._replace(dataclasses.replace(op, schema=ddl))
        return self

    def sink(self, spec: SinkSpec, *, name: str | None = None, scope: str | None = None) -> Stream:
        """Send this stream's records to ``spec`` (see :mod:`spanedge.sinks`)."""
        location = _caller_location()
        if not isinstance(spec, SinkSpec):
            msg = f"sink at {location}: expected spanedge.sinks.mqtt/file/console/memory/parquet/postgres(...), got {spec!r}"
            raise InvalidDataflow(msg)
        problem = topics.topic_problem(spec.target) if spec.kind == "mqtt" else None
        if problem is not None:
            msg = f"sink at {location}: MQTT topic {spec.target!r} is invalid: it {problem}"
            raise InvalidDataflow(msg)
        placed = _parse_scope(scope, f"sink at {location}")
        if spec.hub_only:
            if placed is Scope.LOCAL:
                msg = f"sink at {location}: a {spec.kind} sink is written by the hub; drop scope='local'"
                raise InvalidDataflow(msg)
            placed = Scope.GLOBAL
        if spec.kind == "connector":  # sinks.modbus/opcua/connector(...): the agent writes to the equipment
            if placed is Scope.GLOBAL:
                msg = f"sink at {location}: a connector sink is written by a site's agent; drop scope='global'"
                raise InvalidDataflow(msg)
            placed = Scope.LOCAL
        return self.app._add(
            Operator(
                name=name or self.app._auto_name(f"sink_{spec.kind}"),
                kind=Kind.SINK,
                inputs=(self.name,),
                scope=placed,
                location=location,
                cost=5e-6,
                selectivity=1.0,
                sink=spec,
            )
        )
