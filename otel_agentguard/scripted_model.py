"""A scripted model server for tests and demos: real SDK clients, no network.

``ScriptedModelServer`` listens on loopback only and speaks enough of three
wire formats for the official SDKs to run unmodified against it:

* OpenAI chat completions (``POST /v1/chat/completions``, plain and SSE streaming),
* OpenAI responses (``POST /v1/responses``, plain and SSE streaming),
* Anthropic messages (``POST /v1/messages``, plain and SSE streaming).

Like the real providers it refuses (HTTP 400) a history whose tool calls and
results do not pair up, and keeps what it refused in ``server.rejected``.
What the "model" answers is a script: a function from the request to a
:class:`Turn`, or :func:`turns` for a fixed sequence. Every request body is
kept in ``server.requests`` so a test can check what the SDK really sent::

    with ScriptedModelServer(turns(Turn.call("get_order", order="A1"), Turn.answer("Done."))) as server:
        client = openai.OpenAI(base_url=server.openai_url, api_key="test")
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from typing_extensions import Unpack  # in typing from Python 3.11

from otel_agentguard.history import history_problems

_ids = itertools.count(1)
STREAM_PIECE_CHARS = 12  # text per streamed delta, as real models send a few tokens at a time


def _pieces(text: str) -> Iterator[str]:
    for start in range(0, len(text), STREAM_PIECE_CHARS):
        yield text[start:start + STREAM_PIECE_CHARS]


def _next_id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):06d}"


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    call_id: str = ""  # empty: a fresh id each time the turn is sent, as a real model would


class _Usage(TypedDict, total=False):
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Turn:
    """One model response: some text, tool calls, or both."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    input_tokens: int = 120
    output_tokens: int = 30

    @classmethod
    def answer(cls, text: str, **usage: Unpack[_Usage]) -> Turn:
        return cls(text=text, **usage)

    @classmethod
    def chant(cls, prefix: str, unit: str, copies: int, **usage: Unpack[_Usage]) -> Turn:
        """An answer that starts well and then repeats ``unit`` until ``max_tokens`` (a looping model).

        ``unit`` may hold ``{n}``, replaced by the copy's number (a counter that changes).
        """
        body = "".join(unit.replace("{n}", str(n)) for n in range(1, copies + 1))
        return cls(text=prefix + body, **usage)

    @classmethod
    def call(cls, name: str, /, **arguments: Any) -> Turn:
        return cls(tool_calls=(ToolCall(name, arguments),))

    @classmethod
    def calls(cls, *calls: tuple[str, dict[str, Any]], **usage: Unpack[_Usage]) -> Turn:
        return cls(tool_calls=tuple(ToolCall(name, args) for name, args in calls), **usage)


@dataclass
class Request:
    api: str  # "chat", "responses" or "messages"
    body: dict[str, Any]

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))


Script = Callable[[Request], Turn]


def turns(*script: Turn, then: Turn | None = None) -> Script:
    """Answer with each turn in order (thread-safe); after the last, ``then`` (default: the last)."""
    lock = threading.Lock()
    queue = list(script)

    def next_turn(request: Request) -> Turn:
        with lock:
            if len(queue) > 1 or (queue and then is not None):
                return queue.pop(0)
            return queue[0] if queue else (then or Turn.answer(""))

    return next_turn


class ScriptedModelServer:
    """A loopback HTTP server answering model API calls from a script."""

    def __init__(self, script: Script, *, model: str = "gpt-4o-mini", strict: bool = True):
        """``strict``: reject (HTTP 400) a history whose tool calls and results do not pair
        up, as the real providers do."""
        self.script = script
        self.model = model
        self.strict = strict
        self.requests: list[Request] = []
        self.rejected: list[tuple[Request, list[str]]] = []  # what a real provider would refuse, and why
        self._lock = threading.Lock()
        self.dropped_connections = 0  # clients that closed the connection before reading everything
        self._server = _QuietServer(("127.0.0.1", 0), _handler_for(self))
        self._server.on_drop = self._dropped
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        assert isinstance(host, str)  # an AF_INET server's address
        return f"http://{host}:{port}"

    @property
    def openai_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def anthropic_url(self) -> str:
        return self.base_url

    def start(self) -> ScriptedModelServer:
        if self._thread is None:
            # A short poll interval: stop() waits for at most one poll.
            self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                            name="scripted-model", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _dropped(self) -> None:
        with self._lock:
            self.dropped_connections += 1

    def _answer(self, request: Request) -> Turn:
        with self._lock:
            self.requests.append(request)
        turn = self.script(request)
        calls = tuple(c if c.call_id else ToolCall(c.name, c.arguments, _next_id("call")) for c in turn.tool_calls)
        return Turn(turn.text, calls, turn.input_tokens, turn.output_tokens)


class _QuietServer(ThreadingHTTPServer):
    """A client that hangs up mid-stream (a closed stream) is counted, not printed as an error."""

    on_drop: Callable[[], None] = staticmethod(lambda: None)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            self.on_drop()
            return
        super().handle_error(request, client_address)


# --- wire formats ------------------------------------------------------------------------------


def _chat_completion(turn: Turn, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
    if turn.tool_calls:
        message["tool_calls"] = [
            {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for c in turn.tool_calls
        ]
    return {
        "id": _next_id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if turn.tool_calls else "stop"}],
        "usage": {"prompt_tokens": turn.input_tokens, "completion_tokens": turn.output_tokens,
                  "total_tokens": turn.input_tokens + turn.output_tokens},
    }


def _chat_chunks(turn: Turn, model: str, include_usage: bool) -> Iterator[dict[str, Any]]:
    base = {"id": _next_id("chatcmpl"), "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(turn.text):
        yield chunk({"content": piece})
    for index, call in enumerate(turn.tool_calls):
        arguments = json.dumps(call.arguments)
        yield chunk({"tool_calls": [{"index": index, "id": call.call_id, "type": "function",
                                     "function": {"name": call.name, "arguments": ""}}]})
        yield chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})
    yield chunk({}, "tool_calls" if turn.tool_calls else "stop")
    if include_usage:
        yield {**base, "choices": [], "usage": {"prompt_tokens": turn.input_tokens,
                                                 "completion_tokens": turn.output_tokens,
                                                 "total_tokens": turn.input_tokens + turn.output_tokens}}


def _response(turn: Turn, model: str) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if turn.text:
        output.append({"type": "message", "id": _next_id("msg"), "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": turn.text, "annotations": []}]})
    for call in turn.tool_calls:
        output.append({"type": "function_call", "id": _next_id("fc"), "call_id": call.call_id, "name": call.name,
                       "arguments": json.dumps(call.arguments), "status": "completed"})
    return {
        "id": _next_id("resp"),
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {"input_tokens": turn.input_tokens, "output_tokens": turn.output_tokens,
                  "total_tokens": turn.input_tokens + turn.output_tokens,
                  "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
    }


def _response_events(turn: Turn, model: str) -> Iterator[tuple[str, dict[str, Any]]]:
    final = _response(turn, model)
    created = {**final, "status": "in_progress", "output": [], "usage": None}
    yield "response.created", {"type": "response.created", "sequence_number": 0, "response": created}
    sequence = 1
    for index, item in enumerate(final["output"]):
        yield "response.output_item.added", {"type": "response.output_item.added", "sequence_number": sequence,
                                             "output_index": index, "item": item}
        sequence += 1
        if item["type"] == "message":
            for piece in _pieces(turn.text):
                yield "response.output_text.delta", {"type": "response.output_text.delta",
                                                     "sequence_number": sequence, "item_id": item["id"],
                                                     "output_index": index, "content_index": 0,
                                                     "delta": piece, "logprobs": []}
                sequence += 1
        yield "response.output_item.done", {"type": "response.output_item.done", "sequence_number": sequence,
                                            "output_index": index, "item": item}
        sequence += 1
    yield "response.completed", {"type": "response.completed", "sequence_number": sequence, "response": final}


def _message(turn: Turn, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if turn.text:
        content.append({"type": "text", "text": turn.text})
    for call in turn.tool_calls:
        content.append({"type": "tool_use", "id": call.call_id.replace("call", "toolu"), "name": call.name,
                        "input": call.arguments})
    return {
        "id": _next_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if turn.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": turn.input_tokens, "output_tokens": turn.output_tokens},
    }


def _message_events(turn: Turn, model: str) -> Iterator[tuple[str, dict[str, Any]]]:
    final = _message(turn, model)
    start = {**final, "content": [], "stop_reason": None,
             "usage": {"input_tokens": turn.input_tokens, "output_tokens": 1}}
    yield "message_start", {"type": "message_start", "message": start}
    for index, block in enumerate(final["content"]):
        if block["type"] == "text":
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {"type": "text", "text": ""}}
            for piece in _pieces(block["text"]):
                yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                              "delta": {"type": "text_delta", "text": piece}}
        else:
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {**block, "input": {}}}
            yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": {"type": "input_json_delta",
                                                    "partial_json": json.dumps(block["input"])}}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": final["stop_reason"], "stop_sequence": None},
                            "usage": {"output_tokens": turn.output_tokens}}
    yield "message_stop", {"type": "message_stop"}


_ROUTES = {"/v1/chat/completions": "chat", "/chat/completions": "chat", "/v1/responses": "responses",
           "/responses": "responses", "/v1/messages": "messages"}


def _handler_for(server: ScriptedModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            pass  # quiet: tests and the demo print what matters

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            api = _ROUTES.get(self.path.split("?")[0])
            length = int(self.headers.get("content-length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._send_json(400, {"error": {"message": "invalid JSON", "type": "invalid_request_error"}})
                return
            if api is None:
                self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                return
            request = Request(api, body)
            if server.strict and api in ("chat", "messages"):
                problems = history_problems(body.get("messages") or [], "openai" if api == "chat" else "anthropic")
                if problems:
                    with server._lock:
                        server.rejected.append((request, problems))
                    self._send_json(400, {"type": "error", "error": {
                        "type": "invalid_request_error", "message": "; ".join(problems)}})
                    return
            turn = server._answer(request)
            model = body.get("model") or server.model
            if api == "chat":
                if request.stream:
                    include = bool((body.get("stream_options") or {}).get("include_usage"))
                    self._send_events((None, c) for c in _chat_chunks(turn, model, include))
                else:
                    self._send_json(200, _chat_completion(turn, model))
            elif api == "responses":
                if request.stream:
                    self._send_events(_response_events(turn, model))
                else:
                    self._send_json(200, _response(turn, model))
            elif request.stream:
                self._send_events(_message_events(turn, model))
            else:
                self._send_json(200, _message(turn, model))

        def _send_json(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _send_events(self, events: Any) -> None:
            parts = []
            for name, payload in events:
                prefix = f"event: {name}\n" if name else ""
                parts.append(f"{prefix}data: {json.dumps(payload)}\n\n")
            if self.path.endswith("completions"):
                parts.append("data: [DONE]\n\n")
            data = "".join(parts).encode()
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
