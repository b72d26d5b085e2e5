"""Target subject rewrite, as in the Choria Stream Replicator."""

from __future__ import annotations

import re

_DOTS = re.compile(r"\.{2,}")


def rewrite_subject(subject: str, prefix: str = "", remove: str = "") -> str:
    """`<prefix>.<subject>`, then every `remove` deleted and doubled dots collapsed.

    >>> rewrite_subject("NODE_DATA.host", "FLEET_NODES", "NODE_DATA")
    'FLEET_NODES.host'
    """
    out = f"{prefix}.{subject}" if prefix else subject
    if remove:
        out = out.replace(remove, "")
        out = _DOTS.sub(".", out).strip(".")
    return out
