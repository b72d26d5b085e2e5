"""An advisory's Nats-Msg-Id header line, built from its event id without the general encoder:
the same bytes the encoder gives for an id the rules make, and a clear error for one it could
not put on the wire as it is."""

from __future__ import annotations

import pytest

from replicator.nats.advisories import msg_id_header
from replicator.nats.wire import WireError, encode_header_lines
from replicator.sampling.rules import ksuid


@pytest.mark.parametrize("event_id", [ksuid(1_700_000_000, "x"), ksuid(0, ""), "event-7"])
def test_an_event_ids_header_line_is_what_the_encoder_writes(event_id: str) -> None:
    assert msg_id_header(event_id) == encode_header_lines([("Nats-Msg-Id", event_id)])


@pytest.mark.parametrize("event_id", ["", " padded", "two\r\nlines", "nœud"])
def test_an_id_that_is_not_one_clean_header_value_is_refused(event_id: str) -> None:
    with pytest.raises(WireError, match="cannot be a header value"):
        msg_id_header(event_id)
