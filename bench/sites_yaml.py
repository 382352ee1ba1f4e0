"""Loading a fleet's ``sites.yaml``: ``parse_sites`` against PyYAML's ``yaml.safe_load`` of the same text.

    .venv/bin/python bench/sites_yaml.py [--sites 10000] [--rounds 3]

Generates a ``sites.yaml`` of one hub and ``--sites`` spokes (each with a
broker, a CPU budget and one stream, and a link to the hub for every tenth:
about 140 bytes a spoke), then times, in the same run and alternating, ``--rounds`` times
each:

* ``parse_sites``: what the hub, the agents and ``spanedge deploy`` do (YAML,
  the alias bound and every field checked into :class:`spanedge.sites.Sites`);
* the baseline ``yaml.safe_load`` of the same text (YAML alone, pure-Python
  loader, no checks);
* ``yaml.load`` with ``yaml.CSafeLoader`` (YAML alone, libyaml's parser): the
  floor of any loader built on PyYAML;
* the error path: the same file with the last spoke's ``cpu`` wrong, up to the
  message with its line;
* a "billion laughs" alias bomb of 342 bytes, up to its refusal.

Prints the best wall and CPU time of each with its ratios to the baseline
(CPU time is the steadier figure on a shared machine), against the goal of
2 s for 10,000 sites.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spanedge.errors import InvalidSites
from spanedge.sites import parse_sites

GOAL_S = 2.0
BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{name}: &{name} [{','.join(['*' + prev] * 9)}]\n" for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
)


def fleet(spokes: int, bad_last: bool = False) -> str:
    """The text of a ``sites.yaml`` with one hub and ``spokes`` spokes (about 140 bytes each, as a real fleet's)."""
    out = ["sites:", '  cloud: {tier: hub, broker: "mqtt://hub.example.net:1883", cpu: 16}']
    for i in range(spokes):
        cpu = "-1" if bad_last and i == spokes - 1 else "0.5"
        out += [
            f"  gw-{i}:",
            f'    tier: spoke\n    broker: "mqtt://gw-{i}.example.net:1883"\n    cpu: {cpu}',
            f'    streams: {{readings: {{topic: "plant/{i}/+/temp", rate: 20}}}}',
        ]
    out += ["default_link: {latency_ms: 50, bandwidth_mbps: 10}", "links:"]
    out += [f"  - {{between: [gw-{i}, cloud], latency_ms: 20}}" for i in range(0, spokes, 10)]
    return "\n".join(out) + "\n"


def refused(text: str) -> str:
    """The error ``parse_sites`` gives for ``text``."""
    try:
        parse_sites(text, "sites.yaml")
    except InvalidSites as exc:
        return str(exc)
    msg = "the file was accepted"
    raise AssertionError(msg)


def best(fn: Callable[[], Any], rounds: int) -> tuple[float, float, Any]:
    """The shortest wall time and CPU time of ``rounds`` calls, and the last result."""
    walls, cpus, result = [], [], None
    for _ in range(rounds):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus), result


def main() -> None:
    """Run the comparison and print it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, default=10_000, help="spokes in the generated file")
    parser.add_argument("--rounds", type=int, default=3, help="timed runs of each, best kept")
    args = parser.parse_args()
    text = fleet(args.sites)
    bad = fleet(args.sites, bad_last=True)
    print(f"sites.yaml of {args.sites:,} spokes: {len(text) / 1e6:.1f} MB, {text.count(chr(10)):,} lines")
    rows: list[tuple[str, float, float]] = []
    for _ in range(args.rounds):  # alternate, so a busy moment hits each alike
        rows.append(("parse_sites", *best(lambda: parse_sites(text), 1)[:2]))
        rows.append(("yaml.safe_load (baseline)", *best(lambda: yaml.safe_load(text), 1)[:2]))
        rows.append(("yaml.load, CSafeLoader", *best(lambda: yaml.load(text, Loader=yaml.CSafeLoader), 1)[:2]))
    error_wall, error_cpu, message = best(lambda: refused(bad), args.rounds)
    bomb_wall, bomb_cpu, bomb_message = best(lambda: refused(BOMB), args.rounds)
    times = {
        name: (min(w for n, w, _ in rows if n == name), min(c for n, _, c in rows if n == name)) for name, *_ in rows
    }
    times["parse_sites, error with its line"] = (error_wall, error_cpu)
    times["parse_sites, 342-byte alias bomb refused"] = (bomb_wall, bomb_cpu)
    base_wall, base_cpu = times["yaml.safe_load (baseline)"]
    print(f"{'':44} {'wall ms':>9} {'vs baseline':>12} {'CPU ms':>9} {'vs baseline':>12}")
    for name, (wall, cpu) in times.items():
        print(f"{name:44} {wall * 1000:9.1f} {wall / base_wall:11.3f}x {cpu * 1000:9.1f} {cpu / base_cpu:11.3f}x")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average at the end: {load:.1f}")
    verdict = "met" if times["parse_sites"][0] <= GOAL_S else "missed"
    print(f"goal: {args.sites:,} sites in <= {GOAL_S:g} s: {verdict}")
    print(f"error: {message.splitlines()[-1].strip()[:110]}")
    print(f"bomb: {bomb_message.splitlines()[-1].strip()[:110]}")


if __name__ == "__main__":
    main()
