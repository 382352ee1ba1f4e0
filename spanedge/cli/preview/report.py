"""What ``spanedge preview`` prints: report blocks for a person, one JSON document for a program.

A run shows its process CPU time per record, each operator's records in and out, dead letters and late records,
then the dead letters and late records themselves, then each sink's results, the
first ``limit`` of them (0: all), in a table with a column per field. Two runs
(``--compare``) show the operators side by side and, per sink, the results
one run has and the other has not, as multisets of ``(site, value)``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from spanedge.cli.preview.run import Count, Letter, Preview, SinkResults
from spanedge.numbers import is_number
from spanedge.report import Block, Table

#: The most characters of a cell in a text table (of a dead letter's reason: :data:`REASON_CHARS`); longer ones end in "...".
CELL_CHARS = 60
REASON_CHARS = 200


@dataclass(frozen=True)
class Shown:
    """A run as the report names it: its preview, its label (the app file) and what it read."""

    preview: Preview
    label: str
    source: str
    """The input file, as given."""


@dataclass(frozen=True)
class Difference:
    """The results of one sink that one run has and the other has not, as ``(site, value)`` pairs."""

    sink: str
    part: str
    only_in_baseline: list[tuple[str, Any]]
    only_in_candidate: list[tuple[str, Any]]


def _first(items: Sequence[Any], limit: int) -> Sequence[Any]:
    return items if limit <= 0 else items[:limit]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _cell(value: Any, limit: int = CELL_CHARS) -> str:
    """A value as a table cell: text as it is, numbers short, anything else as compact JSON."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, float) and is_number(value):
        text = repr(round(value, 6))
    else:
        text = orjson.dumps(value, default=str).decode()
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _number(n: int | None) -> str:
    return "-" if n is None else str(n)


def _columns(values: Iterable[Any]) -> list[Any]:
    """The fields of dict results in the order they first appear; ``value`` for any other result."""
    names: dict[Any, None] = {}
    for value in values:
        names.update(dict.fromkeys(value) if isinstance(value, dict) else {"value": None})
    return list(names)


def _row(value: Any, columns: Sequence[Any]) -> tuple[str, ...]:
    if not isinstance(value, dict):
        return tuple(_cell(value) if c == "value" else "" for c in columns)
    return tuple(_cell(value[c]) if c in value else "" for c in columns)


def _heading(shown: Shown) -> str:
    p = shown.preview
    return (
        f"app {p.app} ({shown.label}): {_plural(p.records, 'record')} from {shown.source} "
        f"at {_plural(len(p.sites), 'site')} ({', '.join(p.sites) or 'none'})"
    )


def _letters(title: str, letters: Sequence[Letter], limit: int) -> list[Block]:
    if not letters:
        return []
    shown = _first(letters, limit)
    more = f", the first {len(shown)} shown" if len(shown) < len(letters) else ""
    rows = tuple((d.operator, d.site, _cell(d.reason, REASON_CHARS), _cell(d.payload)) for d in shown)
    return ["", f"{title}: {len(letters)}{more}", Table(("operator", "at", "reason", "record"), rows)]


def _sink(sink: SinkResults, several_sites: bool, limit: int) -> list[Block]:
    head = f"sink {sink.name} ({sink.part})"
    if sink.unevaluated is not None:
        return ["", f"{head}: not evaluated: {sink.unevaluated}"]
    shown = _first(sink.results, limit)
    more = f", the first {len(shown)} shown" if len(shown) < len(sink.results) else ""
    blocks: list[Block] = ["", f"{head}: {_plural(len(sink.results), 'result')}{more}"]
    if shown:
        blocks.append(
            _results_table([("", site, value) for site, value in shown], several_sites and sink.part == "edge")
        )
    return blocks


def _results_table(rows: Sequence[tuple[str, str, Any]], with_site: bool, side: str = "") -> Table:
    """A table of ``(run, site, value)`` rows; the run's column (``side``) and the site's only when asked."""
    columns = _columns(value for _, _, value in rows)
    header = (*((side,) if side else ()), *(("site",) if with_site else ()), *map(str, columns))
    body = tuple(
        (*((run,) if side else ()), *((site,) if with_site else ()), *_row(value, columns)) for run, site, value in rows
    )
    return Table(header, body)


def report(shown: Shown, limit: int) -> list[Block]:
    """One run: its operators, dead letters, late records and sink results."""
    p = shown.preview
    header = ("operator", "kind", "part", "in", "out", "dead letters", "late")
    rows = tuple(
        (c.name, c.kind, c.part, _number(c.records_in), _number(c.records_out), str(c.dead_letters), _late(c))
        for c in p.operators
    )
    blocks: list[Block] = [_heading(shown), f"CPU per record: {_cpu(p)}", "", Table(header, rows)]
    blocks += _letters("dead letters", p.dead_letters, limit)
    blocks += _letters("late records", p.late, limit)
    for sink in p.sinks:
        blocks += _sink(sink, len(p.sites) > 1, limit)
    return blocks


def _cpu(p: Preview) -> str:
    """The run's process CPU time per record, in microseconds or milliseconds; ``-`` without records."""
    per = p.cpu_per_record
    if per is None:
        return "-"
    return f"{per * 1e6:.1f} µs" if per < 1e-3 else f"{per * 1e3:.2f} ms"


def _late(c: Count) -> str:
    return "-" if c.part == "hub" else str(c.late)


def differences(baseline: Preview, candidate: Preview) -> list[Difference]:
    """Per sink of either run (in the candidate's order, then the baseline's), the results that differ."""
    before = {s.name: s for s in baseline.sinks}
    after = {s.name: s for s in candidate.sinks}
    out = []
    for name in dict.fromkeys([*after, *before]):
        old, new = before.get(name), after.get(name)
        old_results = old.results if old is not None else []
        new_results = new.results if new is not None else []
        gone, added = _only(old_results, new_results), _only(new_results, old_results)
        either = new if new is not None else old
        if (gone or added) and either is not None:
            out.append(Difference(name, either.part, gone, added))
    return out


def _identity(result: tuple[str, Any]) -> bytes:
    return orjson.dumps(result, option=orjson.OPT_SORT_KEYS, default=str)


def _only(these: Sequence[tuple[str, Any]], those: Sequence[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The results of ``these`` that ``those`` has not, counted as multisets, in ``these``'s order."""
    extra = Counter(map(_identity, these))
    extra.subtract(Counter(map(_identity, those)))
    out = []
    for result in these:
        key = _identity(result)
        if extra[key] > 0:
            extra[key] -= 1
            out.append(result)
    return out


def _sort_key(row: tuple[str, str, Any], columns: Sequence[Any]) -> tuple[Any, ...]:
    value = row[2] if isinstance(row[2], dict) else {"value": row[2]}
    cells = tuple((0, v, "") if is_number(v) else (1, 0, _cell(v)) for v in (value.get(c) for c in columns))
    return (row[1], *cells, row[0])


def comparison(baseline: Shown, candidate: Shown, limit: int) -> list[Block]:
    """Two runs on the same records: operators side by side, then the results that differ per sink."""
    a, b = baseline.label, candidate.label
    blocks: list[Block] = [
        f"{_heading(candidate)}, against {baseline.label} (app {baseline.preview.app})",
        f"CPU per record: {_cpu(baseline.preview)} {a}, {_cpu(candidate.preview)} {b}",
        "",
        _operators_side_by_side(baseline.preview, candidate.preview, a, b),
    ]
    found = differences(baseline.preview, candidate.preview)
    several = len(candidate.preview.sites) > 1
    for d in found:
        rows = [(a, site, value) for site, value in d.only_in_baseline]
        rows += [(b, site, value) for site, value in d.only_in_candidate]
        columns = _columns(value for _, _, value in rows)
        rows.sort(key=lambda r: _sort_key(r, columns))
        shown = _first(rows, limit)
        more = f", the first {len(shown)} shown" if len(shown) < len(rows) else ""
        blocks += [
            "",
            f"sink {d.sink} ({d.part}): {_plural(len(rows), 'result')} {'differs' if len(rows) == 1 else 'differ'} "
            f"({len(d.only_in_baseline)} only in {a}, "
            f"{len(d.only_in_candidate)} only in {b}){more}",
            _results_table(shown, several and d.part == "edge", side="only in"),
        ]
    differing = {d.sink for d in found}
    same = [s for s in candidate.preview.sinks if s.name not in differing and s.unevaluated is None]
    if same:
        blocks += ["", "same results: " + ", ".join(f"{s.name} ({_plural(len(s.results), 'result')})" for s in same)]
    unevaluated = [s for s in candidate.preview.sinks if s.unevaluated is not None]
    blocks += [f"sink {s.name} not evaluated: {s.unevaluated}" for s in unevaluated]
    return blocks


def _operators_side_by_side(baseline: Preview, candidate: Preview, a: str, b: str) -> Table:
    before = {c.name: c for c in baseline.operators}
    after = {c.name: c for c in candidate.operators}
    header = ("operator", "part", f"out {a}", f"out {b}", f"dead letters {a}", f"dead letters {b}")
    rows: list[tuple[str, ...]] = []
    alarm: set[int] = set()
    for name in dict.fromkeys([*after, *before]):
        old, new = before.get(name), after.get(name)
        either = new if new is not None else old
        row = (
            name,
            either.part if either is not None else "",
            "-" if old is None else _number(old.records_out),
            "-" if new is None else _number(new.records_out),
            "-" if old is None else str(old.dead_letters),
            "-" if new is None else str(new.dead_letters),
        )
        rows.append(row)
        if row[2] != row[3] or row[4] != row[5]:
            alarm.add(len(rows))
    return Table(header, tuple(rows), frozenset(alarm))


def to_json(shown: Shown, limit: int) -> dict[str, Any]:
    """One run as JSON-ready data; lists of results and letters hold the first ``limit`` (0: all)."""
    p = shown.preview
    return {
        "app": p.app,
        "app_file": shown.label,
        "input": shown.source,
        "records": p.records,
        "sites": p.sites,
        "cpu_seconds": p.cpu_seconds,
        "cpu_per_record_s": p.cpu_per_record,
        "operators": [
            {
                "name": c.name,
                "kind": c.kind,
                "part": c.part,
                "in": c.records_in,
                "out": c.records_out,
                "dead_letters": c.dead_letters,
                "late": c.late,
            }
            for c in p.operators
        ],
        "dead_letters": [_letter(d) for d in _first(p.dead_letters, limit)],
        "late": [_letter(d) for d in _first(p.late, limit)],
        "sinks": [
            {
                "name": s.name,
                "part": s.part,
                "total": len(s.results),
                "results": [{"site": site, "value": value} for site, value in _first(s.results, limit)],
                "not_evaluated": s.unevaluated,
            }
            for s in p.sinks
        ],
    }


def _letter(d: Letter) -> dict[str, str]:
    return {"operator": d.operator, "at": d.site, "reason": d.reason, "record": d.payload}


def comparison_json(baseline: Shown, candidate: Shown, limit: int) -> dict[str, Any]:
    """Two runs and the results that differ per sink, as JSON-ready data."""
    return {
        "baseline": to_json(baseline, limit),
        "candidate": to_json(candidate, limit),
        "differences": [
            {
                "sink": d.sink,
                "part": d.part,
                "only_in_baseline": [{"site": s, "value": v} for s, v in _first(d.only_in_baseline, limit)],
                "only_in_candidate": [{"site": s, "value": v} for s, v in _first(d.only_in_candidate, limit)],
            }
            for d in differences(baseline.preview, candidate.preview)
        ],
    }
