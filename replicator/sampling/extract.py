"""Who sent a message (the sampling key) and whether it asks to be copied (the force field)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import orjson

from replicator.nats.wire import readable


def _lookup(doc: Any, path: list[str]) -> Any:
    for part in path:
        if isinstance(doc, dict):
            doc = doc.get(part)
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            return None
    return doc


def _text(v: Any) -> str | None:
    if v is None or v == "":
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return str(v)
    return orjson.dumps(v).decode()  # objects and arrays as their JSON text, as gjson does


@dataclass(frozen=True)
class SenderExtractor:
    """One of field (a dotted JSON path such as `sender` or `data.identity`), header, or subject
    token (1-based; -1 for the whole subject); plus an optional JSON force field."""

    field: str = ""
    header: str = ""
    token: int = 0
    force_field: str = ""

    @property
    def label(self) -> str:
        return self.field or self.header or (f"subject token {self.token}" if self.token else "")

    def extract(
        self, subject: str, headers: list[tuple[str, str]] | None, data: bytes
    ) -> tuple[str | None, bool]:
        """(sender or None when absent/not JSON, force)."""
        doc: Any = None
        if self.field or self.force_field:
            try:
                doc = orjson.loads(data)
            except orjson.JSONDecodeError:
                doc = None
        force = bool(self.force_field) and _lookup(doc, self.force_field.split(".")) is True
        if self.field:
            return _text(_lookup(doc, self.field.split("."))), force
        if self.header:
            # The first value of a repeated header, as the Go original's Header.Get gives it.
            # A value that is not UTF-8 names its sender with each bad byte as U+FFFD.
            value = next((v for k, v in headers or () if k == self.header), None)
            return (readable(value) if value else None), force
        if self.token == -1:
            return readable(subject), force
        tokens = subject.split(".")
        return (readable(tokens[self.token - 1]) if 0 < self.token <= len(tokens) else None), force


def bucket_of(key: str, buckets: int) -> int:
    """The state bucket of a sender (crc32: stable across processes and releases)."""
    return zlib.crc32(key.encode()) % buckets
