"""Mosquitto configuration for a fleet: one MQTT identity per site, ACLs, password files.

Every site connects to every broker as itself: its MQTT username is its site
name (in the ``sites.yaml`` a site's processes use, every broker entry names
that site as ``username``, with its own ``password_env``). The ACL a broker
gets (:func:`acl_text`) then says, with ``pattern`` rules on the username
(``%u``), that a spoke may

* publish only its own data and dead letters: ``spanedge/v1/+/+/<site>``
  (``spanedge/v1/<app>/<stream>/<site>`` and ``spanedge/v1/<app>/dlq/<site>``),
  which include the output of the replicas placement runs there for other
  sites (their envelopes name those sites; the hub ingest checks them against
  the plans, :mod:`hub.ingest.publishers`);
* publish its heartbeat ``spanedge/v1/control/<site>/heartbeat``, and publish
  and read its latency probe ``spanedge/v1/control/<site>/probe``;
* read only its own plan ``spanedge/v1/control/<site>/plan`` and its own model
  versions ``spanedge/v1/control/<site>/model/<app>/<model>``.

Hub sites read and write every topic (they read every site's data and publish
the plans, dead letters, hub sink results and their presence
``spanedge/v1/control/<hub>/presence``, :mod:`spanedge.wire.presence`). No
spoke may write a hub's presence: the site name ``presence`` is reserved, so
no spoke's data topics ``spanedge/v1/+/+/<site>`` include it. On the broker of a spoke site,
that site may read and write everything when it has the broker to itself (its
sensors and local sinks), or, on a broker shared with other sites, its stream
topics and the ``local_topics`` its local MQTT sinks publish to; every spoke may
read the stream topics of a broker's sites, because placement may run a site's
``@local`` operators on another spoke. Observers (monitoring, the simulator)
read everything and write nothing.

The password file (:func:`password_file`) holds Mosquitto's PBKDF2-SHA512
hashes (the ``$7$`` format of ``mosquitto_passwd``). Nothing here does I/O.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Collection, Iterable, Mapping

from spanedge import topics
from spanedge.errors import InvalidSites
from spanedge.names import check_site_name
from spanedge.sites import Sites, Tier

#: Per-client queue limit written into every broker config the project writes.
#: Mosquitto's default of 1000 silently drops QoS 1 messages of slow clients.
MAX_QUEUED_MESSAGES = 1_000_000
#: QoS 1 messages in flight per client; Mosquitto's default of 20 caps a client's throughput.
MAX_INFLIGHT_MESSAGES = 100
#: Seconds between two saves of a broker's sessions and queued messages to disk (and on every stop).
AUTOSAVE_INTERVAL = 10
#: PBKDF2 iterations of a password hash: the default of ``mosquitto_passwd``.
HASH_ITERATIONS = 101
_SALT_BYTES = 12


def spoke_patterns() -> list[str]:
    """The ``pattern`` lines that bind a spoke's topics to its username (``%u``)."""
    return [
        f"pattern write {topics.PREFIX}/+/+/%u",
        f"pattern write {topics.control('%u', 'heartbeat')}",
        f"pattern readwrite {topics.control('%u', 'probe')}",
        f"pattern read {topics.control('%u', 'plan')}",
        f"pattern read {topics.PREFIX}/control/%u/model/#",
    ]


def spoke_rules(site: str) -> list[str]:
    """The ``topic`` lines of :func:`spoke_patterns` written out for one spoke (under its ``user`` line)."""
    return [line.replace("pattern ", "topic ", 1).replace("%u", site) for line in spoke_patterns()]


def _check_names(sites: Sites, observers: Iterable[str]) -> None:
    """Check every name as an MQTT identity: the rule and reserved names of :func:`spanedge.names.check_site_name`."""
    for name in sites.sites:
        check_site_name(name, "sites.yaml")
    for observer in observers:
        check_site_name(observer, "observer name")
        if observer in sites.sites:
            msg = f"observer {observer!r} has the name of a site; give the observer another name"
            raise InvalidSites(msg)


def broker_groups(sites: Sites) -> dict[str, list[str]]:
    """The sites that share each broker, by broker address (``host:port``), in ``sites.yaml`` order."""
    groups: dict[str, list[str]] = {}
    for name, site in sites.sites.items():
        broker = site.mqtt()
        groups.setdefault(f"{broker.host}:{broker.port}", []).append(name)
    return groups


def acl_text(
    sites: Sites,
    local: Collection[str],
    *,
    observers: Iterable[str] = (),
    local_topics: Iterable[str] = (),
    per_site: bool = False,
    revoked: Collection[str] = (),
) -> str:
    """The Mosquitto ``acl_file`` of the broker that ``local`` sites use as their own.

    Args:
        sites: the fleet.
        local: the sites whose broker this is (one site, or every site sharing the broker).
        observers: read-only users (monitoring): they read every topic and ``$SYS``.
        local_topics: topics the spokes' local MQTT sinks publish to, on a broker shared by several sites.
        per_site: write each spoke's own topics under its ``user`` line instead of as ``pattern`` lines,
            so that a site left out of the file (``revoked``) may touch no topic at all.
        revoked: spokes that get no rule (only with ``per_site``: patterns would still apply to them).

    Raises:
        InvalidSites: a site or observer name cannot be an MQTT identity, or ``local`` names an unknown site.
    """
    observers = list(observers)
    _check_names(sites, observers)
    for name in local:
        sites.site(name)
    if revoked and not per_site:
        msg = "revoked sites need per_site rules: pattern lines would still give them their topics"
        raise ValueError(msg)
    spokes = [s for s in sites.sites.values() if s.tier is Tier.SPOKE and s.name not in revoked]
    local_spokes = [s for s in spokes if s.name in local]
    owned = len(local) == 1 and len(local_spokes) == 1
    stream_filters = sorted({b.topic for s in local_spokes for b in s.streams.values() if b.topic})
    lines = [
        f"# Mosquitto ACL generated by {'the hub (--broker-dir)' if per_site else repr('spanedge broker-config')} "
        "from sites.yaml.",
        f"# Broker of: {', '.join(local)}. Each site connects with its site name as username.",
        "",
    ]
    if not per_site:
        lines += [
            "# every spoke: its own data, dead letters, heartbeat and probe; its own plan only",
            *spoke_patterns(),
        ]
    if revoked:
        lines += [f"# revoked, so without any rule: {', '.join(sorted(revoked))}"]
    for hub in (s for s in sites.sites.values() if s.tier is Tier.HUB):
        lines += ["", f"# hub {hub.name}: every topic", f"user {hub.name}", "topic readwrite #", "topic read $SYS/#"]
    for spoke in spokes:
        rules: list[str] = spoke_rules(spoke.name) if per_site else []
        if owned and spoke.name in local:
            rules += ["topic readwrite #"]
        elif spoke.name in local:
            rules += [f"topic readwrite {t}" for t in sorted({b.topic for b in spoke.streams.values() if b.topic})]
            rules += [f"topic write {t}" for t in sorted(set(local_topics))]
        if not (owned and spoke.name in local):
            rules += [f"topic read {t}" for t in stream_filters if f"topic readwrite {t}" not in rules]
        if rules:
            lines += ["", f"# spoke {spoke.name} on this broker", f"user {spoke.name}", *rules]
    for observer in observers:
        lines += [
            "",
            f"# observer {observer}: reads everything",
            f"user {observer}",
            "topic read #",
            "topic read $SYS/#",
        ]
    return "\n".join(lines) + "\n"


def password_hash(password: str, salt: bytes | None = None, iterations: int = HASH_ITERATIONS) -> str:
    """A Mosquitto password hash: ``$7$<iterations>$<salt>$<PBKDF2-HMAC-SHA512>``, base64 as ``mosquitto_passwd``.

    Raises:
        ValueError: the password is empty or ``iterations`` is below 1.
    """
    if not password:
        msg = "an MQTT password must not be empty"
        raise ValueError(msg)
    if iterations < 1:
        msg = f"iterations must be at least 1, got {iterations}"
        raise ValueError(msg)
    salt = secrets.token_bytes(_SALT_BYTES) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)
    return f"$7${iterations}${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def password_file(credentials: Mapping[str, str]) -> str:
    """The Mosquitto ``password_file`` of ``{username: password}`` (hashed, one user a line).

    Raises:
        ValueError: a username is not a valid name or a password is empty.
    """
    lines = []
    for user, password in sorted(credentials.items()):
        check_site_name(user, "MQTT username")
        lines.append(f"{user}:{password_hash(password)}")
    return "\n".join(lines) + "\n"


def new_password() -> str:
    """A fresh random MQTT password (32 bytes of randomness, URL-safe text)."""
    return secrets.token_urlsafe(32)


def identities(sites: Sites, observers: Iterable[str] = ()) -> list[str]:
    """Every MQTT username of the fleet: the sites, then the observers.

    Raises:
        InvalidSites: a name cannot be an MQTT identity.
    """
    observers = list(observers)
    _check_names(sites, observers)
    return [*sites.sites, *observers]


def mosquitto_conf(
    *,
    port: int,
    acl_file: str,
    password_file: str | None,
    cafile: str,
    certfile: str,
    keyfile: str,
    bind: str | None = None,
    crlfile: str | None = None,
    certificate_identity: bool = False,
    persistence_location: str | None = None,
    user: str | None = None,
) -> str:
    """A ``mosquitto.conf``: one TLS listener, no anonymous access, the ACL, the queue limits set deliberately.

    Args:
        port: the listener's port.
        acl_file: the ACL (:func:`acl_text`).
        password_file: the password file of the per-site identities; ``None`` with ``certificate_identity``.
        cafile: the CA certificate clients' certificates are checked against.
        certfile: the broker's server certificate.
        keyfile: the broker's private key.
        bind: the address or host name the listener binds to; every interface if ``None``.
        crlfile: the CA's certificate revocation list (clients revoked are refused).
        certificate_identity: each client presents a certificate of the CA and its common name is its
            username (``require_certificate`` and ``use_identity_as_username``); no password is asked.
        persistence_location: the directory of the broker's sessions and queued messages (persistence on);
            ``None`` leaves persistence to the caller.
        user: the account a broker started as root switches to (Mosquitto's default: ``mosquitto``).

    Raises:
        ValueError: neither a password file nor certificate identities.
    """
    if password_file is None and not certificate_identity:
        msg = "a broker config needs the password file, or certificate identities (certificate_identity=True)"
        raise ValueError(msg)
    where = f" {bind}" if bind else ""
    lines = [f"listener {port}{where}", f"cafile {cafile}", f"certfile {certfile}", f"keyfile {keyfile}"]
    if crlfile:
        lines.append(f"crlfile {crlfile}")
    if certificate_identity:
        lines += ["require_certificate true", "use_identity_as_username true"]
    lines.append("allow_anonymous false")
    if password_file is not None and not certificate_identity:
        lines.append(f"password_file {password_file}")
    lines += [
        f"acl_file {acl_file}",
        f"max_queued_messages {MAX_QUEUED_MESSAGES}",
        "max_queued_bytes 0",
        f"max_inflight_messages {MAX_INFLIGHT_MESSAGES}",
    ]
    if persistence_location is not None:
        location = persistence_location.rstrip("/") + "/"
        lines += ["persistence true", f"persistence_location {location}", f"autosave_interval {AUTOSAVE_INTERVAL}"]
    if user:
        lines.append(f"user {user}")
    return "\n".join(lines) + "\n"
