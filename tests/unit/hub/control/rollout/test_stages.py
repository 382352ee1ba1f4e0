"""The stage spec: its grammar, its errors and its check against the fleet's labels."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given

from hub.control.rollout.stages import GRAMMAR, Stage, fleet_of, format_stages, parse_stages
from spanedge.errors import InvalidRollout
from spanedge.sites import Sites
from tests.unit.hub.control.rollout.strategies import stage_lists

FLEET = {
    "truck-1": {"kind": "truck", "fleet": "north"},
    "truck-2": {"kind": "truck", "fleet": "south"},
    "bus-1": {"kind": "bus", "fleet": "north"},
    "shed": {},
}


def test_the_issue_s_example_parses_into_three_stages() -> None:
    stages = parse_stages("kind=truck:1, kind=truck:25%, *", FLEET)
    assert stages == (
        Stage(selector=(("kind", "truck"),), count=1),
        Stage(selector=(("kind", "truck"),), percent=Fraction(25)),
        Stage(rest=True),
    )


@pytest.mark.parametrize(
    ("text", "stage"),
    [
        ("kind=truck", Stage(selector=(("kind", "truck"),))),
        ("3", Stage(count=3)),
        ("12.5%", Stage(percent=Fraction(25, 2))),
        (
            " fleet = north + kind = truck : 50% ",
            Stage(selector=(("fleet", "north"), ("kind", "truck")), percent=Fraction(50)),
        ),
        ("kind=truck+kind=truck:2", Stage(selector=(("kind", "truck"),), count=2)),
    ],
)
def test_a_stage_is_a_selector_an_amount_or_both(text: str, stage: Stage) -> None:
    assert parse_stages(f"{text}, *", FLEET) == (stage, Stage(rest=True))


def test_star_alone_is_every_site_at_once() -> None:
    assert parse_stages("*", FLEET) == (Stage(rest=True),)


@pytest.mark.parametrize(
    ("text", "part", "why"),
    [
        ("", "", "is empty"),
        ("kind=truck:1", "stage 1 'kind=truck:1'", "is the last stage but is not '*'"),
        ("*, kind=truck:1", "stage 1 '*'", "is not the last stage"),
        ("kind=truck:1, , *", "stage 2", "is empty"),
        ("kind=truck:0, *", "stage 1 'kind=truck:0'", "a count is at least 1"),
        ("kind=truck:0%, *", "stage 1 'kind=truck:0%'", "more than 0% and at most 100%"),
        ("kind=truck:101%, *", "stage 1 'kind=truck:101%'", "more than 0% and at most 100%"),
        ("kind=truck:-1, *", "stage 1 'kind=truck:-1'", "neither a count (3) nor a percentage (25%)"),
        ("kind=truck:, *", "stage 1 'kind=truck:'", "has no amount"),
        (":3, *", "stage 1 ':3'", "no selector before it"),
        ("kind:3, *", "stage 1 'kind:3'", "'kind', not a KEY=VALUE label"),
        ("kind=truck+, *", "stage 1 'kind=truck+'", "an empty label around '+'"),
        ("Kind=truck, *", "stage 1 'Kind=truck'", "uppercase"),
        ("kind=truck+kind=bus, *", "stage 1 'kind=truck+kind=bus'", "a site has one value per label"),
    ],
)
def test_a_malformed_spec_names_the_stage_and_shows_the_grammar(text: str, part: str, why: str) -> None:
    with pytest.raises(InvalidRollout) as info:
        parse_stages(text, FLEET, where="--rollout")
    message = str(info.value)
    assert message.startswith(f"--rollout {text!r}")
    assert part in message
    assert why in message
    assert GRAMMAR in message


def test_a_selector_no_site_matches_is_refused_with_the_labels_there_are() -> None:
    with pytest.raises(InvalidRollout) as info:
        parse_stages("kind=truck:1, kind=van:50%, *", FLEET)
    assert str(info.value) == (
        "rollout stages 'kind=truck:1, kind=van:50%, *': stage 2 'kind=van:50%': no site has kind=van; the sites "
        "have the labels fleet=north (2 sites), fleet=south (1 site), kind=bus (1 site), kind=truck (2 sites)"
    )


def test_labels_that_each_exist_but_never_together_are_refused() -> None:
    with pytest.raises(InvalidRollout, match="no site has fleet=south and kind=bus"):
        parse_stages("kind=bus+fleet=south, *", FLEET)


def test_a_fleet_without_labels_says_how_to_give_some() -> None:
    with pytest.raises(InvalidRollout, match=r"none of its 2 sites has a label \(spanedge site add --labels"):
        parse_stages("kind=truck, *", {"a": {}, "b": {}})


def test_a_fleet_without_sites_has_nothing_to_roll_out() -> None:
    with pytest.raises(InvalidRollout, match="the app runs on no spoke"):
        parse_stages("*", {})


def test_without_a_fleet_only_the_syntax_is_checked() -> None:
    assert parse_stages("kind=van:1, *") == (Stage(selector=(("kind", "van"),), count=1), Stage(rest=True))


def test_the_fleet_is_the_spokes_with_their_labels() -> None:
    sites = Sites.of(
        {
            "sites": {
                "cloud": {"tier": "hub", "broker": "mqtt://localhost:1883"},
                "truck-1": {"tier": "spoke", "broker": "mqtt://localhost:1884", "labels": {"kind": "truck"}},
                "shed": {"tier": "spoke", "broker": "mqtt://localhost:1885"},
            }
        }
    )
    assert fleet_of(sites) == {"truck-1": {"kind": "truck"}, "shed": {}}
    assert fleet_of(sites, ["shed", "cloud"]) == {"shed": {}}


@pytest.mark.parametrize(
    ("stage", "matching", "target"),
    [
        (Stage(count=1), 0, 0),
        (Stage(count=1), 5, 1),
        (Stage(count=9), 5, 5),
        (Stage(percent=Fraction(25)), 3, 1),  # rounded up: a non-empty stage changes a site
        (Stage(percent=Fraction(25)), 8, 2),
        (Stage(percent=Fraction(10)), 30, 3),  # exact, no float rounding up to 4
        (Stage(percent=Fraction(1, 10)), 1, 1),
        (Stage(), 7, 7),
        (Stage(rest=True), 7, 7),
    ],
)
def test_a_stage_s_target_rounds_percentages_up(stage: Stage, matching: int, target: int) -> None:
    assert stage.target(matching) == target


@given(stage_lists())
def test_what_format_writes_parse_reads_back(stages: tuple[Stage, ...]) -> None:
    assert parse_stages(format_stages(stages)) == stages
