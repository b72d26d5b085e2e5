"""NATS I/O: connection options, JetStream stream management and fast reads."""
