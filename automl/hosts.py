"""Facts about hosts that the dashboard, the API and the workers need."""

from __future__ import annotations

import ipaddress
import os
import socket


def worker_name(pid: int | None = None) -> str:
    """``host:pid`` of a process of this machine (this one by default), as trials record it."""
    return f"{socket.gethostname()}:{pid or os.getpid()}"


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` resolves to is a loopback address.

    Args:
        host: An IP address or a host name (``0.0.0.0`` and ``::`` mean every interface).

    Returns:
        True when only this machine can reach a server bound to ``host``.
    """
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)
