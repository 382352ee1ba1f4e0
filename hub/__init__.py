"""The SpanEdge hub: REST control plane, ingest and the Spark engine."""
