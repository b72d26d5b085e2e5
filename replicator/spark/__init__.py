"""Spark side: the `nats-jetstream` data source, the ordered sink, and session setup."""
