"""Signed, retained plan messages: one per site, holding every app that runs there.

Each message goes to ``spanedge/v1/control/<site>/plan`` on the hub broker,
retained and at QoS 1, so an agent that (re)connects gets its current plans at
once. The payload (:class:`spanedge.wire.plan.PlanPayload`) is signed with the hub's Ed25519 key
(:mod:`spanedge.signing`)::

    {"site": ..., "version": <int, strictly increasing per site>, "issued_at": <unix s>,
     "expires_at": <issued_at + the plan TTL>,
     "apps": [{"app", "plan": Plan.to_dict(), "source", "source_sha256"}, ...]}

Versions are ``max(time_ns, last + 1)`` and the last one per site is persisted
(``<state dir>/distribution.json``) before any message leaves, so they keep
increasing across hub restarts and clock steps backwards: the clock only lets
a version jump ahead, never go back or repeat. A message expires
:data:`PLAN_TTL_S` after it is issued (``spanedge hub --plan-ttl``);
:meth:`PlanDistributor.refresh`, run with the hub's periodic checks, re-issues
each site's message, with a new version and the same apps, once half its TTL
is over.

A site whose part of the plans did not change since the message the broker
acknowledged last (:func:`site_view`: what its agent builds its pipelines
from) gets no new message: its retained one is still what it needs, and its
agent is spared a rebuild. An unchanged redeploy or re-plan thus publishes
nothing; the first publish of a hub process sends every site's message.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
import orjson

from hub.control.state import StateStore
from spanedge import topics
from spanedge.loader import source_hash
from spanedge.logsafe import escaped
from spanedge.plan import Plan, split_replica
from spanedge.signing import PlanSigningKey, sign_plan
from spanedge.sites import Broker
from spanedge.wire.plan import PlanApp, PlanPayload

log = logging.getLogger(__name__)

PLAN_TTL_S = 7 * 86400.0
"""How long a plan message is valid after it is issued, by default: seven days."""


class Publisher(Protocol):
    """Something that publishes retained QoS 1 messages and says whether the broker acknowledged them."""

    def publish_all(self, messages: Sequence[tuple[str, bytes]]) -> list[bool]:
        """Publish every ``(topic, payload)``, then wait for the acknowledgements together.

        Returns, per message, True once acknowledged, False if still pending after a timeout.
        """
        ...


@dataclass(frozen=True)
class SiteApp:
    """One app's entry in a site's plan message."""

    plan: Plan
    source: str

    def entry(self) -> PlanApp:
        """The entry as it goes into the signed payload."""
        return PlanApp(
            app=self.plan.app, plan=self.plan.to_dict(), source=self.source, source_sha256=source_hash(self.source)
        )


def sites_of(plan: Plan) -> set[str]:
    """Sites where ``plan`` puts at least one replica, or that finish (or recompute) a replica handed over."""
    recoverers = {h.recoverer for h in plan.handovers if h.recoverer is not None}
    return (
        {a.site for a in plan.assignments}
        | {h.source for h in plan.handovers}
        | {p.site for p in plan.parts}
        | recoverers
    )


@dataclass
class _Index:
    """One plan's flows, assignments and handovers by site and replica, to cut each site's view without scanning the plan."""

    into: dict[str, list[tuple[str, str]]] = field(default_factory=lambda: defaultdict(list))
    out_of: dict[str, list[tuple[str, str]]] = field(default_factory=lambda: defaultdict(list))
    on_site: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    placed: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))  # replica: assignment positions
    moves_at: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))  # site: handover positions
    moves_of: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))  # replica: handover positions
    from_hub_at: dict[float, list[int]] = field(default_factory=lambda: defaultdict(list))  # switch: positions
    parts_at: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    @classmethod
    def of(cls, plan: Plan) -> _Index:
        index = cls()
        for f in plan.flows:
            index.into[f.dst].append((f.src, f.dst))
            index.out_of[f.src].append((f.src, f.dst))
        for i, a in enumerate(plan.assignments):
            index.on_site[a.site].add(a.replica)
            index.placed[a.replica].append(i)
        for i, h in enumerate(plan.handovers):
            for site in {h.source, h.target, h.recoverer}:
                if site is not None:
                    index.moves_at[site].append(i)
            index.moves_of[h.replica].append(i)
            if h.source == plan.hub:
                index.from_hub_at[h.switch_at].append(i)
        for p in plan.parts:
            index.parts_at[p.site].add(p.replica)
        return index


def site_view(plan: Plan, site: str, index: _Index | None = None) -> tuple[Any, ...]:
    """The part of ``plan`` the agent of ``site`` acts on, as comparable data.

    That is what :func:`spanedge.runtime.build.from_plan` and the agent's
    handover bookkeeping (``edge_agent.apps``) read: the hub, the replicas the
    site runs or hands over, the flows into them and out of them and of the
    sources feeding them, where each end of those flows runs and since when,
    the handovers of those replicas (with the parts it recomputes for a
    gone old owner), and whether the version runs on trial. Estimated
    rates, totals, the solver's figures, the reasons and the plan version
    are left out: the agent does nothing with them.
    """
    index = index or _Index.of(plan)
    moves = [plan.handovers[i] for i in index.moves_at.get(site, ())]
    local = set(index.on_site.get(site, ())) | {h.replica for h in moves}
    for replica in set(index.parts_at.get(site, ())) | {h.replica for h in moves if h.keyed and h.source == site}:
        local.add(replica)
        local.update(*plan.part_chain(replica))  # a part's chain runs here too
    feeders = {src for r in local for src, _ in index.into.get(r, ())}
    flows = {f for r in local for f in index.into.get(r, ())}
    flows |= {f for r in local | feeders for f in index.out_of.get(r, ())}
    ends = local | {end for f in flows for end in f}
    positions = sorted(i for r in ends for i in index.placed.get(r, ()))
    assignments = [plan.assignments[i] for i in positions]
    placed = tuple((a.replica, a.operator, a.group, a.site, a.since) for a in assignments)
    # the handovers of those replicas, and every move from the hub at their switch times (they set how long
    # a source keeps feeding the hub: spanedge.runtime.build.hub_feeds)
    of_ends = {i for r in ends for i in index.moves_of.get(r, ())}
    switches = {plan.handovers[i].switch_at for i in of_ends if plan.handovers[i].source == plan.hub}
    chosen = sorted(of_ends | {i for at in switches for i in index.from_hub_at.get(at, ())})
    handovers = tuple(
        (h.replica, h.source, h.target, h.switch_at, h.epoch, h.recover_from, h.recoverer)
        for h in (plan.handovers[i] for i in chosen)
    )
    view: tuple[Any, ...] = (plan.app, plan.hub, plan.app_file, placed, tuple(sorted(flows)), handovers)
    if plan.parts or any(h.keyed for h in plan.handovers):
        parts = tuple((p.replica, p.site, p.keys_from, p.keys_before, p.since) for p in plan.parts if p.replica in ends)
        keys = tuple((h.replica, h.keys_from, h.keys_before) for h in plan.handovers if h.replica in ends)
        view = (*view, parts, keys)
    return (*view, "trial") if plan.trial else view


def view_key(plan: Plan, sha: str) -> tuple[Any, ...]:
    """Everything :func:`site_view` reads of ``plan``, with its source's hash: equal keys give equal views."""
    return (
        plan.app,
        plan.hub,
        plan.app_file,
        sha,
        tuple((a.replica, a.operator, a.group, a.site, a.since) for a in plan.assignments),
        tuple((f.src, f.dst) for f in plan.flows),
        plan.handovers,
        plan.parts,
        plan.trial,
    )


class _AppViews:
    """One app's entry, per site, in the digest of the site's views, worked out when first asked for.

    Kept from one publish to the next while the app's :func:`view_key` stays the
    same, so a re-plan that moves nothing (a same-app redeploy, most drift
    re-plans) cuts no view again: at 1,000 sites that was a view and its
    ``repr`` per site.
    """

    def __init__(self, plan: Plan, sha: str, key: tuple[Any, ...]) -> None:
        self.plan, self.sha, self.key = plan, sha, key
        self._index: _Index | None = None
        self._entries: dict[str, str] = {}

    def entry(self, site: str) -> str:
        """``repr((app, source hash, site_view(plan, site)))``."""
        found = self._entries.get(site)
        if found is None:
            if self._index is None:
                self._index = _Index.of(self.plan)
            view = site_view(self.plan, site, self._index)
            found = self._entries[site] = repr((self.plan.app, self.sha, view))
        return found


def views_digest(views: Iterable[_AppViews], site: str) -> str:
    """The digest of ``site``'s views of the apps ``views`` (by app name): what its agent acts on."""
    entries = [v.entry(site) for v in sorted(views, key=lambda v: (v.plan.app, v.sha))]
    return hashlib.sha256(f"[{', '.join(entries)}]".encode()).hexdigest()  # the repr of the list of views


class PlanDistributor:
    """Builds, signs and publishes per-site plan messages."""

    def __init__(
        self,
        publisher: Publisher,
        key: PlanSigningKey,
        store: StateStore | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
        ttl_s: float = PLAN_TTL_S,
    ) -> None:
        """Publish through ``publisher``, signing with the hub's ``key``; persist versions in ``store``.

        ``clock_ns`` is the wall clock (issue times, and a floor for versions); a message expires ``ttl_s``
        after it is issued.
        """
        self._publisher = publisher
        self._key = key
        self._store = store
        self._clock_ns = clock_ns
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        #: the leader epoch every plan carries (``Plan.hub_epoch``; 0 without high availability)
        self.epoch = 0
        self._versions: dict[str, int] = store.load_versions() if store is not None else {}
        # per site, the digest of the views in the last message the broker acknowledged
        self._delivered: dict[str, str] = {}
        # per site, the last message sent: when it was issued, the digest of its views and its entries
        self._sent: dict[str, tuple[float, str, list[PlanApp]]] = {}
        # per app, its views of the sites, while its plan gives the same ones
        self._views: dict[str, _AppViews] = {}
        #: the ``sites.yaml`` entry of a site as the hub knows it now (None: unknown), for a plan's ``peers``
        self.site_entry: Callable[[str], dict[str, Any] | None] | None = None
        #: given the deployed apps before their plans go out (the apps' model versions go first: hub.models)
        self.before_send: Callable[[Mapping[str, SiteApp]], object] | None = None

    @property
    def versions(self) -> dict[str, int]:
        """The last version published per site."""
        with self._lock:
            return dict(self._versions)

    def _next_version(self, site: str) -> int:
        version = max(self._clock_ns(), self._versions.get(site, 0) + 1)
        self._versions[site] = version
        return version

    def message(self, site: str, apps: Iterable[SiteApp], version: int) -> bytes:
        """The signed plan message of ``site`` at ``version``, issued now."""
        return self._signed(site, [a.entry() for a in apps], version, self._clock_ns() / 1e9)

    def _signed(self, site: str, entries: list[PlanApp], version: int, issued_at: float) -> bytes:
        apps = sorted(entries, key=lambda e: e.app)
        if self.epoch:
            apps = [msgspec.structs.replace(e, plan={**e.plan, "hub_epoch": self.epoch}) for e in apps]
        payload = PlanPayload(
            site=site,
            version=version,
            issued_at=issued_at,
            expires_at=issued_at + self.ttl_s,
            apps=apps,
            peers=self._peers(site, apps),
        )
        return sign_plan(payload, self._key)

    def _peers(self, site: str, entries: list[PlanApp]) -> dict[str, dict[str, Any]]:
        """The entries of the other sites whose replicas ``site`` runs: its agent's sites.yaml may predate them."""
        if self.site_entry is None:
            return {}
        homes = set()
        for e in entries:
            for a in e.plan.get("assignments", ()):
                home = split_replica(a["replica"])[1]
                if a["site"] == site and home is not None and home != site:
                    homes.add(home)
        found = {home: self.site_entry(home) for home in sorted(homes)}
        return {home: entry for home, entry in found.items() if entry is not None}

    def publish(self, apps: Mapping[str, SiteApp], sites: Iterable[str]) -> dict[str, str]:
        """Publish the message of every site in ``sites`` whose part changed, from the full set of deployed ``apps``.

        A site's message holds every app with a replica there; a site with none
        gets a message with an empty ``apps`` list, so its agent stops them. A
        site whose :func:`site_view` of every app is what the broker last
        acknowledged for it is left out (``"unchanged"``): its retained
        message already carries it.

        Returns:
            ``{site: "published" | "pending" | "unchanged"}``; pending messages are
            queued by the MQTT client and sent when the broker is reachable again
            (and sent anew by the next publish that concerns the site).
        """
        result: dict[str, str] = {}
        if self.before_send is not None:
            try:
                self.before_send(apps)
            except Exception:
                log.exception("sending the apps' model versions before their plans failed")
        with self._lock:
            # each app's entry, sites and views once, not once per site
            self._views = {name: self._views_of(name, a) for name, a in apps.items()}
            prepared = [(sites_of(a.plan), a, self._views[name]) for name, a in apps.items()]
            entries: dict[str, PlanApp] = {}
            todo = []
            for site in sorted(set(sites)):
                mine = [(a, views) for where, a, views in prepared if site in where]
                digest = views_digest((views for _, views in mine), site)
                if self._delivered.get(site) == digest:
                    result[site] = "unchanged"
                    continue
                for a, _ in mine:
                    if a.plan.app not in entries:
                        entries[a.plan.app] = a.entry()
                todo.append((site, digest, [entries[a.plan.app] for a, _ in mine]))
            self._send(todo, result)
            unchanged = len(result) - len(todo)
            if unchanged:
                log.info("plan messages of %d sites unchanged: not sent again", unchanged)
        return result

    def _views_of(self, name: str, app: SiteApp) -> _AppViews:
        """The views of app ``name``: those of the last publish if its plan gives the same ones (:func:`view_key`)."""
        sha = source_hash(app.source)
        key = view_key(app.plan, sha)
        known = self._views.get(name)
        return known if known is not None and known.key == key else _AppViews(app.plan, sha, key)

    def refresh(self) -> dict[str, str]:
        """Re-issue, with a new version, each site's last message once half its TTL is over.

        The apps are unchanged; the new message carries a later expiry.

        Returns:
            ``{site: "published" | "pending"}`` of the messages re-issued.
        """
        result: dict[str, str] = {}
        now = self._clock_ns() / 1e9
        with self._lock:
            due = [
                (site, digest, entries)
                for site, (issued_at, digest, entries) in sorted(self._sent.items())
                if now - issued_at >= self.ttl_s / 2
            ]
            if due:
                log.info("re-issuing the plan messages of %d sites before they expire", len(due))
                self._send(due, result)
        return result

    def _send(self, todo: list[tuple[str, str, list[PlanApp]]], result: dict[str, str]) -> None:
        """Sign a message per ``(site, digest, entries)`` at the next version, persist the versions, publish."""
        issued_at = self._clock_ns() / 1e9
        messages, described = [], []
        for site, digest, mine_entries in todo:
            version = self._next_version(site)
            messages.append((topics.control(site, "plan"), self._signed(site, mine_entries, version, issued_at)))
            names = ", ".join(e.app for e in mine_entries) or "no apps"
            described.append((site, digest, version, names))
            self._sent[site] = (issued_at, digest, mine_entries)
        if self._store is not None and messages:
            self._store.save_versions(self._versions)  # before any message leaves
        # one round of acknowledgements for all sites, not one round trip per site
        acked = self._publisher.publish_all(messages) if messages else []
        for (site, digest, version, names), ok in zip(described, acked, strict=True):
            result[site] = "published" if ok else "pending"
            if ok:
                self._delivered[site] = digest
            else:
                self._delivered.pop(site, None)
            log.info("plan message %d for site %s (%s): %s", version, site, names, result[site])


class MqttControl:
    """The hub's control connection to its broker: publishes plans, receives heartbeats.

    A paho-mqtt client on its own network thread; it reconnects by itself and
    sends QoS 1 messages queued while the broker was unreachable.
    """

    def __init__(
        self,
        broker: Broker,
        *,
        client_id: str = "spanedge-hub-control",
        on_heartbeat: Callable[[str, bytes], object] | None = None,
        ack_timeout: float = 5.0,
    ) -> None:
        """Prepare a client for ``broker``; ``on_heartbeat(site, payload)`` gets every heartbeat."""
        from spanedge.mqtt import HUB_DISTRIBUTION, make_client

        self.broker = broker
        self._ack_timeout = ack_timeout
        self._on_heartbeat = on_heartbeat
        self._connected = threading.Event()
        self._stopping = False
        self._client = make_client(broker, client_id, HUB_DISTRIBUTION)
        self._client.on_connect = self._handle_connect
        self._client.on_disconnect = self._handle_disconnect
        self._client.on_message = self._handle_message
        self._client.on_subscribe = self._handle_subscribe

    @property
    def connected(self) -> bool:
        """True while connected to the broker and, with a heartbeat handler, subscribed to heartbeats."""
        return self._connected.is_set()

    def _handle_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        if getattr(reason, "is_failure", False):
            log.warning("hub broker %s refused the connection: %s", self.broker.url, reason)
            return
        log.info("connected to hub broker %s", self.broker.url)
        if self._on_heartbeat is None:
            self._connected.set()
            return
        # connected only once the broker has the subscription: a heartbeat sent before it would be lost
        client.subscribe([(topics.control("+", "heartbeat"), 0), (topics.control("+", "probe"), 0)])

    def _handle_subscribe(self, client: Any, userdata: Any, mid: int, reasons: Any, properties: Any) -> None:
        refused = [r for r in reasons if getattr(r, "is_failure", False)]
        if refused:
            log.warning("hub broker %s refused the heartbeat subscription: %s", self.broker.url, refused)
        self._connected.set()

    def _handle_disconnect(self, client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        self._connected.clear()
        if not self._stopping:
            log.warning("disconnected from hub broker %s (%s); reconnecting", self.broker.url, reason)

    def _handle_message(self, client: Any, userdata: Any, message: Any) -> None:
        parts = str(message.topic).split("/")
        if len(parts) == 5 and parts[4] == "probe":
            self._echo_probe(client, str(message.topic), bytes(message.payload))
            return
        if self._on_heartbeat is None or len(parts) != 5 or parts[4] != "heartbeat":
            return
        try:
            self._on_heartbeat(parts[3], bytes(message.payload))
        except Exception:
            log.exception("heartbeat from %s could not be processed", escaped(parts[3]))

    @staticmethod
    def _echo_probe(client: Any, topic: str, payload: bytes) -> None:
        """Answer an agent's probe with the hub clock, so it can estimate its clock offset."""
        try:
            probe = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return
        if isinstance(probe, dict) and "ts" in probe and "hub_ts" not in probe:
            client.publish(topic, orjson.dumps({"hub_ts": time.time(), "echo_ts": probe["ts"]}), qos=0)

    def start(self, timeout: float = 10.0) -> MqttControl:
        """Connect in the background and wait up to ``timeout`` s for the first connection."""
        from spanedge.mqtt import HUB_DISTRIBUTION, connect

        connect(self._client, self.broker, HUB_DISTRIBUTION)
        if not self._connected.wait(timeout):
            log.warning("hub broker %s not reachable yet; plans are queued and sent once it is", self.broker.url)
        return self

    def publish_all(self, messages: Sequence[tuple[str, bytes]]) -> list[bool]:
        """Publish retained QoS 1 messages, then wait up to the ack timeout for all their acknowledgements."""
        infos = [self._client.publish(topic, payload, qos=1, retain=True) for topic, payload in messages]
        deadline = time.monotonic() + self._ack_timeout
        acked = []
        for info in infos:
            try:
                info.wait_for_publish(max(deadline - time.monotonic(), 0.0))
            except (RuntimeError, ValueError):
                acked.append(False)
                continue
            acked.append(bool(info.is_published()))
        return acked

    def stop(self) -> None:
        """Disconnect and stop the network thread."""
        self._stopping = True
        self._client.disconnect()
        self._client.loop_stop()
        self._connected.clear()

    def __enter__(self) -> MqttControl:
        """Start the client."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop the client."""
        self.stop()
