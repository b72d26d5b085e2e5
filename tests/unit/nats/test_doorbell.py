"""Which streams get no doorbell because it would hear the planner's own asks (pure logic)."""

from __future__ import annotations

import pytest

from replicator.nats.doorbell import hears_its_own_asks


@pytest.mark.parametrize(
    ("subjects", "hears"),
    [
        ([">"], True),
        (["*.>"], True),
        (["_INBOX.>"], True),
        (["$JS.>"], True),
        (["*.*"], True),  # a reply inbox: _INBOX.<id>
        (["reg.>", ">"], True),
        (["reg.>"], False),
        (["choria.node.*", "choria.facts.>"], False),
        ([], False),
    ],
)
def test_a_stream_whose_subjects_cover_the_planners_own_requests_is_named(
    subjects: list[str], hears: bool
) -> None:
    assert hears_its_own_asks(subjects) is hears
