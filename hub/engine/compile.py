"""Compiling the hub's part of a plan into Spark DataFrames, one per sink replica at the hub.

A sink's DataFrame reads the app's ingest log once
(:func:`hub.engine.source.read_log`) and applies the hub-placed operators upstream of the
sink, in dataflow order. Records that crossed from an edge site are
selected from the log by ``stream`` (the producing operator) and ``site``
(the source-group site of a replicated producer). Record-level operators
run as Arrow batches (:mod:`hub.engine.python_operators`), windows as streaming
aggregations (:mod:`hub.engine.windows`), transforms as the user's function
over parsed records (:mod:`hub.engine.transforms`). Every stream between
operators has the columns of :mod:`hub.engine.rows`.

Each hub operator's input and output are counted inside the query that
computes them, with ``DataFrame.observe`` (a row count Spark reports per
micro-batch in the query's progress, under ``observedMetrics``). An input
that is another operator's counted output, and the output of a union or a
sink (as many records as its input), reuse that count instead of adding a
step to the plan. :meth:`Compiler.counted` says what each count of a
query's plan stands for; :mod:`hub.engine.operator_counts` totals them and
:func:`hub.engine.queries.operator_rates` turns them into per-operator figures.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hub.engine.fingerprint import fingerprint
from hub.engine.python_operators import FailurePolicy, LogFailures, pickle_user_code, record_level
from hub.engine.replicas import Replicas
from hub.engine.rows import COLUMNS, SCHEMA_DDL
from hub.engine.source import read_log
from hub.engine.transforms import transform_frame
from hub.engine.window_close import OBSERVATION as CLOSED_COUNT
from hub.engine.windows import closes_early, parse_fields, parses_once, window_frame
from spanedge.dag import known_fields
from spanedge.errors import InvalidDataflow, InvalidPlan
from spanedge.models.predict import Predictor
from spanedge.operators import Kind, Operator
from spanedge.plan import Assignment, split_replica

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


@dataclass(frozen=True)
class Counted:
    """What one observed count of a query stands for: the records into or out of some replicas of an operator."""

    operator: str
    direction: str
    """``in`` or ``out``."""
    replicas: tuple[str, ...]
    """The replicas computed together (sorted): one, or the per-site replicas merged into one computation."""


class _Counts:
    """The observed counts of one query's plan, by observation name (unique within the query)."""

    def __init__(self) -> None:
        self.targets: dict[str, list[Counted]] = {}
        self._names: dict[int, tuple[DataFrame, str]] = {}

    def _name_of(self, df: DataFrame) -> str | None:
        known = self._names.get(id(df))
        return known[1] if known is not None and known[0] is df else None

    def observe(self, df: DataFrame, target: Counted, closing: bool = False) -> DataFrame:
        """``df`` with its rows counted for ``target``; a frame counted already keeps its one count.

        The output of a window its sink closes (``closing``) holds every changed
        aggregate: the sink counts the windows it writes instead (:data:`CLOSED_COUNT`).
        """
        from pyspark.sql import functions as F

        name = self._name_of(df)
        if name is not None:
            self.targets[name].append(target)
            return df
        name = f"{target.operator}.{target.direction}#{len(self.targets)}"
        if target.direction == "out" and closing:  # counted by the sink's closer, not by Spark
            name = CLOSED_COUNT
            self.targets[name] = [target]
            self._names[id(df)] = (df, name)
            return df
        observed = df.observe(name, F.count(F.lit(1)).alias("n"))
        self.targets[name] = [target]
        self._names[id(observed)] = (observed, name)
        return observed

    def same(self, df: DataFrame, counted: DataFrame, target: Counted) -> None:
        """Count ``df``, which has exactly the rows of the counted frame ``counted``, for ``target`` too."""
        name = self._name_of(counted)
        assert name is not None
        self.targets[name].append(target)
        self._names[id(df)] = (df, name)


class Compiler:
    """Builds the DataFrames of one plan of an app, replica by replica."""

    def __init__(
        self,
        spark: SparkSession,
        replicas: Replicas,
        on_failure: FailurePolicy = LogFailures,
        close_windows: bool = False,
    ) -> None:
        """Compile ``replicas``; record-level operators hand the records they fail on to ``on_failure``.

        With ``close_windows``, a sink that reads a window directly closes it
        at the watermark (:meth:`closing_window`, :mod:`hub.engine.window_close`).
        """
        self.spark = spark
        self.close_windows = close_windows
        self.replicas = replicas
        self.on_failure = on_failure
        self._counts = _Counts()
        self._counted: dict[str, dict[str, list[Counted]]] = {}
        self._closing: str | None = None
        #: per sink replica, the window-close mode its query keeps where it differs from ``close_windows``
        self.modes: dict[str, bool] = {}
        #: where the hub keeps the model versions it sent out (``<state_dir>/models``), for predict operators
        self.models_dir: Path | None = None

    def closes(self, sink: str) -> bool:
        """Whether the sink of ``sink`` closes its window at the watermark, if it reads one it can close."""
        return self.modes.get(sink, self.close_windows)

    def counted(self, sink: str) -> dict[str, list[Counted]]:
        """What the observed counts of the query of sink replica ``sink`` stand for, by observation name.

        Known once :meth:`frame` built that query; an observation can stand for
        several things (an operator's output and the next one's input).
        """
        return self._counted.get(sink, {})

    def fingerprint(self, sink: str) -> str:
        """A hash of everything the query of sink replica ``sink`` computes."""
        return fingerprint(self.replicas, sink, closing=self.closing_window(sink) is not None)

    def frame(self, sink: str, log_dir: Path, reader: str) -> DataFrame:
        """The records reaching sink replica ``sink``, read from the log in ``log_dir`` as ``reader``.

        Raises:
            InvalidDataflow: a hub window of the query reads another hub window's results (:meth:`check_windows`).
        """
        self.check_windows(sink)
        fields = self.value_fields(sink)
        source = read_log(self.spark, log_dir, self.replicas.app.name, reader, fields).select(*COLUMNS)
        memo: dict[str, DataFrame] = {}
        self._counts = _Counts()  # observation names are unique per query
        closing = self.closing_window(sink)
        self._closing = closing.name if closing is not None else None
        df = self._frame(sink, source, memo)
        self._counted[sink] = self._counts.targets
        return df

    def check_windows(self, sink: str) -> None:
        """Refuse a query in which a hub window reads the results of another hub window.

        Each window at the hub keeps its own watermark on its input, and Spark
        takes one per lineage: it refuses the query ("Redefining watermark is
        disallowed") when the later window also reads records from the log,
        and holds the watermark at zero, firing nothing, when it reads only
        the earlier one's results.

        Raises:
            InvalidDataflow: naming both windows and how to place them.
        """
        for a in self._at_hub_from([sink]):
            op = self.replicas.op(a)
            if op.kind is not Kind.WINDOW:
                continue
            ups = [u.replica for u in self.replicas.upstream(a.replica)]
            earlier = next((u for u in self._at_hub_from(ups) if self.replicas.op(u).kind is Kind.WINDOW), None)
            if earlier is not None:
                first = self.replicas.op(earlier)
                msg = (
                    f"window {op.describe()} would run at the hub on the results of window {first.describe()}, "
                    f"which the plan also puts at the hub ({earlier.replica}); the hub cannot chain two windows in "
                    f"one Spark query: run {first.describe()} at the edge sites (scope='local') so that its results "
                    "reach the hub as records, or compute both in one window"
                )
                raise InvalidDataflow(msg)

    def closing_window(self, sink: str) -> Operator | None:
        """The window the sink of ``sink`` closes itself (:mod:`hub.engine.window_close`), if any.

        Only where the sink :meth:`closes` windows: the window the sink reads directly, when every replica of it the
        sink reads runs at the hub (alone, or merged per site) and its sink can
        close it (:func:`hub.engine.windows.closes_early`). Its query runs in update mode.
        """
        ups = self.replicas.upstream(sink)
        if not self.closes(sink) or not ups or len({u.operator for u in ups}) != 1:
            return None
        op = self.replicas.op(ups[0])
        if op.window is None or not closes_early(op.window):
            return None
        if any(u.site != self.replicas.hub for u in ups):
            return None
        if len(ups) > 1 and any(u.group is None for u in ups):
            return None
        return op if not self._stateful_upstream([u.replica for u in ups]) else None

    def keeps_watermark(self, sink: str) -> bool:
        """Whether the query of sink replica ``sink`` runs a window at the hub (and so keeps a watermark)."""
        return any(self.replicas.op(a).kind == Kind.WINDOW for a in self._at_hub_from([sink]))

    def windows_everything(self, sink: str) -> bool:
        """Whether every record the query of sink replica ``sink`` reads from the log reaches it through a hub window.

        Only then does the query's watermark bound what it can still write: a
        record on a path without a window passes whatever its event time.
        """
        todo = [sink]
        while todo:
            a = self.replicas.where[todo.pop()]
            if self._is_crossing([a]):
                return False  # read from the log and reached the sink without a window
            if self.replicas.op(a).kind != Kind.WINDOW:
                todo.extend(u.replica for u in self.replicas.upstream(a.replica))
        return True

    def python_operators(self, sink: str) -> set[str]:
        """The record-level operators (map, filter, flat_map) the query of sink replica ``sink`` runs at the hub."""
        ops = (self.replicas.op(a) for a in self._at_hub_from([sink]))
        return {op.name for op in ops if op.record_level}

    def _stateful_upstream(self, replicas: list[str]) -> bool:
        """Whether a hub window or transform (which may keep state) is upstream of ``replicas`` in their query."""
        ups = [u.replica for r in replicas for u in self.replicas.upstream(r)]
        return any(self.replicas.op(a).kind in (Kind.WINDOW, Kind.TRANSFORM) for a in self._at_hub_from(ups))

    def _at_hub_from(self, replicas: list[str]) -> Iterator[Assignment]:
        """The hub replicas among ``replicas`` and upstream of them in their query, each once (not the log's streams)."""
        seen: set[str] = set()
        todo = list(replicas)
        while todo:
            replica = todo.pop()
            a = self.replicas.where[replica]
            if replica in seen or self._is_crossing([a]):
                continue
            seen.add(replica)
            yield a
            todo.extend(u.replica for u in self.replicas.upstream(replica))

    def value_fields(self, sink: str) -> dict[str, str] | None:
        """The fields to parse the log's values for with each line in the query of ``sink``; ``None``: read them as text.

        Parsing with the line is possible when every hub operator of the query
        that reads records from the log is a window that reads nothing else and
        whose aggregations Spark computes (:func:`hub.engine.windows.parses_once`),
        and their windows agree on each field's type.
        """
        wanted: dict[str, str] = {}
        for a in self._at_hub_from([sink]):
            op = self.replicas.op(a)
            ups = self.replicas.upstream(a.replica)
            crossing = [u for u in ups if self._is_crossing([u])]
            if crossing:
                spec = op.window
                if spec is None or len(crossing) < len(ups) or not parses_once(spec):
                    return None
                for name, kind in parse_fields(spec, self._fields(op)).items():
                    if wanted.setdefault(name, kind) != kind:
                        return None
        return wanted or None

    def _frame(self, replica: str, source: DataFrame, memo: dict[str, DataFrame]) -> DataFrame:
        """The records ``replica`` emits."""
        if replica in memo:
            return memo[replica]
        a = self.replicas.where[replica]
        op = self.replicas.op(a)
        if a.site != self.replicas.hub or op.kind is Kind.SOURCE:
            df = self._crossing(op, [a], source)
        else:
            df = self._counted_apply(op, [a], self._inputs([a], source, memo), lambda df: self._apply(op, a, df))
        memo[replica] = df
        return df

    def _crossing(self, op: Operator, reps: list[Assignment], source: DataFrame) -> DataFrame:
        """Records of ``reps`` (replicas of ``op`` at edge sites) selected from the log."""
        return source.where(self._crossing_condition(op, reps))

    def _crossing_condition(self, op: Operator, reps: list[Assignment]) -> Column:
        from pyspark.sql import functions as F

        cond = F.col("stream") == op.stream_name
        groups = [r.group if r.group is not None else split_replica(r.replica)[1] for r in reps]
        if None not in groups:
            cond = cond & F.col("site").isin(*groups)
        return cond

    def _is_crossing(self, reps: list[Assignment]) -> bool:
        return all(r.site != self.replicas.hub or self.replicas.op(r).kind is Kind.SOURCE for r in reps)

    def _inputs(self, reps: list[Assignment], source: DataFrame, memo: dict[str, DataFrame]) -> DataFrame:
        """The union of the inputs of ``reps``, with the replicas of each upstream operator merged."""
        by_operator: dict[str, list[Assignment]] = {}
        for r in reps:
            for up in self.replicas.upstream(r.replica):
                ups = by_operator.setdefault(up.operator, [])
                if up not in ups:
                    ups.append(up)
        if not by_operator:
            msg = f"plan of app '{self.replicas.app.name}': hub replica '{reps[0].replica}' has no inputs"
            raise InvalidPlan(msg)
        crossing = [ups for ups in by_operator.values() if self._is_crossing(ups)]
        frames = [self._merged(ups, source, memo) for ups in by_operator.values() if ups not in crossing]
        if crossing:  # one filter for every stream read from the log: one source, not a self-union
            conds = [self._crossing_condition(self.replicas.op(ups[0]), ups) for ups in crossing]
            cond = conds[0]
            for more in conds[1:]:
                cond = cond | more
            frames.insert(0, source.where(cond))
        merged = frames[0]
        for other in frames[1:]:
            merged = merged.unionByName(other)
        return merged

    def _merged(self, reps: list[Assignment], source: DataFrame, memo: dict[str, DataFrame]) -> DataFrame:
        """The records of several replicas of one operator, computed once where that is equivalent.

        Per-site replicas of a record-level operator or a window at the hub
        become one computation over all their sites (windows also keyed by
        site), so a query reads the log once instead of once per site (each
        branch of a self-union would get its own source).
        """
        if len(reps) == 1:
            return self._frame(reps[0].replica, source, memo)
        memo_key = "+".join(sorted(r.replica for r in reps))
        if memo_key in memo:
            return memo[memo_key]
        op = self.replicas.op(reps[0])
        at_hub = [r.site == self.replicas.hub and op.kind is not Kind.SOURCE for r in reps]
        per_site = all(r.group is not None for r in reps)
        if not any(at_hub):
            df = self._crossing(op, reps, source)
        elif all(at_hub) and per_site and op.record_level:
            df = self._counted_apply(
                op, reps, self._inputs(reps, source, memo), lambda df: self._apply(op, reps[0], df)
            )
        elif all(at_hub) and per_site and op.kind is Kind.WINDOW:
            site = reps[0].group or self.replicas.hub
            df = self._counted_apply(
                op,
                reps,
                self._inputs(reps, source, memo),
                lambda df: window_frame(
                    op, df, self._fields(op), site, per_site=True, closing=op.name == self._closing
                ),
            )
        else:
            frames = [self._frame(r.replica, source, memo) for r in reps]
            df = frames[0]
            for other in frames[1:]:
                df = df.unionByName(other)
        memo[memo_key] = df
        return df

    def _counted_apply(
        self, op: Operator, reps: list[Assignment], inputs: DataFrame, compute: Callable[[DataFrame], DataFrame]
    ) -> DataFrame:
        """``compute`` over ``inputs`` (the records of hub replicas ``reps`` of ``op``), its input and output counted."""
        replicas = tuple(sorted(r.replica for r in reps))
        inputs = self._counts.observe(inputs, Counted(op.name, "in", replicas))
        df = compute(inputs)
        out = Counted(op.name, "out", replicas)
        if df is inputs or op.kind is Kind.UNION:  # a sink, a union: as many records out as in
            self._counts.same(df, inputs, out)
            return df
        return self._counts.observe(df, out, closing=op.name == self._closing)

    def _apply(self, op: Operator, a: Assignment, df: DataFrame) -> DataFrame:
        """The records hub replica ``a`` of ``op`` emits from its inputs ``df``."""
        from pyspark.sql import functions as F

        if op.record_level:
            pickle_user_code(op.func)
            if op.kind is Kind.PREDICT and self.models_dir is not None and isinstance(op.func, Predictor):
                op = dataclasses.replace(op, func=op.func.at_hub(str(self.models_dir)))  # the versions sent out
            return df.mapInArrow(record_level(op, self.on_failure), SCHEMA_DDL)
        if op.kind is Kind.UNION:
            return df.withColumn("stream", F.lit(op.name))
        if op.kind is Kind.WINDOW:
            closing = op.name == self._closing
            return window_frame(op, df, self._fields(op), a.group or self.replicas.hub, closing=closing)
        if op.kind is Kind.TRANSFORM:
            upstream = known_fields(self.replicas.graph, op.inputs[0])
            return transform_frame(op, df, upstream, self.replicas.hub)
        return df

    def _fields(self, op: Operator) -> dict[str, str]:
        """The declared field types of ``op``'s first input (empty if undeclared)."""
        return known_fields(self.replicas.graph, op.inputs[0]) or {} if op.inputs else {}
