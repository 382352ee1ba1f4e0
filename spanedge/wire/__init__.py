"""The messages that cross a process boundary, each defined once, with its format version.

* :mod:`spanedge.wire.batch`: the edge→hub batch of records (agent outbox → hub ingest);
* :mod:`spanedge.wire.plan`: the signed plan message (hub → agents);
* :mod:`spanedge.wire.heartbeat`: the heartbeat (agents → hub);
* :mod:`spanedge.wire.log_line`: a line of the hub's ingest log (ingest → Spark).

Writers and readers both use these definitions; a reader refuses a malformed
message with a ``ValueError`` that says what is wrong.
"""
