"""Which server a URL reaches: two entries of a server list that reach the same server are one server listed twice.

Listed twice, a server would be pushed every weight version twice and, with ``vllm_weight_delta``, find the base of
the second push's delta gone (it writes the whole weights at every step); its share of the prompts would be two
servers' worth. `same_server` compares what a URL reaches: its scheme, its port (the scheme's default when none is
written), its path with empty segments and a trailing slash dropped, and its host as the set of addresses it resolves
to (``localhost`` and ``127.0.0.1`` are one host); a host that does not resolve stands for itself (lower-cased).
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from functools import cache
from urllib.parse import urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}


@cache
def _addresses(host: str) -> frozenset[str]:
    """The addresses ``host`` resolves to, or the host itself when it does not resolve."""
    try:
        return frozenset(info[4][0] for info in socket.getaddrinfo(host, None)) or frozenset({host})
    except (OSError, UnicodeError):
        return frozenset({host})


def _reach(url: str) -> tuple[str, frozenset[str], int | None, str]:
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    try:
        port = parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:  # not a port number: compared as written
        port = None
    host = (parts.hostname or "").lower()
    path = "/" + "/".join(segment for segment in parts.path.split("/") if segment)
    return scheme, _addresses(host), port, path


def same_server(urls: Sequence[str]) -> tuple[str, str] | None:
    """The first two entries of ``urls`` that reach the same server, or None."""
    reached = [_reach(url) for url in urls]
    for j, (scheme, hosts, port, path) in enumerate(reached):
        for i in range(j):
            other = reached[i]
            if (other[0], other[2], other[3]) == (scheme, port, path) and other[1] & hosts:
                return urls[i], urls[j]
    return None
