"""The hub's ingest: edge batches from MQTT into the durable per-app log, effectively once."""
