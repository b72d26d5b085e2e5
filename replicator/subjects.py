"""Target subject rewrite, as in the Choria Stream Replicator."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

from replicator.nats.wire import is_utf8, wire_bytes, wire_text

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
        if not is_utf8(out):
            # Bytes that were not UTF-8 (replicator.nats.wire) may be now that something between
            # them is gone: read again, one target subject is one string.
            out = wire_text(wire_bytes(out))
    return out


def subject_problem(subject: str, wildcards: bool = False) -> str | None:
    """Why `subject` is not a NATS subject (a subscription's filter when `wildcards`), or None.

    >>> subject_problem("a..b"), subject_problem("a.>", wildcards=True), subject_problem("a.>")
    ('has an empty token (a leading, trailing or doubled dot)', None, 'holds a wildcard (* or >), which nothing can publish to')
    """
    if not subject:
        return "is empty"
    if any(c.isspace() for c in subject):
        return "holds whitespace"
    tokens = subject.split(".")
    if "" in tokens:
        return "has an empty token (a leading, trailing or doubled dot)"
    if not wildcards and ("*" in tokens or ">" in tokens):
        return "holds a wildcard (* or >), which nothing can publish to"
    if ">" in tokens[:-1]:
        return "has > before its last token (> stands for the rest of the subject)"
    return None


def subject_matches(subject: str, pattern: str) -> bool:
    """Whether `subject` is one of the subjects NATS's `pattern` (`*` one token, `>` the rest)
    covers.

    >>> subject_matches("a.b.c", "a.*.c"), subject_matches("a.b.c", "a.>"), subject_matches("a", "a.>")
    (True, True, False)
    """
    tokens = subject.split(".")
    parts = pattern.split(".")
    for i, p in enumerate(parts):
        if p == ">":
            return len(tokens) > i
        if i >= len(tokens) or (p != "*" and p != tokens[i]):
            return False
    return len(tokens) == len(parts)


def subjects_matcher(patterns: list[str]) -> Callable[[str], bool]:
    """A test of whether a subject falls under any of `patterns`, remembering recent answers
    (a fleet's subjects repeat every interval)."""

    @functools.lru_cache(maxsize=1 << 16)
    def covered(subject: str) -> bool:
        return any(subject_matches(subject, p) for p in patterns)

    return covered


_NOT_IN_A_TOKEN = re.compile(r"[\s*>]")


def subject_tokens(value: str) -> str:
    """`value` made safe to place in a subject: its dots still separate tokens (a host name
    stays `node1.example.net`, as Choria publishes it), but whitespace, `*` and `>` become `_`,
    and so does an empty token, so no value can make a wildcard or an invalid subject.

    >>> subject_tokens("web 01.*.example..net>")
    'web_01._.example._.net_'
    """
    return ".".join(token or "_" for token in _NOT_IN_A_TOKEN.sub("_", value).split("."))
