"""Where a webhook may be sent: the SSRF guard, shared by admission (a run's
`webhook`), delivery (subscriptions, and again before every send, since a name
can resolve elsewhere later).

A target must be an http(s) URL without credentials, its host must match the
allowlist (`WAYBILL_WEBHOOK_ALLOWED_HOSTS`; empty allows any host), and every
address it resolves to must be globally routable (`ipaddress`' `is_global`: no
private, shared (100.64/10), loopback, link-local, multicast, reserved or
documentation range), and so must any IPv4 address an IPv6 form carries (mapped,
6to4, Teredo, NAT64), unless it lies inside a network listed in
`WAYBILL_WEBHOOK_ALLOW_NETWORKS` (e.g. `127.0.0.1/32` for tests). Port 0 is refused.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from waybill.common.settings import Settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class WebhookTargetRefused(ValueError):
    """The URL may not be called; the message says why and what to change."""


def _networks(settings: Settings) -> list[Network]:
    raw = [part.strip() for part in settings.webhook_allow_networks.split(",") if part.strip()]
    return [ipaddress.ip_network(part, strict=False) for part in raw]


def _hosts(settings: Settings) -> list[str]:
    return [h.strip().lower() for h in settings.webhook_allowed_hosts.split(",") if h.strip()]


def _host_allowed(host: str, allowed: list[str]) -> bool:
    """`example.com` allows exactly that host; `.example.com` its subdomains too."""
    if not allowed:
        return True
    for entry in allowed:
        if entry.startswith(".") and (host == entry[1:] or host.endswith(entry)):
            return True
        if host == entry:
            return True
    return False


# NAT64's well-known prefix: the last 32 bits are the IPv4 address reached.
NAT64_PREFIX = ipaddress.ip_network("64:ff9b::/96")


def _embedded_ipv4(address: Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address hands traffic to (mapped, 6to4, Teredo, NAT64)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    embedded = [address.ipv4_mapped, address.sixtofour, *(address.teredo or ())]
    if address in NAT64_PREFIX:
        embedded.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return [found for found in embedded if found is not None]


def _is_public(address: Address) -> bool:
    # `is_global` alone lets multicast through.
    routable = address.is_global and not address.is_multicast
    return routable and all(_is_public(inner) for inner in _embedded_ipv4(address))


def check_url_shape(url: str, settings: Settings) -> tuple[str, int]:
    """(host, port) of an acceptable URL; refuses what no resolution could fix."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise WebhookTargetRefused(f"webhook {url!r}: use an http:// or https:// URL")
    if parts.username or parts.password:
        raise WebhookTargetRefused(f"webhook {url!r}: credentials in the URL are not allowed")
    host = (parts.hostname or "").lower()
    if not host:
        raise WebhookTargetRefused(f"webhook {url!r}: the URL has no host")
    try:
        port = parts.port
        if port is None:
            port = 443 if parts.scheme == "https" else 80
    except ValueError as error:
        raise WebhookTargetRefused(f"webhook {url!r}: {error}") from error
    if port == 0:
        raise WebhookTargetRefused(f"webhook {url!r}: port 0 cannot be called")
    if not _host_allowed(host, _hosts(settings)):
        raise WebhookTargetRefused(
            f"webhook host {host!r} is not in the allowlist (WAYBILL_WEBHOOK_ALLOWED_HOSTS)"
        )
    return host, port


def check_addresses(host: str, addresses: list[str], settings: Settings) -> None:
    allowed = _networks(settings)
    if not addresses:
        raise WebhookTargetRefused(f"webhook host {host!r} does not resolve")
    for text in addresses:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        if _is_public(address) or any(address in network for network in allowed):
            continue
        raise WebhookTargetRefused(
            f"webhook host {host!r} resolves to {address}, not a public (globally "
            "routable) address; only public addresses may be called "
            "(WAYBILL_WEBHOOK_ALLOW_NETWORKS admits chosen networks)"
        )


async def resolve(host: str, port: int) -> list[str]:
    try:
        found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return []
    return sorted({str(info[4][0]) for info in found})


@dataclass(frozen=True)
class CheckedTarget:
    """A URL that passed, with the addresses it resolved to when checked."""

    url: str
    host: str
    port: int
    addresses: list[str]

    def pinned_url(self) -> str:
        """The URL with its host replaced by the checked address, so that the POST
        goes where the check looked (a name that re-resolves elsewhere in between,
        DNS rebinding, cannot redirect it). Send `Host` and, for https, the SNI
        name as the original host."""
        address = self.addresses[0]
        shown = f"[{address}]" if ":" in address else address
        return urlsplit(self.url)._replace(netloc=f"{shown}:{self.port}").geturl()

    @property
    def host_header(self) -> str:
        return str(urlsplit(self.url).netloc)


async def check_webhook_url(url: str, settings: Settings) -> CheckedTarget:
    """Refuse (WebhookTargetRefused) a URL that may not be called right now."""
    host, port = check_url_shape(url, settings)
    addresses = await resolve(host, port)
    check_addresses(host, addresses, settings)
    return CheckedTarget(url, host, port, addresses)
