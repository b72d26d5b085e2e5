"""Registration records: Choria-shaped, of the planned size, changing only where a node's would."""

from __future__ import annotations

import json
from typing import Any

from emulator.fleet import build_fleet
from emulator.payload import CONTENT_PROTOCOL, PayloadFactory
from emulator.scenario import parse_scenario


def base(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"name": "t", "duration": "1h", "fleet": {"nodes": 100}}
    d.update(over)
    return d


def test_record_is_choria_shaped_json_of_exactly_the_planned_size() -> None:
    s = parse_scenario(base())
    fleet = build_fleet(s)
    f = PayloadFactory(fleet, s.fleet.sizes.min)
    for node in range(100):
        for size in (1024, 5000, int(fleet.size[node]), 40_000):
            raw = f.render(node, size, node % 7 == 0, 1_763_840_000, 86_400 + node, 2**100 + node)
            assert len(raw) == size
            rec = json.loads(raw)
            assert set(rec) == {"protocol", "sender", "time", "requestid", "force", "data"}
            assert rec["sender"] == fleet.identity(node)
            assert rec["force"] is (node % 7 == 0)
            assert rec["time"] == 1_763_840_000
            content = rec["data"]["content"]
            assert rec["data"]["protocol"] == CONTENT_PROTOCOL
            assert {"agents", "classes", "facts", "status", "collectives", "build_info"} <= set(content)
            assert content["facts"]["fqdn"] == fleet.identity(node)
            assert content["status"]["uptime"] == 86_400 + node


def test_a_node_record_changes_only_in_time_uptime_and_request_between_publishes() -> None:
    s = parse_scenario(base())
    fleet = build_fleet(s)
    f = PayloadFactory(fleet, s.fleet.sizes.min)
    a = json.loads(f.render(3, 6000, False, 1000000000, 10, 1))
    b = json.loads(f.render(3, 6000, False, 1000000300, 310, 2))
    fillers = []
    for rec in (a, b):
        rec.pop("time"), rec.pop("requestid")
        rec["data"]["content"]["facts"].pop("uptime_seconds")
        rec["data"]["content"]["status"].pop("uptime")
        fillers.append(rec["data"]["content"]["facts"].pop("inventory"))
    assert a == b
    # The filler absorbs uptime's extra digits (twice: facts and status) to keep the size exact.
    assert fillers[0][: len(fillers[1])] == fillers[1] and len(fillers[0]) - len(fillers[1]) == 2
