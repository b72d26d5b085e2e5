"""The tests' NATS servers: see harness/servers.py (testcontainers where a Docker engine
answers, the venv's nats-server binary otherwise)."""

from harness.servers import NatsCluster, docker_available, nats_cluster

__all__ = ["NatsCluster", "docker_available", "nats_cluster"]
