"""The hub's presence: which hub process holds a hub site on its broker, on ``spanedge/v1/control/<hub>/presence``.

A hub publishes it retained at QoS 1: ``"live": true`` when it starts, and
``"live": false`` when it stops (its MQTT will publishes the same record,
marked gone, when it dies without stopping). On the wire it is JSON, ``v``
(the format version) first::

    {"v": 1, "hub_site": "cloud", "instance": "3f9c2a1b", "live": true, "host": "hub-1",
     "pid": 4242, "state_dir": "/var/lib/spanedge/hub", "since": 1700000000.0}

The hub writes and reads it (:mod:`hub.control.presence`); nothing else may
publish it: the broker ACL (:mod:`spanedge.broker_acl`) gives the topic to hub
sites only.
"""

from __future__ import annotations

import datetime as dt

import msgspec

from spanedge.numbers import Finite

VERSION = 1
"""The format version of the presence record, its ``v`` field."""


class Presence(msgspec.Struct, kw_only=True, frozen=True, tag_field="v", tag=VERSION):
    """One hub process and whether it holds its hub site.

    Attributes:
        hub_site: the hub site of ``sites.yaml`` it runs as.
        instance: the hub's instance id, kept in its state directory (:mod:`hub.control.identity`).
        live: True while it runs, False once it stopped or died.
        host: the host name of the machine it runs on.
        pid: its process id there.
        state_dir: its state directory, as an absolute path.
        since: when it claimed the hub site (seconds since the epoch, its clock).
    """

    hub_site: str
    instance: str
    live: bool
    host: str
    pid: int
    state_dir: str
    since: Finite

    def gone(self) -> Presence:
        """The same record, marked gone."""
        return msgspec.structs.replace(self, live=False)

    def same_process(self, other: Presence) -> bool:
        """Whether ``other`` is this record of the same hub process (whatever its ``live``)."""
        return (self.instance, self.host, self.pid, self.since) == (other.instance, other.host, other.pid, other.since)

    def senior_to(self, other: Presence) -> bool:
        """Whether this claim came first: the earlier ``since``, then the smaller instance id."""
        return (self.since, self.instance) < (other.since, other.instance)

    def describe(self) -> str:
        """The record in a sentence: the hub, its instance, host, pid, since when and its state directory."""
        since = dt.datetime.fromtimestamp(self.since, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return (
            f"hub site {self.hub_site!r} instance {self.instance} (pid {self.pid} on host {self.host}, "
            f"live since {since}, state dir {self.state_dir})"
        )


_decoder = msgspec.json.Decoder(Presence)


def encode(presence: Presence) -> bytes:
    """The record as it goes on the wire."""
    return msgspec.json.encode(presence)


def decode(payload: bytes) -> Presence:
    """Read a presence record.

    Raises:
        ValueError: the payload is not a presence record of this format version; the message says what is wrong.
    """
    try:
        return _decoder.decode(payload)
    except msgspec.DecodeError as exc:
        msg = f"not a hub presence record (format v{VERSION}): {exc}"
        raise ValueError(msg) from None
