"""Which site may publish another site's records to the hub: the one a plan runs that site's replica at.

Placement may run a site's replicas on another spoke (site A's ``@local``
window offloaded to spoke B), and a handover moves them. B publishes what it
computes for A's replicas on its own data topic,
``spanedge/v1/<app>/<stream>/B`` (the only data topics the broker lets it
write), with ``site`` = A in the envelope. The hub ingest accepts such a
batch only when a plan in force assigns the replica ``<stream>@A`` to B, or
names B as its old or new owner in a handover, or the plan version it
replaced assigned it to B (the old owner's outbox may still hold what it
computed then), or runs a part of it split by key (the replica, or one of
the record-level replicas after it that run with the part). Anything else is refused as before, so a spoke can neither
inject nor suppress (by sequence number) the data of a site it was not
assigned.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from spanedge.errors import InvalidName
from spanedge.logsafe import escaped
from spanedge.names import check_site_name
from spanedge.plan import Plan, replica_id
from spanedge.wire.batch import Batch, Record, decode_batch

log = logging.getLogger(__name__)

#: ``may_publish(app, topic_site, envelope_site, stream)``: may ``topic_site`` publish ``envelope_site``'s ``stream``?
PublishPolicy = Callable[[str, str, str, str], bool]


def assigned(plans: Iterable[Plan], publisher: str, group: str, stream: str) -> bool:
    """Whether one of ``plans`` runs ``group``'s replica producing ``stream`` at ``publisher``.

    Args:
        plans: the plans of one app (the one in force, and the one it replaced).
        publisher: the site of the topic the batch came on.
        group: the site the batch's envelope names (the replica's source site).
        stream: the stream of the batch (the operator producing it).
    """
    replica = replica_id(stream, group)
    for plan in plans:
        for a in plan.assignments:
            if a.replica == replica and a.group == group and a.site == publisher:
                return True
        for h in plan.handovers:
            if h.replica == replica and publisher in (h.source, h.target):
                return True
        # a part of a replica split by key, or one handed over by key, sends its results and its chain's
        ends = [(p.replica, p.site) for p in plan.parts] + [(h.replica, h.source) for h in plan.handovers if h.keyed]
        for split, site in ends:
            if site == publisher and (split == replica or replica in plan.part_chain(split)[1]):
                return True
    return False


def own_sites_only(app: str, topic_site: str, envelope_site: str, stream: str) -> bool:
    """The policy without plans: a site publishes only records of its own."""
    return topic_site == envelope_site


def from_plans(plans_of: Callable[[str], Iterable[Plan]]) -> PublishPolicy:
    """The policy over the plans ``plans_of(app)`` returns (nothing for an unknown app)."""

    def may_publish(app: str, topic_site: str, envelope_site: str, stream: str) -> bool:
        return topic_site == envelope_site or assigned(plans_of(app), topic_site, envelope_site, stream)

    return may_publish


class SiteMismatch(ValueError):
    """A batch carries records of a site its publisher may not publish for."""


def check_batch(topic: str, parsed: tuple[str, str, str], payload: bytes, may_publish: PublishPolicy) -> Batch:
    """Decode the batch ``payload`` that came on data ``topic`` (parsed as app, stream, site) and check it.

    A site publishes its own records, and those of the replicas its plans run
    there for other sites (``may_publish``).

    Returns:
        ``(app, records, complete)``.

    Raises:
        SiteMismatch: records of another site the publisher may not carry.
        ValueError: a malformed batch, or one naming another app than its topic.
    """
    topic_app, topic_stream, topic_site = parsed
    batch = decode_batch(payload)
    app, records = batch.app, batch.records
    if app != topic_app:
        msg = f"batch says app {app!r} but was published on {topic}"
        raise ValueError(msg)
    other = next((r for r in records if r.site != topic_site), None)
    if other is not None and not _may_carry(may_publish, app, topic_stream, topic_site, other):
        msg = (
            f"batch on {topic} carries records of site {other.site!r}, stream {other.stream!r}; "
            f"a site may publish only its own and those of the replicas its plans assign it"
        )
        raise SiteMismatch(msg)
    return batch


def _may_carry(may_publish: PublishPolicy, app: str, topic_stream: str, topic_site: str, record: Record) -> bool:
    """Whether ``topic_site`` may publish ``record`` (of another site) on its topic of ``topic_stream``."""
    if record.stream != topic_stream:
        return False
    try:
        check_site_name(record.site, "envelope")
    except InvalidName:
        return False
    try:
        return bool(may_publish(app, topic_site, record.site, record.stream))
    except Exception:
        log.exception(
            "ingest: the publish policy failed on app %s, site %s; refusing the batch",
            escaped(app),
            escaped(topic_site),
        )
        return False
