"""A NATS connection's TLS files: the one type the config, the reader options, the sinks and the
connections all use. Plain and hashable, so it is pickled to Spark's workers as it is and keys
the connections a worker keeps."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TLSFiles:
    """PEM files: the CA that signed the servers' certificates, and this client's certificate and
    key (given together). All empty: TLS is off unless the URL asks for it (tls://)."""

    ca: str = ""
    cert: str = ""
    key: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.ca or self.cert or self.key)

    def problem(self) -> str | None:
        """What is wrong with these files as a config gives them, in words for the user."""
        if bool(self.cert) != bool(self.key):
            return "cert and key must be given together"
        for label, path in (("ca", self.ca), ("cert", self.cert), ("key", self.key)):
            if path and not Path(path).is_file():
                return f"{label} file {path!r} does not exist"
        return None
