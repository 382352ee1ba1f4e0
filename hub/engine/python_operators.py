"""The hub's Python operators: the functions Spark runs over Arrow batches (``mapInArrow``).

A map, filter or flat_map placed at the hub runs :func:`record_level`,
which calls :func:`spanedge.runtime.operators.apply` on every record, so
the operator means the same at the hub as at an edge site; a window with
custom aggregators finishes its results in :func:`window_finisher`.

A record a user's function raises on becomes a dead letter: the operator,
the reason (:func:`spanedge.runtime.operators.failure`, as on the edge
agents' dead-letter topic), where the record came from and a bounded
excerpt of its value (:func:`spanedge.runtime.outputs.excerpt`). Dead
letters leave the Python worker as data: each task writes those of its
partition to one JSON-lines file in the staging directory the query's sink
names for the micro-batch (:data:`STAGING_PROPERTY`, a Spark local
property set by :class:`hub.engine.sinks.BatchSink`), named by the operator's
compilation and the partition, so a retried task overwrites its own file.
The sink collects them once the batch has run (see :mod:`hub.engine.sinks`).
The record also goes to the operator's failure policy
(:data:`FailurePolicy`); the default, :class:`LogFailures`, writes the
first ten failures of a partition to the executor's stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from hub.engine.rows import COLUMNS
from spanedge.operators import Operator
from spanedge.runtime.operators import apply, failure
from spanedge.runtime.outputs import excerpt

if TYPE_CHECKING:
    import pyarrow as pa

ArrowFunction = Callable[[Iterator["pa.RecordBatch"]], Iterator["pa.RecordBatch"]]
"""What ``DataFrame.mapInArrow`` runs: Arrow batches in, Arrow batches out."""

_OWN_PACKAGES = ("spanedge", "hub", "placement", "edge_agent", "simulate", "builtins")

#: The Spark local property naming the directory where a micro-batch's tasks stage their dead letters.
STAGING_PROPERTY = "spanedge.dead_letters.staging"

#: The site dead letters of hub operators are filed under (``spanedge/v1/<app>/dlq/hub``).
HUB_SITE = "hub"


@dataclass(frozen=True)
class FailedRecord:
    """A record a hub operator's function raised on, as it came in, with the error."""

    site: str | None
    seq: int | None
    event_time: float | None
    key: str | None
    value: str | None
    """The record's value as JSON text."""
    error: Exception

    def dead_letter(self, op: Operator) -> dict[str, Any]:
        """The dead-letter message of this record failing in ``op``: reason, origin and an excerpt of the value."""
        cut = excerpt(self.value if self.value is not None else "null")
        return {
            "reason": failure(op, self.error),
            "operator": op.name,
            "error": type(self.error).__name__,
            "payload": cut["excerpt"],
            "size": cut["size"],
            "sha256": cut["sha256"],
            "truncated": cut["truncated"],
            "site": HUB_SITE,
            "source_site": self.site,
            "seq": self.seq,
            "event_time": self.event_time,
            "key": self.key,
            "ts": time.time(),
        }


class OnFailure(Protocol):
    """Takes the records an operator failed on within one partition."""

    def __call__(self, record: FailedRecord) -> None:
        """Handle one failed record."""
        ...


FailurePolicy = Callable[[Operator], OnFailure]
"""Makes the :class:`OnFailure` of an operator for one partition; it must pickle (Spark ships it)."""


class LogFailures:
    """Write the first ``limit`` failures of a partition to stderr (the executor's log).

    The records themselves go to the dead letters whatever the policy.
    """

    def __init__(self, op: Operator, limit: int = 10) -> None:
        """Report failures of ``op``."""
        self.op = op
        self.limit = limit
        self.failures = 0

    def __call__(self, record: FailedRecord) -> None:
        """Count ``record`` and write it while under the limit."""
        self.failures += 1
        if self.failures <= self.limit:
            sys.stderr.write(f"operator {self.op.describe()} failed on a record of {record.site}: {record.error!r}\n")


def _encode(value: Any) -> str:
    """JSON text of an operator's output (``str()`` of what JSON cannot hold)."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value, default=str)


class _Staged:
    """The dead letters of one task, written to the micro-batch's staging directory when the partition ends."""

    def __init__(self, op: Operator, compiled: str) -> None:
        self.op = op
        self.compiled = compiled
        self.letters: list[bytes] = []

    def add(self, record: FailedRecord) -> None:
        self.letters.append(orjson.dumps(record.dead_letter(self.op)))

    def flush(self) -> None:
        """Write the letters (atomically) where the sink will look, if this runs in a query that has a sink."""
        if not self.letters:
            return
        folder, partition = _staging()
        if folder is None:  # not run by a query's sink (a test): only the failure policy saw them
            return
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / f"{self.compiled}-{partition:06d}.jsonl"
        tmp = folder / f".{final.name}.tmp"
        with tmp.open("wb") as fh:
            fh.write(b"".join(line + b"\n" for line in self.letters))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)


def _staging() -> tuple[Path | None, int]:
    """The staging directory of the running micro-batch (``None`` outside one) and this task's partition."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return None, 0
    folder = context.getLocalProperty(STAGING_PROPERTY)
    return (Path(folder) if folder else None), context.partitionId()


def record_level(op: Operator, on_failure: FailurePolicy = LogFailures) -> ArrowFunction:
    """Return the ``mapInArrow`` function running a map, filter or flat_map over JSON values.

    Each output record keeps the site, seq, event time and key of its input
    and is on the stream ``op.name``. A record the function raises on goes to
    ``on_failure`` and to the dead letters (see the module's description).
    """
    stream = op.name
    compiled = uuid.uuid4().hex  # one name per compilation: a task's file is its own

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        from hub.engine.source import ROW_SCHEMA as schema

        failed = on_failure(op)
        staged = _Staged(op, compiled)
        for batch in batches:
            columns = [batch.column(c).to_pylist() for c in ("site", "seq", "event_time", "key", "value")]
            out: dict[str, list[Any]] = {c: [] for c in COLUMNS}
            for site, seq, t, key, raw in zip(*columns, strict=True):
                try:
                    results = apply(op, orjson.loads(raw) if raw is not None else None, t)
                except Exception as exc:
                    record = FailedRecord(site, seq, t, key, raw, exc)
                    staged.add(record)
                    failed(record)
                    continue
                for res in results:
                    out["site"].append(site)
                    out["stream"].append(stream)
                    out["seq"].append(seq)
                    out["event_time"].append(t)
                    out["key"].append(key)
                    out["value"].append(_encode(res))
            yield pa.RecordBatch.from_pydict(out, schema=schema)
        staged.flush()

    return run


def window_finisher(key_field: str, outs: list[str], customs: dict[str, Any]) -> ArrowFunction:
    """Return a ``mapInArrow`` function that applies custom aggregators and encodes window results.

    Args:
        key_field: the window's key field, the name of the key in the result.
        outs: the result fields, in order.
        customs: the custom aggregations by result field; their columns hold
            the collected JSON values of the aggregated field.
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        from hub.engine.source import ROW_SCHEMA as schema

        for batch in batches:
            rows = batch.to_pylist()
            out: dict[str, list[Any]] = {c: [] for c in COLUMNS}
            for row in rows:
                value: dict[str, Any] = {
                    key_field: row["key"],
                    "window_start": row["window_start"],
                    "window_end": row["window_end"],
                }
                for name in outs:
                    ag = customs.get(name)
                    if ag is None:
                        value[name] = row[name]
                        continue
                    agg = ag.custom
                    acc = agg.zero()
                    for item in row[name] or []:
                        acc = agg.add(acc, json.loads(item))
                    value[name] = agg.result(acc)
                for c in ("site", "stream", "seq", "event_time", "key"):
                    out[c].append(row[c])
                out["value"].append(json.dumps(value, default=str))
            yield pa.RecordBatch.from_pydict(out, schema=schema)

    return run


def pickle_user_code(func: Callable[..., Any] | None) -> None:
    """Let Spark ship the user's function by value (the app module is not importable by workers)."""
    if func is None:
        return
    module_name = getattr(func, "__module__", None) or ""
    if module_name.split(".")[0] in _OWN_PACKAGES:
        return
    module = sys.modules.get(module_name)
    if module is None:
        return
    from pyspark import cloudpickle

    with contextlib.suppress(ValueError):
        cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
