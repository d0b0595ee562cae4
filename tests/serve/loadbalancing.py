"""The Collector's `loadbalancing` exporter's choice of backend, for `routing_key: traceID`.

A consistent hash ring (contrib exporter/loadbalancingexporter, consistent_hashing.go): each
endpoint (the static resolver sorts them) takes 100 positions on a ring of 36000,
``crc32(endpoint + one byte i) % 36000`` for i in 0..99, a position already taken keeps its first
owner; a trace goes to the owner of the first position at or after ``crc32(trace id bytes) % 36000``,
wrapping around to the lowest position.
"""

from __future__ import annotations

import bisect
import zlib

_RING = 36000
_WEIGHT = 100


class HashRing:
    def __init__(self, endpoints: list[str]):
        owners: dict[int, str] = {}
        for endpoint in sorted(endpoints):
            for index in range(_WEIGHT):
                position = zlib.crc32(endpoint.encode() + bytes([index])) % _RING
                owners.setdefault(position, endpoint)
        self._positions = sorted(owners)
        self._owners = [owners[position] for position in self._positions]

    def endpoint_for(self, trace_id: bytes) -> str:
        position = zlib.crc32(trace_id) % _RING
        index = bisect.bisect_left(self._positions, position)
        return self._owners[index if index < len(self._owners) else 0]
