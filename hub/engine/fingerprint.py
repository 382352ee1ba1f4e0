"""Fingerprints of hub queries: a hash of everything a sink's query computes.

A query's checkpoint directory is named ``<sink replica>-<fingerprint>``,
so a redeploy restarts exactly the queries whose fingerprint changed and
the others keep their checkpoints and window state. The text hashed here
must not change: a different text would orphan every existing checkpoint.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from typing import Any

from hub.engine.replicas import Replicas
from spanedge.operators import Operator


def func_digest(func: Callable[..., Any] | None) -> str:
    """The source of a user's function, else its bytecode and constants."""
    if func is None:
        return ""
    try:
        return str(inspect.getsource(func))
    except (OSError, TypeError):
        code = getattr(func, "__code__", None)
        if code is None:
            return repr(func)
        consts = [c for c in code.co_consts if not inspect.iscode(c)]
        return f"{code.co_code.hex()}{consts!r}{code.co_names!r}"


def window_digest(op: Operator) -> str:
    """The window specification of ``op`` (empty for other operators), custom aggregators included."""
    spec = op.window
    if spec is None:
        return ""
    aggs = [
        (out, ag.func, ag.field, None if ag.custom is None else [func_digest(f) for f in _aggregator_funcs(ag.custom)])
        for out, ag in spec.aggs
    ]
    return repr((spec.key, spec.kind.value, spec.size, spec.slide, spec.gap, spec.allowed_lateness, aggs))


def _aggregator_funcs(custom: Any) -> list[Callable[..., Any]]:
    return [custom.zero, custom.add, custom.merge, custom.result]


def _operator_part(replica: str, op: Operator) -> str:
    return "|".join(
        [
            replica,
            op.kind.value,
            ",".join(op.inputs),
            window_digest(op),
            repr(op.sink),
            op.schema or "",
            func_digest(op.func),
        ]
    )


def fingerprint(replicas: Replicas, sink: str, closing: bool = False) -> str:
    """A 12-hex-digit hash of the hub replicas upstream of ``sink`` and the edge streams they read.

    ``closing``: the sink closes its window (:mod:`hub.engine.window_close`), which
    keeps other window state than append mode, so the query is another one.
    """
    parts: list[str] = []
    seen: set[str] = set()

    def visit(r: str) -> None:
        if r in seen:
            return
        seen.add(r)
        a = replicas.where[r]
        op = replicas.op(a)
        if a.site != replicas.hub:
            parts.append(f"crossing {op.name} {a.group}")
            return
        parts.append(_operator_part(r, op))
        for up in replicas.upstream(r):
            visit(up.replica)

    visit(sink)
    if closing:
        parts.append("closed by the sink")
    return hashlib.sha256("\n".join(sorted(parts)).encode()).hexdigest()[:12]
