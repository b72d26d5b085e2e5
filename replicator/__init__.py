"""stream-replicator: copy a NATS JetStream stream to another, independent cluster, on PySpark."""

__version__ = "0.1.0"
