"""The external stores the hub's sinks write to: PostgreSQL tables and Parquet datasets.

Each is called by :class:`hub.engine.sinks.BatchSink` with one micro-batch
at a time and keeps it exactly once across hub restarts: PostgreSQL records
the batch's id in the batch's own transaction (:mod:`~hub.engine.connectors.postgres`),
Parquet overwrites the batch's own partition (:mod:`~hub.engine.connectors.parquet`).
"""
