"""The names, addresses and ``ip``/``tc`` commands of a namespace run."""

from __future__ import annotations

import pytest

from simulate.netns.layout import (
    Layout,
    Shape,
    delay_commands,
    lab_dev_prefix,
    link_command,
    netem_probe_commands,
    parse_run,
    setup_commands,
    shaping_commands,
    teardown_commands,
)

SITES = ("cloud", "barn", "field-east")


def _layout() -> Layout:
    return Layout(pid=4242, tag="0a1f", lab_block=3, sites=SITES)


def test_names_and_addresses_are_per_run_and_per_site() -> None:
    layout = _layout()
    assert layout.run == "spanedge-4242-0a1f"
    assert layout.namespaces() == [
        "spanedge-4242-0a1f-r",
        "spanedge-4242-0a1f-s1",
        "spanedge-4242-0a1f-s2",
        "spanedge-4242-0a1f-s3",
    ]
    assert layout.address("barn") == "10.77.2.2"
    assert layout.relay_address("barn", "cloud") == "10.77.2.11"  # on barn's link, for barn <-> cloud
    assert layout.relay_address("cloud", "barn") == "10.77.1.12"
    assert layout.lab_address("field-east") == "100.67.3.2"
    assert layout.lab_gateway("field-east") == "100.67.3.1"
    assert layout.lab_dev("barn") == "se0a1fm2"
    assert len(layout.lab_dev("barn")) <= 15  # the kernel's limit on interface names
    assert layout.exec_prefix("cloud") == ["ip", "netns", "exec", "spanedge-4242-0a1f-s1"]
    assert parse_run(layout.namespace("barn")) == (4242, "0a1f")
    assert parse_run(layout.router) == (4242, "0a1f")
    assert parse_run("spanedge-4242-0a1f") is None
    assert parse_run("someone-elses") is None
    assert lab_dev_prefix("0a1f") == "se0a1fm"
    addresses = layout.addresses()
    assert {"10.77.2.2", "100.67.2.2", "10.77.2.11", "10.77.2.13"} <= set(addresses)
    assert len(addresses) == len(set(addresses)) == 3 * (2 + 2)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"tag": "XYZ1"}, "4 lowercase hex digits"),
        ({"lab_block": 64}, "0-63"),
        ({"sites": ()}, "1 to 200 sites"),
    ],
)
def test_a_bad_layout_says_what_is_wrong(kwargs: dict[str, object], says: str) -> None:
    args: dict[str, object] = {"pid": 1, "tag": "abcd", "lab_block": 0, "sites": SITES, **kwargs}
    with pytest.raises(ValueError, match=says):
        Layout(**args)  # type: ignore[arg-type]


def test_setup_makes_both_links_of_every_site_with_their_addresses() -> None:
    layout = _layout()
    cmds = [" ".join(c) for c in setup_commands(layout)]
    r, s2 = layout.router, layout.namespace("barn")
    assert cmds[:4] == [f"ip netns add {ns}" for ns in layout.namespaces()]
    assert f"ip -n {r} link add w2 type veth peer name wan0 netns {s2}" in cmds
    assert f"ip -n {r} addr add 10.77.2.1/24 dev w2" in cmds
    assert f"ip -n {r} addr add 10.77.2.11/24 dev w2" in cmds
    assert f"ip -n {r} addr add 10.77.2.13/24 dev w2" in cmds
    assert f"ip -n {s2} addr add 10.77.2.2/24 dev wan0" in cmds
    assert f"ip link add se0a1fm2 type veth peer name lab0 netns {s2}" in cmds
    assert "ip addr add 100.67.2.1/24 dev se0a1fm2" in cmds
    assert f"ip -n {s2} addr add 100.67.2.2/24 dev lab0" in cmds
    for ns in layout.namespaces():
        assert f"ip -n {ns} link set lo up" in cmds
    ups = [c for c in cmds if c.endswith(" up")]
    assert len(ups) == 4 + 4 * 3  # every loopback, both ends of both links of each site
    # a link is used only once it exists and holds its address
    assert cmds.index(f"ip -n {r} addr add 10.77.2.1/24 dev w2") < cmds.index(f"ip -n {r} link set w2 up")


def test_shaping_caps_each_peer_apart_by_the_relay_address() -> None:
    layout = _layout()
    inbound = {"cloud": Shape(2.0), "field-east": Shape(None)}
    cmds = [" ".join(c) for c in shaping_commands(layout, "barn", inbound)]
    tc = f"tc -n {layout.router}"
    assert cmds[0] == f"{tc} qdisc add dev w2 root handle 1: htb default 1"
    assert f"{tc} class add dev w2 parent 1: classid 1:b htb rate 2mbit ceil 2mbit quantum 60000" in cmds
    assert f"{tc} class add dev w2 parent 1: classid 1:d htb rate 1gbit ceil 1gbit quantum 60000" in cmds
    assert f"{tc} filter add dev w2 parent 1: protocol ip prio 1 u32 match ip src 10.77.2.11/32 flowid 1:b" in cmds
    assert not any("netem" in c for c in cmds)  # no delay given: the relays carry it


def test_with_netem_each_peer_class_gets_its_delay_and_a_change_hits_both_directions() -> None:
    layout = _layout()
    cmds = [" ".join(c) for c in shaping_commands(layout, "barn", {"cloud": Shape(2.0, 120.0, 2.0)})]
    assert cmds[-1] == f"tc -n {layout.router} qdisc add dev w2 parent 1:b handle b: netem delay 120ms 2ms"
    change = [" ".join(c) for c in delay_commands(layout, "barn", "cloud", Shape(2.0, 300.0))]
    assert change == [
        f"tc -n {layout.router} qdisc change dev w2 parent 1:b handle b: netem delay 300ms",  # cloud -> barn
        f"tc -n {layout.router} qdisc change dev w1 parent 1:c handle c: netem delay 300ms",  # barn -> cloud
    ]


def test_a_partition_takes_the_router_end_of_the_link_down_and_a_heal_up() -> None:
    layout = _layout()
    assert link_command(layout, "field-east", up=False) == ["ip", "-n", layout.router, "link", "set", "w3", "down"]
    assert link_command(layout, "field-east", up=True)[-1] == "up"
    add, remove = netem_probe_commands(layout)
    assert add[:3] == ["tc", "-n", layout.router]
    assert "netem" in add
    assert remove[-3:] == ["dev", "lo", "root"]


def test_teardown_deletes_the_namespaces_then_the_lab_ends() -> None:
    assert teardown_commands(["a-r", "a-s1"], ["se0a1fm1"]) == [
        ["ip", "netns", "del", "a-r"],
        ["ip", "netns", "del", "a-s1"],
        ["ip", "link", "del", "se0a1fm1"],
    ]
