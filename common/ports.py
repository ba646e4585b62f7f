"""Ports of one stack, so that many stacks share a machine without sharing sockets.

The embedded default picks free loopback ports for its four gRPC services (or
derives them from `WAYBILL_GRPC_BASE_PORT`), and every server binds its port
exclusively: a port in use is a one-line error naming it and its setting, with
exit status `PORT_IN_USE_EXIT_CODE`, never a second server silently sharing it.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Mapping

# The exit status of a process that could not bind its port.
PORT_IN_USE_EXIT_CODE = 5

# The gRPC services whose addresses the embedded default chooses, in the order a
# base port numbers them (base, base+1, …).
GRPC_SERVICES = ("admission", "runner", "journal", "delivery")


class PortInUse(Exception):
    """A port this process must listen on is taken (by another stack, say)."""

    def __init__(self, address: str, setting: str) -> None:
        super().__init__(f"{address} is already in use: choose another with {setting}")
        self.address = address
        self.setting = setting


def address_setting(service: str) -> str:
    return f"WAYBILL_{service.upper()}_ADDR"


def free_loopback_port() -> int:
    """A port the kernel says is free on 127.0.0.1 now (bound to 0, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def embedded_grpc_addresses(env: Mapping[str, str]) -> dict[str, str]:
    """The `WAYBILL_<SERVICE>_ADDR` settings `env` does not give: consecutive ports
    from `WAYBILL_GRPC_BASE_PORT` when it is set, else free loopback ports."""
    base = env.get("WAYBILL_GRPC_BASE_PORT")
    chosen = {}
    for offset, service in enumerate(GRPC_SERVICES):
        setting = address_setting(service)
        if env.get(setting):
            continue
        port = int(base) + offset if base else free_loopback_port()
        chosen[setting] = f"127.0.0.1:{port}"
    return chosen


def bind_http_socket(host: str, port: int) -> socket.socket:
    """The gateway's listening socket, bound before anything slow happens, so that a
    busy port is said at once. SO_REUSEADDR as uvicorn's own (a port in TIME_WAIT is
    free), never SO_REUSEPORT (a port another server listens on is not)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise PortInUse(f"{host}:{port}", "WAYBILL_HTTP_PORT or --port") from None
        raise
    sock.listen(2048)
    return sock


def http_port_free(host: str, port: int) -> bool:
    """Whether the gateway could bind `host:port` now (the launcher asks first)."""
    try:
        bind_http_socket(host, port).close()
    except PortInUse:
        return False
    return True


def address_free(address: str) -> bool:
    """Whether a gRPC `host:port` address could be bound now; other forms (unix:,
    dns:…) are left to gRPC."""
    host, _, port = address.rpartition(":")
    if not port.isdigit() or not host or host.startswith(("unix", "dns")):
        return True
    host = host.strip("[]")
    return http_port_free("0.0.0.0" if host in ("", "*") else host, int(port))
