"""Choria-style NATS URLs and the connection options they give."""

from __future__ import annotations

import re

import pytest

from replicator.nats.connect import connect_options
from replicator.nats.urls import parse_nats_url


def test_urls() -> None:
    u = parse_nats_url("nats://bob:s%40cret@a:4223,b?connect_timeout=3&insecure=true&credentials=/x.creds")
    assert u.servers == ["nats://a:4223", "nats://b:4222"]
    assert (u.user, u.password, u.connect_timeout, u.insecure, u.credentials) == (
        "bob",
        "s@cret",
        3.0,
        True,
        "/x.creds",
    )
    opts = connect_options("nats://a?jwt=/j&nkey=/n")
    assert opts["user_credentials"] == ("/j", "/n")
    for bad, msg in [
        ("", "empty URL"),
        ("http://a", "unsupported scheme"),
        ("nats://a?foo=1", "unknown URL option"),
        ("nats://a?jwt=/j", "needs nkey="),
        ("nats://a?connect_timeout=soon", "not a duration"),
        ("nats://a:port", "bad port"),
    ]:
        with pytest.raises(ValueError, match=msg):
            parse_nats_url(bad)


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("nats://src :4222", "whitespace in 'nats://src :4222'"),
        ("nats://a?insecure=maybe", "insecure='maybe' is neither true nor false"),
        ("nats://a?tls_handshake_first=ture", "tls_handshake_first='ture' is neither true nor false"),
        ("nats://a?connect_timeout=0", "connect_timeout='0': give more than 0"),
    ],
)
def test_a_url_that_would_be_read_otherwise_than_meant_is_refused(url: str, error: str) -> None:
    """Each was accepted (found by a review): a misspelt flag read as false, a host with a space
    retried for ever, a connect_timeout of 0."""
    with pytest.raises(ValueError, match=re.escape(error)):
        parse_nats_url(url)
    assert (
        parse_nats_url("nats://a?insecure").insecure and not parse_nats_url("nats://a?insecure=no").insecure
    )
    # Go's strconv.ParseBool spellings, as Choria's reads them
    assert (
        parse_nats_url("nats://a?insecure=T").insecure and not parse_nats_url("nats://a?insecure=f").insecure
    )
