"""Distinct sampling seeds for the requests a vLLM backend sends, derived from the user's ``seed``.

vLLM samples a request with ``seed`` s and ``n`` completions as n child requests seeded s, s + 1, ..., s + n - 1, each
with its own generator: the same prompt, weights and seed give the same completions. Sending the user's seed with
every request would then repeat completions inside a group: a retry for a group's deficit d gets the first d
completions again, and the two halves of a group split across processes are identical.

Each request therefore gets its own seed, a hash of (the user's seed, the process index, the backend's call number,
the request's position in the call) below 2**62; the call number counts the backend's ``generate`` calls, which are
the generation steps and their retry and refill rounds. The same run with the same seed sends the same seeds; two
requests' ranges [seed, seed + n) overlap with negligible probability.
"""

from __future__ import annotations

import hashlib

_SEED_BITS = 62  # a request's seed plus its completion index stays within vLLM's int64 range


def request_seed(base: int, process_index: int, call: int, position: int) -> int:
    """The seed of the request at ``position`` of the backend's call number ``call`` on process ``process_index``."""
    digest = hashlib.blake2b(f"{base}:{process_index}:{call}:{position}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - _SEED_BITS)


class RequestSeeds:
    """The seeds of one backend's requests, call after call.

    Args:
        base: the user's seed (``generation_kwargs["seed"]``), or None: no seed is sent and vLLM samples freely.
        process_index: the training process the backend belongs to.
    """

    def __init__(self, base: int | None, process_index: int) -> None:
        self.base = base
        self.process_index = process_index
        self.calls = 0

    def next_call(self, num_requests: int) -> list[int | None]:
        """The seeds of the next call's ``num_requests`` requests (all None without a user seed)."""
        call = self.calls
        self.calls += 1
        if self.base is None:
            return [None] * num_requests
        return [request_seed(self.base, self.process_index, call, position) for position in range(num_requests)]
