"""Which of an app's hub windows a held-up site or a move holds back (no broker, no Spark)."""

from __future__ import annotations

import dataclasses
import math

from hub.handover.scope import feeders, reader_starts, upstream
from spanedge.plan import Assignment, Flow, Handover, Plan
from tests.plans import chain_plan

T = 1000.0
#: field-east's per-probe window moved from the barn to the shed at T; its parsing stays at the barn
MOVED = Handover("w@field-east", "barn", "shed", T, epoch=1)
#: the farm-wide window ``dry`` (at the hub) reads field-east's parsed records; ``means`` both sites' windows
SINKS = {"dry-reader": "dry", "means-reader": "means"}


def _plan(handovers: tuple[Handover, ...] = ()) -> Plan:
    plan = chain_plan("farm", 2, {"field-east": [("parse", "barn", 0)]}, source="probes", sink="dry")
    extra = (
        Assignment("w@field-east", "w", "field-east", "shed", "test", 2),
        Assignment("probes@field-west", "probes", "field-west", "field-west", "source"),
        Assignment("w@field-west", "w", "field-west", "field-west", "test"),
        Assignment("means", "means", None, "cloud", "@global_"),
    )
    flows = (
        Flow("parse@field-east", "w@field-east", 1.0, 1.0),
        Flow("probes@field-west", "w@field-west", 1.0, 1.0),
        Flow("w@field-east", "means", 1.0, 1.0),
        Flow("w@field-west", "means", 1.0, 1.0),
    )
    return dataclasses.replace(
        plan, assignments=(*plan.assignments, *extra), flows=(*plan.flows, *flows), handovers=handovers
    )


def test_a_query_is_fed_by_the_sites_upstream_of_its_sink_and_the_old_owners_of_their_moves() -> None:
    plan = _plan((MOVED,))
    assert upstream(plan, "dry") == {"probes@field-east", "parse@field-east", "dry"}
    assert feeders(plan, upstream(plan, "dry")) == {"field-east", "barn"}
    means = upstream(plan, "means")
    assert means == {
        "probes@field-east",
        "parse@field-east",
        "w@field-east",
        "probes@field-west",
        "w@field-west",
        "means",
    }
    assert feeders(plan, means) == {"field-east", "barn", "shed", "field-west"}


def test_a_cut_off_site_holds_only_the_windows_its_records_can_reach() -> None:
    # field-west feeds only the per-probe means: cut off, its frontier stays at 950
    starts = reader_starts(_plan(), SINKS, [], {"field-west": 950.0, "barn": 1012.0, "shed": 1013.0})
    assert starts == {"dry-reader": 1012.0, "means-reader": 950.0}


def test_a_move_holds_only_the_windows_downstream_of_the_moved_replica() -> None:
    starts = reader_starts(_plan((MOVED,)), SINKS, [MOVED], {"barn": 1012.0})
    assert starts == {"dry-reader": 1012.0, "means-reader": T}
    assert reader_starts(_plan((MOVED,)), SINKS, [MOVED], {})["dry-reader"] == math.inf  # nothing holds it
    recovered = dataclasses.replace(MOVED, recoverer="field-east", recover_from=980.0)  # the barn died: recomputed
    assert reader_starts(_plan((recovered,)), SINKS, [recovered], {})["means-reader"] == 980.0


def test_a_sink_no_flow_reaches_waits_for_everything() -> None:
    plan = dataclasses.replace(_plan((MOVED,)), flows=())
    assert reader_starts(plan, SINKS, [MOVED], {"field-west": 950.0}) == {"dry-reader": 950.0, "means-reader": 950.0}
    assert reader_starts(plan, SINKS, [MOVED], {}) == {"dry-reader": T, "means-reader": T}
