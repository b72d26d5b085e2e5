"""Who sent a message: a header value that is not UTF-8 still names its sender."""

from __future__ import annotations

from replicator.nats import wire
from replicator.sampling.extract import SenderExtractor, bucket_of


def test_a_sender_header_that_is_not_utf8_names_it_with_each_bad_byte_as_u_fffd() -> None:
    """The sender is text (Arrow, the state, an advisory's JSON hold it): each byte that is not
    UTF-8 reads as U+FFFD, as the Go original's JSON shows it; the copy's headers keep the bytes
    (replicator.spark.rows)."""
    headers = wire.parse_headers(b"NATS/1.0\r\nX-Node: n\xe9ud-1\r\nX-Node: second\r\n\r\n")
    by_header = SenderExtractor(header="X-Node")
    sender, force = by_header.extract("reg.x", headers, b"{}")
    assert (sender, force) == ("n\ufffdud-1", False)
    assert 0 <= bucket_of(sender or "", 32) < 32
    assert by_header.extract("reg.x", [("X-Node", "déjà")], b"{}") == ("déjà", False)
    assert by_header.extract("reg.x", [("X-Node", "")], b"{}") == (None, False)
    assert by_header.extract("reg.x", None, b"{}") == (None, False)


def test_a_subject_token_that_is_not_utf8_names_its_sender_with_u_fffd() -> None:
    subject = wire.wire_text(b"reg.n\xe9ud.x")
    assert SenderExtractor(token=2).extract(subject, None, b"") == ("n\ufffdud", False)
    assert SenderExtractor(token=-1).extract(subject, None, b"") == ("reg.n\ufffdud.x", False)
