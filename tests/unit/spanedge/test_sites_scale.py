"""A fleet-sized sites.yaml loads with line numbers in its errors; YAML aliases are bounded."""

from __future__ import annotations

import pytest

from spanedge.errors import InvalidSites
from spanedge.sites import parse_sites, parse_stream

SITE_LINES = 5


def fleet_yaml(spokes: int, cpu_of_last: str = "1.0") -> str:
    """A ``sites.yaml`` of one hub and ``spokes`` spokes, each ``SITE_LINES`` lines long."""
    lines = ["sites:", '  cloud: {tier: hub, broker: "mqtt://hub:1883", cpu: 8}']
    for i in range(spokes):
        cpu = cpu_of_last if i == spokes - 1 else "1.0"
        lines += [
            f"  gw-{i}:",
            f'    tier: spoke\n    broker: "mqtt://gw-{i}:1883"\n    cpu: {cpu}',
            f'    streams: {{readings: {{topic: "plant/{i}/+/temp", rate: 5}}}}',
        ]
    return "\n".join(lines) + "\n"


def test_a_10000_site_file_loads() -> None:
    sites = parse_sites(fleet_yaml(10_000))
    assert len(sites.spokes) == 10_000
    assert sites.site("gw-9999").streams["readings"].topic == "plant/9999/+/temp"


def test_an_error_in_a_10000_site_file_names_its_line() -> None:
    with pytest.raises(InvalidSites) as caught:
        parse_sites(fleet_yaml(10_000, cpu_of_last="-1"), "fleet.yaml")
    line = 2 + 9_999 * SITE_LINES + 4  # the header, the hub, the spokes before, then the last one's cpu
    assert f"fleet.yaml:{line}: sites.gw-9999.cpu: Expected `float` > 0.0 (got -1)" in str(caught.value)


# "billion laughs": 9 levels of 9 aliases each, 9**9 (387 million) strings once expanded, in 342 bytes
BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{name}: &{name} [{','.join(['*' + prev] * 9)}]\n" for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
)


def test_an_alias_bomb_is_refused_without_expanding() -> None:
    assert len(BOMB.encode()) == 342
    with pytest.raises(InvalidSites, match=r"bomb\.yaml: its YAML aliases would expand it to more than 1,000,000 "):
        parse_sites(BOMB, "bomb.yaml")


def test_an_alias_inside_its_own_anchor_is_refused() -> None:
    with pytest.raises(InvalidSites, match=r"loop\.yaml:2: a YAML alias refers to the anchored value that contains"):
        parse_sites("sites: {}\nloop: &x [1, *x]\n", "loop.yaml")


def test_a_stream_option_is_bounded_too() -> None:
    with pytest.raises(InvalidSites, match="contains it"):
        parse_stream("readings={topic: &t [*t]}")


def test_aliases_and_merge_keys_within_bounds_still_load() -> None:
    sites = parse_sites(
        """
sites:
  cloud: {tier: hub, broker: "mqtt://hub:1883"}
  gw-1: &gateway
    tier: spoke
    broker: "mqtt://gw:1883"
    streams: &streams {readings: {topic: "plant/+/temp", rate: 5}}
  gw-2:
    <<: *gateway
    cpu: 2
  gw-3: {tier: spoke, broker: "mqtt://gw-3:1883", streams: *streams}
"""
    )
    assert sites.site("gw-2").cpu == 2
    assert sites.site("gw-2").streams == sites.site("gw-3").streams == sites.site("gw-1").streams
