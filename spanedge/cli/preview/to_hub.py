"""The summary of a live preview that ``spanedge preview --site --for`` gives the hub to keep.

With a hub (``--hub-url`` and ``--token``), the command posts it to ``POST
/apps/{name}/previews`` once the report is printed: the candidate's file
name and SHA-256, the site, when the read began and ended, the records read,
per operator the records in and out and dead letters of the version running
now (``live``) and of the candidate, each version's CPU per record, the number
of sink results that differ, and whether the read stopped early and why. The
hub checks its shape (:mod:`hub.api.previews.models`); the bounds are those of
:mod:`hub.api.previews.limits`. A summary the hub does not take is a warning,
never a failed preview.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hub.api.previews.limits import MAX_LABEL_CHARS, MAX_OPERATORS, MAX_REASON_CHARS
from spanedge.cli.preview.report import differences
from spanedge.cli.preview.run import Count, Preview
from spanedge.errors import SpanEdgeError


@dataclass(frozen=True)
class LiveRead:
    """What a live preview read: the site, for how long it was to read, when it began and ended, why it stopped."""

    site: str
    duration_s: float
    started_at: float
    ended_at: float
    stopped: str | None


def _short(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters (ending in "...")."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _counts(c: Count | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"records_in": c.records_in, "records_out": c.records_out, "dead_letters": c.dead_letters}


def _run(p: Preview, label: str) -> dict[str, Any]:
    return {
        "version": _short(label, MAX_LABEL_CHARS),
        "dead_letters": len(p.dead_letters),
        "cpu_per_record_s": p.cpu_per_record,
    }


def summary(
    read: LiveRead, candidate_file: Path, source: str, candidate: Preview, live: tuple[Preview, str] | None
) -> dict[str, Any]:
    """The body of ``POST /apps/{name}/previews`` for a ``candidate`` run (and the ``live`` one with its label)."""
    from spanedge.loader import source_hash

    baseline = live[0] if live is not None else None
    before = {c.name: c for c in baseline.operators} if baseline is not None else {}
    after = {c.name: c for c in candidate.operators}
    operators = []
    for name in dict.fromkeys([*after, *before]):
        old, new = before.get(name), after.get(name)
        either = new if new is not None else old
        assert either is not None
        operators.append({"name": name, "part": either.part, "live": _counts(old), "candidate": _counts(new)})
    differing = None
    if baseline is not None:
        differing = sum(len(d.only_in_baseline) + len(d.only_in_candidate) for d in differences(baseline, candidate))
    return {
        "candidate_file": _short(candidate_file.name, MAX_LABEL_CHARS),
        "candidate_sha256": source_hash(source),
        "site": read.site,
        "duration_s": read.duration_s,
        "started_at": read.started_at,
        "ended_at": max(read.ended_at, read.started_at),
        "records": candidate.records,
        "live": _run(*live) if live is not None else None,
        "candidate": _run(candidate, candidate_file.name),
        "operators": operators[:MAX_OPERATORS],
        "operators_left_out": max(len(operators) - MAX_OPERATORS, 0),
        "differing_results": differing,
        "stopped_early": read.stopped is not None,
        "stop_reason": _short(read.stopped, MAX_REASON_CHARS) if read.stopped is not None else None,
    }


def post(hub_url: str, token: str, hub_ca: Path | None, app: str, body: dict[str, Any]) -> str:
    """Post ``body`` to the hub; what to tell the user (a note if the hub kept it, a warning if not)."""
    from hub.api.client import HubClient

    try:
        HubClient(hub_url, token, timeout=30, ca_file=hub_ca).post_preview(app, body)
    except SpanEdgeError as exc:
        return f"warning: the hub {hub_url} did not keep the preview's summary: {exc}"
    return f"note: the hub {hub_url} keeps the preview's summary (GET /apps/{app}/previews, and its dashboard)"
