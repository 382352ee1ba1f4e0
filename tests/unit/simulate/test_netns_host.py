"""Running a namespace run's commands, checking the machine, and sweeping what dead runs left behind."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

import pytest

from simulate.errors import SimulationError
from simulate.netns import host
from simulate.netns.layout import Layout, parse_run

LINKS = """1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN
7: se0a1fm1@if2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP
8: se0a1fm2@if2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP
9: se9999m1@if2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP
"""


class FakeIp:
    """Answers ``ip`` commands from fixed output and records every command."""

    def __init__(self, netns: str, pids: dict[str, str] | None = None, fail: Sequence[str] = ()) -> None:
        self.netns, self.pids, self.fail = netns, pids or {}, fail
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        argv = list(argv)
        self.calls.append(argv)
        out, code = "", 0
        if argv == ["ip", "netns", "list"]:
            out = self.netns
        elif argv[:3] == ["ip", "netns", "pids"]:
            out = self.pids.get(argv[3], "")
        elif argv == ["ip", "-o", "link", "show"]:
            out = LINKS
        if any(word in argv for word in self.fail):
            code = 1
        return subprocess.CompletedProcess(
            argv, code, out, "RTNETLINK answers: Operation not permitted" if code else ""
        )


def test_the_sweep_removes_dead_runs_only_and_kills_what_runs_in_them(monkeypatch: pytest.MonkeyPatch) -> None:
    listing = (
        "spanedge-111-0a1f-s2 (id: 3)\nspanedge-111-0a1f-r (id: 2)\n"
        "spanedge-222-9999-r (id: 1)\nsomeone-elses\nspanedge-notarun\n"
    )
    ip = FakeIp(listing, pids={"spanedge-111-0a1f-s2": "31337\n"})
    killed: list[int] = []
    monkeypatch.setattr("simulate.netns.host.os.kill", lambda pid, sig: killed.append(pid))
    removed = host.sweep(alive=lambda pid: pid == 222, runner=ip)
    assert removed == ["spanedge-111-0a1f-s2", "spanedge-111-0a1f-r"]
    assert killed == [31337]
    deletes = [c for c in ip.calls if c[:3] in (["ip", "netns", "del"], ["ip", "link", "del"])]
    assert deletes == [
        ["ip", "netns", "del", "spanedge-111-0a1f-s2"],
        ["ip", "netns", "del", "spanedge-111-0a1f-r"],
        ["ip", "link", "del", "se0a1fm1"],
        ["ip", "link", "del", "se0a1fm2"],
    ]  # the live run 222 (tag 9999) and namespaces of no run are left alone


def test_nothing_to_sweep_runs_no_delete() -> None:
    ip = FakeIp("someone-elses\n")
    assert host.sweep(alive=lambda pid: False, runner=ip) == []
    assert ip.calls == [["ip", "netns", "list"]]


def test_a_failed_command_says_which_and_why_and_how_to_do_without() -> None:
    ip = FakeIp("", fail=["add"])
    with pytest.raises(SimulationError, match=r"ip netns add x failed with code 1: RTNETLINK .*--hosts loopback"):
        host.check_command(["ip", "netns", "add", "x"], ip)
    assert host.check_command(["ip", "netns", "list"], ip) == ""


def test_why_namespaces_cannot_be_made(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("simulate.netns.host.os.geteuid", lambda: 1000)
    assert "need root" in (host.unavailable(FakeIp("")) or "")
    monkeypatch.setattr("simulate.netns.host.os.geteuid", lambda: 0)
    monkeypatch.setattr("simulate.netns.host.shutil.which", lambda tool: None if tool == "tc" else f"/usr/sbin/{tool}")
    assert "iproute2's 'tc'" in (host.unavailable(FakeIp("")) or "")
    monkeypatch.setattr("simulate.netns.host.shutil.which", lambda tool: f"/usr/sbin/{tool}")
    refused = FakeIp("", fail=["add"])
    assert "refuses namespaces" in (host.unavailable(refused) or "")
    allowed = FakeIp("")
    assert host.unavailable(allowed) is None
    (add, delete) = allowed.calls
    assert add[:3] == ["ip", "netns", "add"]
    assert delete == ["ip", "netns", "del", add[3]]
    assert parse_run(add[3]) is not None  # the probe is named like a run: a crash leaves it to the sweep


def test_the_netem_probe_and_the_outputs_read() -> None:
    layout = Layout(pid=1, tag="abcd", lab_block=0, sites=("a", "b"))
    assert host.has_netem(layout, FakeIp("", fail=["netem"])) is False
    ok = FakeIp("")
    assert host.has_netem(layout, ok) is True
    assert ok.calls[-1][-3:] == ["dev", "lo", "root"]  # the probe's qdisc removed again
    shown = (
        "class htb 1:1 root prio 0 rate 1Gbit ceil 1Gbit burst 1375b cburst 1375b \n"
        " Sent 176 bytes 2 pkt (dropped 0, overlimits 0 requeues 0) \n backlog 0b 0p requeues 0\n\n"
        "class htb 1:b root prio 0 rate 2Mbit ceil 2Mbit burst 1600b cburst 1600b \n"
        " Sent 90210 bytes 77 pkt (dropped 0, overlimits 3 requeues 0) \n"
    )
    assert host.class_bytes(shown) == {"1:1": 176, "1:b": 90210}
    addresses = "2: eth0    inet 100.70.1.1/24 scope global\n3: x    inet 10.0.0.1/8\n4: y    inet 100.200.0.1/8\n"
    blocks = host.lab_blocks_in_use(FakeIp(""))
    assert blocks == set()
    assert host.lab_blocks_in_use(lambda argv: subprocess.CompletedProcess(argv, 0, addresses, "")) == {6}
