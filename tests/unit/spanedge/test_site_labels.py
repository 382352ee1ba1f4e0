"""Site labels in sites.yaml: checked at load with the file and line, and selectable."""

from __future__ import annotations

import pytest

from spanedge.errors import InvalidSites
from spanedge.names import label_problem
from spanedge.sites import parse_sites

SITES = """\
sites:
  cloud: {tier: hub, broker: "mqtt://hub:1883"}
  truck-12:
    tier: spoke
    broker: "mqtt://hub:1883"
    labels:
      fleet: north
      kind: truck
  truck-13:
    tier: spoke
    broker: "mqtt://hub:1883"
    labels: {fleet: south, kind: truck}
"""


def test_labels_load_and_select_sites() -> None:
    sites = parse_sites(SITES)
    assert sites.sites["truck-12"].labels == {"fleet": "north", "kind": "truck"}
    assert sites.sites["cloud"].labels == {}
    assert [s.name for s in sites.labelled({"kind": "truck"})] == ["truck-12", "truck-13"]
    assert [s.name for s in sites.labelled({"fleet": "north", "kind": "truck"})] == ["truck-12"]
    assert len(sites.labelled({})) == 3
    assert parse_sites(SITES).to_data()["sites"]["truck-13"]["labels"] == {"fleet": "south", "kind": "truck"}


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("      Fleet: north", "label key name 'Fleet' has uppercase letters"),
        ("      fleet: North East", "value of label 'fleet': name 'North East'"),
        ("      fleet: 12", "Expected `str`, got `int`"),
        ("      -fleet: north", "label key name '-fleet' starts with '-'"),
    ],
)
def test_a_bad_label_names_the_file_line_and_rule(line: str, says: str) -> None:
    text = SITES.replace("      fleet: north", line)
    with pytest.raises(InvalidSites) as caught:
        parse_sites(text, "fleet.yaml")
    message = str(caught.value)
    assert "fleet.yaml:7" in message
    assert says in message


def test_label_problem_accepts_names_and_refuses_others() -> None:
    assert label_problem("fleet", "north") is None
    assert label_problem("zone", "eu-west_1") is None
    assert "must be a string" in str(label_problem("fleet", None))
    assert "is empty" in str(label_problem("", "north"))
