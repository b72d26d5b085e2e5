"""The sampling rules written the plain way: one message at a time, one dict of senders.

The ground truth for tests and scenario checks. Because advisories carry their exact event
times, the result does not depend on how the stream was cut into batches or buckets: only on
the messages and the final clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from replicator.sampling.rules import Advisory, Event, Message, SamplingParams, copy_interval_ms


@dataclass
class _Sender:
    seen: int
    copied: int
    size: int
    warned: bool = False


def reference(
    msgs: Iterable[Message], final_clock_ms: int, p: SamplingParams
) -> tuple[list[int], list[Advisory]]:
    """(copied sequences in order, advisories) for messages in sequence order."""
    senders: dict[str, _Sender] = {}
    copied: list[int] = []
    advs: list[Advisory] = []
    for m in msgs:
        if m.sender is None:
            copied.append(m.seq)
            continue
        st = senders.get(m.sender)
        if st is not None:
            unseen = m.ts_ms - st.seen
            if unseen >= p.warn_ms and not st.warned:
                advs.append(Advisory(Event.TIMEOUT, m.sender, st.seen + p.warn_ms, st.seen, m.seq))
                st.warned = True
            if unseen >= p.inspect_ms:
                advs.append(Advisory(Event.EXPIRE, m.sender, st.seen + p.inspect_ms, st.seen, m.seq))
                del senders[m.sender]
                st = None
            elif st.warned:
                advs.append(Advisory(Event.RECOVER, m.sender, m.ts_ms, st.seen, m.seq))
        if st is None:
            advs.append(Advisory(Event.NEW, m.sender, m.ts_ms, m.ts_ms, m.seq))
            senders[m.sender] = _Sender(m.ts_ms, m.ts_ms, m.size)
            copied.append(m.seq)
            continue
        due = m.ts_ms - st.copied >= copy_interval_ms(p, m.sender)
        resized = p.size_trigger > 0 and abs(m.size - st.size) >= p.size_trigger
        if m.force or resized or due:
            copied.append(m.seq)
            st.copied = m.ts_ms
        st.seen, st.size, st.warned = m.ts_ms, m.size, False
    for name, st in list(senders.items()):
        if final_clock_ms - st.seen >= p.warn_ms and not st.warned:
            advs.append(Advisory(Event.TIMEOUT, name, st.seen + p.warn_ms, st.seen))
        if final_clock_ms - st.seen >= p.inspect_ms:
            advs.append(Advisory(Event.EXPIRE, name, st.seen + p.inspect_ms, st.seen))
    return copied, advs


def advisory_key(a: Advisory) -> tuple[str, str, int, int]:
    """What must match between two runs: the seq that surfaced it depends on batching."""
    return (a.sender, a.event, a.event_ms, a.seen_ms)
