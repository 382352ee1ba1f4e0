"""The hub's Spark engine: the hub's part of each app as Structured Streaming queries, their sinks and windows."""
