"""The live-session store on its own: use postpones idle eviction and reorders the LRU; peek does neither."""

from __future__ import annotations

from otel_agentguard.live.store import SessionStore


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make_store(max_sessions: int = 10, idle_timeout_s: float = 10.0) -> tuple[SessionStore[str], Clock, list[str]]:
    clock, evicted = Clock(), []
    store: SessionStore[str] = SessionStore(evicted.append, max_sessions=max_sessions, idle_timeout_s=idle_timeout_s,
                                            clock=clock)
    return store, clock, evicted


def times_kept_for_exactly_the_sessions_kept(store: SessionStore[str]) -> bool:
    return store._seen.keys() == store._entries.keys()  # noqa: SLF001 - the store's one invariant


def test_a_session_used_lately_outlives_the_idle_ones():
    store, clock, evicted = make_store()
    store.add("a", "session a")
    store.add("b", "session b")
    clock.now = 9.0
    assert store.get("a") == "session a"  # used: idle again from now
    clock.now = 15.0
    assert store.sweep() == 1
    assert evicted == ["session b"]
    assert store.keys() == ["a"]
    clock.now = 19.5
    assert store.sweep() == 1
    assert evicted == ["session b", "session a"]
    assert len(store) == 0
    assert times_kept_for_exactly_the_sessions_kept(store)


def test_peek_is_no_use():
    store, clock, evicted = make_store()
    store.add("a", "session a")
    clock.now = 9.0
    assert store.peek("a") == "session a"
    clock.now = 10.0
    assert store.sweep() == 1
    assert evicted == ["session a"]
    assert store.peek("a") is None


def test_a_full_store_evicts_the_least_recently_used():
    store, _, evicted = make_store(max_sessions=2)
    store.add("a", "session a")
    store.add("b", "session b")
    store.get("a")
    store.add("c", "session c")
    assert evicted == ["session b"]
    assert store.keys() == ["a", "c"]
    assert times_kept_for_exactly_the_sessions_kept(store)


def test_pop_and_drain_forget_the_session_entirely():
    store, clock, evicted = make_store()
    store.add("a", "session a")
    store.add("b", "session b")
    assert store.pop("a") == "session a"
    assert store.pop("a") is None
    assert times_kept_for_exactly_the_sessions_kept(store)
    assert store.drain() == ["session b"]
    assert times_kept_for_exactly_the_sessions_kept(store)
    store.add("a", "session a again")  # added anew: its idle time starts now
    clock.now = 5.0
    assert store.sweep() == 0
    assert evicted == []
    assert store.get("a") == "session a again"
