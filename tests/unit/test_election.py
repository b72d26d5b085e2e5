"""The lease that keeps two leaders from publishing at once, and the Go original's key."""

from __future__ import annotations

from replicator.election import Lease, election_key


def test_a_lease_ends_a_guard_before_the_key_can_expire_and_is_renewed_four_times_per_lease() -> None:
    lease = Lease.for_ttl(5.0)
    assert (lease.guard, lease.renew_every) == (1.0, 1.0)
    assert not lease.holds(now=0.0)  # never won
    lease.renewed(sent_at=100.0)
    assert lease.holds(now=103.9)
    # The key can expire 5 s after the renewal was sent: publishing stops a second earlier.
    assert not lease.holds(now=104.0)
    lease.renewed(sent_at=103.0)
    assert lease.holds(now=106.5)
    lease.lost()
    assert not lease.holds(now=103.5)


def test_short_and_long_ttls_keep_half_a_second_of_guard_and_a_fifth_of_the_ttl() -> None:
    assert Lease.for_ttl(1.0).guard == 0.5
    assert Lease.for_ttl(60.0).guard == 12.0
    assert Lease.for_ttl(60.0).renew_every == 12.0
    assert Lease.for_ttl(1.0).renew_every == 0.25


def test_the_key_is_the_go_originals() -> None:
    assert election_key("dc1", "REGISTRATION") == "SR_dc1_REGISTRATION"
    assert election_key("SR_x", "S") == "SR_SR_x_S"
    assert election_key("S", "S") == "S_S"  # a name that prefixes "SR_" is used bare, as in Go
