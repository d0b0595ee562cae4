"""Two stalled sessions for the incident page: a tool loop and a cycle, each with the model calls
between the tool calls (so the cut point shows), as trajectory files describe them."""

from __future__ import annotations

import json
from pathlib import Path

SECRET = "A1001-secret-order"  # an argument value: it must never reach the page


def _turns(calls: list[tuple[str, dict, str]], answer: str, agent: str = "support") -> list[dict]:
    steps: list[dict] = []
    for tool, args, result in calls:
        steps.append({"model": "gpt-4o", "tool_calls": 1, "input_tokens": 400, "output_tokens": 30,
                      "duration_s": 0.8, "agent": agent})
        steps.append({"tool": tool, "args": args, "result": result, "duration_s": 0.2, "agent": agent})
    steps.append({"answer": answer, "model": "gpt-4o", "tokens": 60, "duration_s": 0.6, "agent": agent})
    return steps


def write_sessions(folder: Path) -> Path:
    loop = _turns([("get_order", {"order": SECRET}, "paid")]
                  + [("query_logistics", {"order": SECRET}, "stalled at hub")] * 4, "Your parcel is on its way.")
    cycle = _turns([("search", {"q": "refund policy"}, "3 hits"), ("open_doc", {"id": 7}, "policy v2"),
                    ("summarize", {"doc": 7}, "30 days")] * 3, "Refunds are accepted within 30 days.")
    path = folder / "incidents.json"
    path.write_text(json.dumps({"sessions": [
        {"id": "parcel-tool-loop", "title": "asks for the same tracking again and again", "steps": loop},
        {"id": "policy-cycle", "title": "circles between search, open and summarize", "steps": cycle},
    ]}), encoding="utf-8")
    return path
