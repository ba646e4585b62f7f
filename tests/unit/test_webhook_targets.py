"""The SSRF guard's rules, without the network: URL shape, host allowlist,
address classes, and the pinned URL a webhook is actually sent to."""

from __future__ import annotations

import pytest

from waybill.common.settings import Settings
from waybill.common.webhook_targets import (
    CheckedTarget,
    WebhookTargetRefused,
    check_addresses,
    check_url_shape,
)


def test_the_host_allowlist_takes_exact_hosts_and_dotted_suffixes() -> None:
    settings = Settings(webhook_allowed_hosts="hooks.example.com, .partner.org")
    assert check_url_shape("https://hooks.example.com/x", settings) == ("hooks.example.com", 443)
    assert check_url_shape("http://a.b.partner.org:8080/x", settings) == ("a.b.partner.org", 8080)
    assert check_url_shape("http://partner.org/x", settings)[0] == "partner.org"
    for refused in ("https://example.com/x", "https://evilpartner.org/x"):
        with pytest.raises(WebhookTargetRefused, match="not in the allowlist"):
            check_url_shape(refused, settings)


@pytest.mark.parametrize(
    "address",
    [
        "10.0.0.1",
        "172.16.5.4",
        "192.168.1.1",
        "127.0.0.1",
        "169.254.169.254",
        "0.0.0.0",
        "::1",
        "fe80::1",
        "fd00::1",
        "::ffff:127.0.0.1",
        "224.0.0.1",
        "100.64.0.1",  # shared address space (carrier-grade NAT)
        "192.0.2.1",  # documentation
        "2002:7f00:1::1",  # 6to4 carrying 127.0.0.1
        "64:ff9b::a00:1",  # NAT64 reaching 10.0.0.1
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo
    ],
)
def test_private_loopback_and_link_local_addresses_are_refused(address: str) -> None:
    with pytest.raises(WebhookTargetRefused, match="only public addresses"):
        check_addresses("h", [address], Settings())


def test_every_address_a_name_resolves_to_must_pass() -> None:
    with pytest.raises(WebhookTargetRefused, match="10.0.0.1"):
        check_addresses("h", ["93.184.216.34", "10.0.0.1"], Settings())
    check_addresses("h", ["93.184.216.34", "2606:2800:220:1::1"], Settings())


def test_ipv6_forms_carrying_a_public_ipv4_address_pass() -> None:
    check_addresses("h", ["2002:5db8:d822::1", "64:ff9b::5db8:d822"], Settings())


def test_port_zero_is_refused() -> None:
    with pytest.raises(WebhookTargetRefused, match="port 0"):
        check_url_shape("https://hooks.example.com:0/x", Settings())


def test_allowed_networks_admit_only_themselves() -> None:
    settings = Settings(webhook_allow_networks="127.0.0.1/32")
    check_addresses("h", ["127.0.0.1"], settings)
    with pytest.raises(WebhookTargetRefused):
        check_addresses("h", ["127.0.0.2"], settings)


def test_the_post_goes_to_the_checked_address_with_the_original_host() -> None:
    target = CheckedTarget(
        "https://hooks.example.com/in?a=1", "hooks.example.com", 443, ["2001:db8::5"]
    )
    assert target.pinned_url() == "https://[2001:db8::5]:443/in?a=1"
    assert target.host_header == "hooks.example.com"
