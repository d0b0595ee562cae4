"""Hostile requests get a clear status, never a 500, a silent drop or a held connection."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
from serve_support import service_in_thread

pytest.importorskip("aiohttp")


def _span(**overrides) -> bytes:
    span = {"traceId": "a" * 32, "spanId": "b" * 16, "name": "chat", "startTimeUnixNano": "1",
            "endTimeUnixNano": "2"}
    span.update(overrides)
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()


def _post_json(url: str, body: bytes) -> httpx.Response:
    return httpx.post(url, content=body, headers={"Content-Type": "application/json"})


def test_a_bearer_token_that_is_not_utf8_is_refused_with_401(monkeypatch):
    monkeypatch.setenv("OTEL_AGENTGUARD_SERVE_TOKEN", "s3cret")
    with service_in_thread(settle_s=0.2) as running:
        response = httpx.post(running.url, content=b"", headers={
            "Content-Type": "application/x-protobuf", "Authorization": b"Bearer \xff"})
    assert response.status_code == 401


@pytest.mark.parametrize("value", [str(2**64), str(10**30)])
def test_a_time_beyond_fixed64_is_refused_naming_the_value(value):
    with service_in_thread(settle_s=0.2) as running:
        response = _post_json(running.url, _span(endTimeUnixNano=value))
        assert response.status_code == 400
        assert "endTimeUnixNano" in response.text and value in response.text
        assert running.service.sessions.open_traces == 0


def test_the_largest_fixed64_time_is_taken():
    with service_in_thread(settle_s=0.2) as running:
        assert _post_json(running.url, _span(endTimeUnixNano=str(2**64 - 1))).status_code == 200


def test_a_lone_surrogate_in_a_string_is_refused_naming_where():
    body = _span(attributes=[{"key": "session.id", "value": {"stringValue": "PLACEHOLDER"}}])
    body = body.replace(b"PLACEHOLDER", b"s-\\ud800")  # half a surrogate pair, escaped as JSON allows
    with service_in_thread(settle_s=0.2) as running:
        response = _post_json(running.url, body)
        assert response.status_code == 400
        assert "stringValue is not valid UTF-8" in response.text and "attributes[0]" in response.text
        paired = body.replace(b"\\ud800", b"\\ud83d\\ude00")  # a whole pair is an emoji: fine
        assert _post_json(running.url, paired).status_code == 200


def _connect(url: str) -> socket.socket:
    port = int(url.split(":")[2].split("/")[0])
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def _closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    sock.settimeout(seconds)
    try:
        data = sock.recv(4096)
    except TimeoutError:
        return False, b""
    return True, data


def test_headers_that_trickle_in_are_cut_off_at_the_read_timeout():
    with service_in_thread(settle_s=0.2, read_timeout_s=0.5) as running:
        slow = [_connect(running.url) for _ in range(5)]
        started = time.monotonic()
        for sock in slow:
            sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.3)
        for sock in slow:
            sock.sendall(b"X-Slow: 1\r\n")  # still sending, never finishing
        closed = [_closed_within(sock, 3)[0] for sock in slow]
        elapsed = time.monotonic() - started
        assert _post_json(running.url, _span()).status_code == 200  # the service still answers
    assert closed == [True] * 5 and elapsed < 3


def test_a_body_that_does_not_arrive_gets_408():
    with service_in_thread(settle_s=0.2, read_timeout_s=0.5) as running:
        sock = _connect(running.url)
        sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"resourceSpans\"")
        closed, data = _closed_within(sock, 3)
    assert closed and data.startswith(b"HTTP/1.1 408")
