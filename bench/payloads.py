"""Tool arguments of three sizes for the fingerprint benchmark (deterministic)."""

from __future__ import annotations

import json
import random
from typing import Any


def small() -> dict[str, Any]:
    """3 keys, flat."""
    return {"order_id": "A-1001", "amount": 42.5, "notify": True}


def medium() -> dict[str, Any]:
    """20 keys, nested two levels."""
    return {
        "query": "refund status for order", "order_id": "1001",
        "customer": {"id": 77, "name": "Ada Lovelace", "email": "ada@example.com", "tier": "gold"},
        "filters": {"from": "2026-01-01", "to": "2026-02-01", "status": ["open", "pending"], "min_amount": 10,
                    "max_amount": 500.25},
        "page": 1, "page_size": 20, "sort": "created_at", "desc": True, "include_notes": False,
        "fields": ["id", "status", "amount", "created_at"], "locale": "en-GB", "currency": "EUR", "channel": "web",
        "request_id": "r-123", "dry_run": False, "reason": None, "limit": 5, "offset": 0,
    }


def big(target: int = 10_000, seed: int = 7) -> dict[str, Any]:
    """About ``target`` bytes of JSON: a query, options and a list of nested records."""
    rnd = random.Random(seed)
    docs = []
    out = {"query": "find every shipment delayed by more than three days in the northern region", "region": "north",
           "options": {"dedupe": True, "max_results": 50, "score_threshold": 0.35,
                       "boost": {"recent": 1.5, "priority": 2}},
           "documents": docs}
    words = "alpha beta gamma delta shipment order carrier route depot customer delayed express parcel invoice".split()
    i = 0
    while len(json.dumps(out)) < target:
        i += 1
        docs.append({"id": f"doc-{i:05d}", "title": " ".join(rnd.choice(words) for _ in range(6)),
                     "score": round(rnd.random(), 4), "rank": i, "tags": [rnd.choice(words) for _ in range(3)],
                     "meta": {"source": rnd.choice(["erp", "crm", "wms"]),
                              "updated": f"2026-0{rnd.randint(1, 9)}-1{rnd.randint(0, 9)}",
                              "version": rnd.randint(1, 9), "verified": rnd.random() < 0.5}})
    return out
