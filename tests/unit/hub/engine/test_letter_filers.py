"""Which hub query files a dead letter: one per failing record, though several sinks' queries run its operator."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson

from hub.engine.compile import Compiler
from hub.engine.replicas import Replicas
from hub.engine.sinks import BatchSink, MemoryStore
from hub.engine.wanted import name_letter_filers
from hub.handover.cutoffs import Share
from spanedge import App, global_, sinks
from spanedge.sites import parse_sites
from tests.integration.hubkit import make_plan

SITES = parse_sites(
    """
sites:
  cloud: {tier: hub, broker: "mqtt://localhost:1883"}
  s1: {tier: spoke, broker: "mqtt://localhost:1884", streams: {a: {topic: "a/#", rate: 10}}}
"""
)


@global_(name="parse")
def parse(r: dict[str, Any]) -> dict[str, Any]:
    """Shared by both sinks."""
    return r


@global_(name="only_b")
def only_b(r: dict[str, Any]) -> bool:
    """Upstream of sink ``b`` alone."""
    return True


def _queries() -> dict[str, Any]:
    app = App("letters")
    parsed = app.source("a").map(parse)
    parsed.sink(sinks.memory("a"), name="b_first")
    parsed.filter(only_b).sink(sinks.memory("b"), name="a_second")
    hub_ops = {"parse", "only_b", "b_first", "a_second"}
    plan = make_plan(app, SITES, at_hub=hub_ops, singletons=hub_ops)
    compiler = Compiler(None, Replicas(app, plan, app.graph()))  # type: ignore[arg-type]
    wanted = {s: (plan.assignment(s), compiler, "fp") for s in ("b_first", "a_second")}
    queries = {s: SimpleNamespace(sink=SimpleNamespace(letters_of=None)) for s in wanted}
    name_letter_filers(wanted, queries)  # type: ignore[arg-type]
    return queries


def test_an_operator_feeding_two_sinks_has_its_letters_filed_by_the_first_sink_by_name_only() -> None:
    queries = _queries()
    assert queries["a_second"].sink.letters_of == frozenset({"parse", "only_b"})
    assert queries["b_first"].sink.letters_of == frozenset()


def _letter(op: str, at: float) -> bytes:
    return orjson.dumps({"operator": op, "event_time": at, "seq": int(at)})


def test_a_sink_files_the_letters_of_its_operators_within_its_share(tmp_path: Path) -> None:
    sink = BatchSink("out", "memory", "out", tmp_path / "q" / "sink.json", MemoryStore())
    letters = [_letter("parse", 10.0), _letter("only_b", 20.0), _letter("parse", 30.0)]
    assert sink._own_letters(letters) == letters  # on its own, a query files every letter of its operators
    sink.letters_of = frozenset({"parse"})
    assert sink._own_letters(letters) == [letters[0], letters[2]]
    sink.share = Share(((25.0, math.inf),))  # the new placement's query of a handover from 25
    assert sink._own_letters(letters) == [letters[2]]
    sink.share = Share(((-math.inf, 25.0),))
    assert sink._own_letters(letters) == [letters[0]]
