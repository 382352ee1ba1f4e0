"""One hub per hub site and broker: the hub's retained presence record and its will.

:class:`HubPresence` is how a hub claims its hub site on its broker before it
touches any persistent MQTT session, starts Spark or binds its port:

1. It connects with a clean session, a client id of its own process, and a
   will that marks it gone (:class:`spanedge.wire.presence.Presence`, retained,
   on ``spanedge/v1/control/<hub>/presence``).
2. It subscribes to that topic, and subscribes again: once the second
   subscription is acknowledged, the broker has sent the retained record.
3. If the latest record is another hub's live one, it disconnects (cleanly, so
   its will is not published) and raises :class:`HubAlreadyRunning`. A live
   record of its own instance, host and state directory is its own earlier
   process, killed before the broker published its will: the caller holds
   the state directory's lock (:mod:`hub.control.state_lock`), so that
   process is gone.
4. Otherwise it publishes its own live record, retained, and waits for the
   broker to echo it. Another hub's live record arriving first means both
   started at once and the other was first: it marks itself gone and raises.

While it runs, it answers any other process's record (a loser of a race
marking itself gone, a junior claim) by publishing its own record again, and
does so after every reconnect; a senior claim is logged as an error. On
:meth:`HubPresence.release` it publishes its record marked gone.

This class is the seam standby hubs will build on: a standby would wait in
:meth:`HubPresence.claim` for the live hub's record to turn gone instead of
raising.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spanedge import topics
from spanedge.errors import SpanEdgeError
from spanedge.logsafe import escaped
from spanedge.mqtt import HUB_PRESENCE, connect, make_client
from spanedge.sites import Broker
from spanedge.wire.presence import Presence, decode, encode

log = logging.getLogger(__name__)

#: How long a hub waits for its broker when it claims its hub site.
CLAIM_TIMEOUT_S = 10.0


class HubAlreadyRunning(SpanEdgeError):
    """Another live hub holds this hub site on this broker."""

    def __init__(self, message: str, holder: Presence) -> None:
        """Say what happened; ``holder`` is the other hub's record."""
        super().__init__(message)
        self.holder = holder


def presence_of(hub_site: str, instance: str, state_dir: Path) -> Presence:
    """This process's live record as the hub ``instance`` of ``hub_site`` on ``state_dir``, claimed now."""
    return Presence(
        hub_site=hub_site,
        instance=instance,
        live=True,
        host=socket.gethostname(),
        pid=os.getpid(),
        state_dir=str(Path(state_dir).resolve()),
        since=time.time(),
    )


def holds_site(record: Presence, me: Presence) -> bool:
    """Whether ``record`` is another hub's live claim: live, and neither ``me`` nor ``me``'s own earlier process.

    An earlier process has ``me``'s instance id, host and state directory; it is gone if ``me`` holds the
    state directory's lock.
    """
    if not record.live or record.same_process(me):
        return False
    return (record.instance, record.host, record.state_dir) != (me.instance, me.host, me.state_dir)


class HubPresence:
    """Claims, holds and releases one hub site on its broker for one hub process."""

    def __init__(
        self,
        broker: Broker,
        me: Presence,
        client_id: str,
        *,
        timeout: float = CLAIM_TIMEOUT_S,
        peer: Callable[[Presence], bool] | None = None,
    ) -> None:
        """Prepare the claim of ``me`` on ``broker`` as ``client_id``; nothing connects until :meth:`claim`.

        A record ``peer`` accepts never blocks the claim: a hub of the same high-availability group that
        no longer leads (the lease says who does: :mod:`hub.ha.node`).
        """
        self.peer = peer
        self.broker = broker
        self.me = me
        self.topic = topics.control(me.hub_site, "presence")
        self.timeout = timeout
        self._cond = threading.Condition()
        self._seen: list[tuple[Presence, bool]] = []  # (record, retained) in the order the broker sent them
        self._subscribed = 0
        self._refused: str | None = None
        self._claimed = False
        self._client = make_client(broker, client_id, HUB_PRESENCE, will=(self.topic, encode(me.gone())))
        self._client.on_connect = self._on_connect
        self._client.on_subscribe = self._on_subscribe
        self._client.on_message = self._on_message

    # -- claim and release ---------------------------------------------------------

    def claim(self) -> None:
        """Hold the hub site, or raise naming the hub that holds it.

        Raises:
            HubAlreadyRunning: another live hub holds it.
            SpanEdgeError: the broker refuses the connection or does not pass the record on. A broker that
                cannot be reached is waited for, with a warning every ``timeout`` seconds.
        """
        connect(self._client, self.broker, HUB_PRESENCE)
        with self._cond:
            failed = self._await(lambda: self._subscribed >= 2, "acknowledge the subscription to the presence topic")
            while failed is not None and self._refused is None:  # unreachable: wait for it, as the agents do
                log.warning("%s; still waiting for it (paho retries with backoff)", self._unchecked(failed))
                failed = self._await(lambda: self._subscribed >= 2, "acknowledge the subscription")
            current = self._seen[-1][0] if self._seen else None
            self._seen.clear()
        if failed:
            self._close()
            raise self._unchecked(failed)
        if current is not None and self._blocks(current):
            self._close()
            raise self._taken(current)
        if current is not None and current.live and not current.same_process(self.me):
            log.info(
                "the broker still had this hub's earlier record (its will not published yet): %s", current.describe()
            )
        self._client.publish(self.topic, encode(self.me), qos=1, retain=True)
        with self._cond:
            failed = self._await(lambda: any(self._is_echo(r, kept) for r, kept in self._seen), "pass on its record")
            first = next((i for i, (r, kept) in enumerate(self._seen) if self._is_echo(r, kept)), len(self._seen))
            rival = next((r for r, kept in self._seen[:first] if not kept and self._blocks(r)), None)
            self._claimed = not failed and rival is None
            self._seen.clear()
        if failed:
            self._give_up()
            raise self._unchecked(failed)
        if rival is not None:
            self._give_up()
            raise self._taken(rival)
        log.info("holding hub site %s on broker %s as instance %s", self.me.hub_site, self.broker.url, self.me.instance)

    def release(self) -> None:
        """Mark this hub gone on the broker and disconnect."""
        with self._cond:
            claimed, self._claimed = self._claimed, False
        if claimed:
            self._mark_gone()
        self._close()

    def _give_up(self) -> None:
        """Mark this hub gone (never leave its live record behind) and disconnect."""
        self._mark_gone()
        self._close()

    def _mark_gone(self) -> None:
        info = self._client.publish(self.topic, encode(self.me.gone()), qos=1, retain=True)
        try:
            info.wait_for_publish(2.0)
        except (RuntimeError, ValueError):
            log.warning("the broker did not acknowledge this hub's record marked gone")

    @property
    def claimed(self) -> bool:
        """True while this hub holds its hub site."""
        return self._claimed

    # -- decisions -----------------------------------------------------------------

    def _blocks(self, record: Presence) -> bool:
        return holds_site(record, self.me) and not (self.peer is not None and self.peer(record))

    def _is_echo(self, record: Presence, retained: bool) -> bool:
        return not retained and record.live and record.same_process(self.me)

    def _taken(self, holder: Presence) -> HubAlreadyRunning:
        msg = (
            f"another hub holds hub site {self.me.hub_site!r} on broker {self.broker.url}: {holder.describe()}. "
            f"Stop that hub before starting this one, or start this one as another --hub-site or against another "
            f"broker; a hub that died is marked gone by the broker within {int(HUB_PRESENCE.keepalive * 1.5)} s"
        )
        return HubAlreadyRunning(msg, holder)

    def _await(self, done: Callable[[], bool], what: str) -> str | None:
        """Wait (holding the condition) until ``done()``; None, or why the broker did not ``what``."""
        deadline = time.monotonic() + self.timeout
        while not done() and self._refused is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return f"it did not {what} within {self.timeout:.0f} s"
            self._cond.wait(left)
        return self._refused

    def _unchecked(self, why: str) -> SpanEdgeError:
        msg = (
            f"cannot check on broker {self.broker.url} that no other hub holds hub site {self.me.hub_site!r}: "
            f"{why}; start the broker (or fix its address and credentials in sites.yaml) and make sure its ACL "
            f"lets {self.me.hub_site} read and write {self.topic} (spanedge broker-config)"
        )
        return SpanEdgeError(msg)

    def _close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()

    # -- MQTT callbacks (network thread) ---------------------------------------------

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if getattr(reason, "is_failure", False):
            with self._cond:
                self._refused = f"the broker refused the connection ({reason})"
                self._cond.notify_all()
            return
        client.subscribe(self.topic, qos=1)
        client.subscribe(self.topic, qos=1)  # its acknowledgement comes after the first one's retained record
        if self._claimed:  # a reconnect: the broker may have published the will meanwhile
            client.publish(self.topic, encode(self.me), qos=1, retain=True)

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, reasons: Any, props: Any) -> None:
        with self._cond:
            if any(getattr(r, "is_failure", False) for r in reasons):
                self._refused = f"the broker refused the subscription to {self.topic}"
            self._subscribed += 1
            self._cond.notify_all()

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        try:
            record = decode(bytes(message.payload))
        except ValueError as exc:
            log.warning("ignoring a message on %s: %s", escaped(message.topic), escaped(exc))
            return
        with self._cond:
            claimed = self._claimed
            if not claimed:
                self._seen.append((record, bool(message.retain)))
                self._cond.notify_all()
        if not claimed or record.same_process(self.me):
            return
        if self._blocks(record) and record.senior_to(self.me):
            log.error(
                "another hub claims this hub site, and claimed it first: %s; stop one of them",
                escaped(record.describe()),
            )
            return
        if not message.retain:  # a retained record comes after a (re)subscription: this hub's own follows it
            log.warning(
                "another hub wrote this hub site's presence (%s); publishing this hub's again",
                escaped(record.describe()),
            )
            client.publish(self.topic, encode(self.me), qos=1, retain=True)
