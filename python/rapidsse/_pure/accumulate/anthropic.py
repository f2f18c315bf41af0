"""The Anthropic Messages accumulator core: the twin of ``rust/src/accumulate/anthropic.rs``
(whose module docs give the rules)."""

from __future__ import annotations

from typing import Any

import jiter as _jiter

from .json import _ABSENT, _FAIL, _Buf, _dumps, _strict
from .mod import (_Core, _Malformed, _append_text, _is_done_marker, _parse_event, _raw_object, _typed_fields,
                  _utf8_len, _with_output_key)


_A_EVENT_STR = frozenset(["type"])
_A_EVENT_U64 = frozenset(["index"])
_A_EVENT_RAW = frozenset(
    ["message", "content_block", "delta", "usage", "error", "context_management", "input_transformations"]
)
_A_DELTA_STR = frozenset(["type", "text", "thinking", "signature", "partial_json", "original_type"])
_A_DELTA_RAW = frozenset(["citation", "content", "encrypted_content", "data"])
_A_USED = frozenset(
    ["message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "error"]
)
_A_TOOL_INPUT_BLOCKS = frozenset(["tool_use", "server_tool_use", "mcp_tool_use"])


def _typed_anthropic_event(top: dict) -> Any:
    return _typed_fields(top, _A_EVENT_STR, _A_EVENT_U64, _A_EVENT_RAW)


def _unwrap_unknown(value: Any) -> Any:
    """A typed ``UnknownVariant``'s encoding as its ``data``."""
    if isinstance(value, dict) and value.get("type") == "__unknown__" and isinstance(value.get("data"), dict):
        return value["data"]
    return value


def _block_delta(raw: Any) -> dict | None:
    """``serde_json::from_str::<BlockDelta>`` of a delta fragment: its read fields, or None."""
    if not isinstance(raw, dict):
        return None
    fields = _typed_fields(raw, _A_DELTA_STR, frozenset(), _A_DELTA_RAW)
    return fields if type(fields) is dict else None


def _finite(value: Any) -> bool:
    if type(value) is float:
        return value - value == 0.0
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def _parse_partial(text: str) -> Any:
    """Input JSON parsed with jiter's partial mode (as the Rust core does), or ``_ABSENT``."""
    try:
        value = _jiter.from_json(text.encode("utf-8", "surrogatepass"), partial_mode=True, allow_inf_nan=False)
    except ValueError:
        return _ABSENT
    return value if _finite(value) else _ABSENT


class _Block:
    __slots__ = ("object", "input_json")

    def __init__(self, obj: dict) -> None:
        self.object = obj
        self.input_json: _Buf | None = _Buf([], 0) if obj.get("type") in _A_TOOL_INPUT_BLOCKS else None

    def snapshot(self) -> dict:
        buf = self.input_json
        if buf is None or not buf.parts:
            return self.object
        text = buf.value()
        if not text:
            return self.object
        parsed = _parse_partial(text)
        if parsed is _ABSENT:
            return self.object
        if "input" not in self.object:
            return {**self.object, "input": parsed}
        return {k: (parsed if k == "input" else v) for k, v in self.object.items()}


class AnthropicCore(_Core):
    """Anthropic Messages accumulator core (pure Python)."""

    __slots__ = ("_message", "_started", "_blocks")

    def __init__(self, max_event_size: int | None = 16 * 1024 * 1024) -> None:
        super().__init__(max_event_size)
        self._message: dict | None = None
        self._started = False
        self._blocks: list[_Block] = []

    def _add(self, payload: bytes) -> None:
        if _is_done_marker(payload):
            return
        try:
            _, ev = _parse_event(payload, self._events, _typed_anthropic_event)
        except _Malformed as m:
            self._events += 1
            self._malformed(m.kind)
            return
        self._events += 1
        kind = ev.get("type") or ""
        if kind == "message_start":
            self._message_start(ev)
        elif kind == "content_block_start":
            self._block_start(ev)
        elif kind == "content_block_delta":
            self._block_delta(ev)
        elif kind == "content_block_stop":
            self._block_stop(ev)
        elif kind == "message_delta":
            self._message_delta(ev)
        elif kind == "message_stop":
            pass
        elif kind == "error":
            self._error(ev.get("error"))
        else:
            self._unknown += 1

    def _malformed(self, kind: str) -> None:
        self._unknown += 1
        if kind in _A_USED:
            self._warnings.append(f"{kind}: malformed event ignored")

    def _message_for(self, kind: str) -> dict:
        if self._message is None:
            self._warnings.append(f"{kind} before message_start")
            self._message = {"type": "message", "role": "assistant", "content": []}
        return self._message

    def _message_start(self, ev: dict) -> None:
        if self._started:
            self._unknown += 1
            return
        message = _raw_object(ev.get("message"))
        if message is None:
            self._malformed("message_start")
            return
        earlier = self._blocks
        self._blocks = []
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                block = _unwrap_unknown(block)
                if isinstance(block, dict):
                    self._blocks.append(_Block(block))
            message["content"] = []
        else:
            message["content"] = []
        self._blocks.extend(earlier)
        self._message = message
        self._started = True

    def _block_start(self, ev: dict) -> None:
        raw = ev.get("content_block")
        block = _ABSENT if raw is None else _strict(raw)
        block = _unwrap_unknown(block) if block is not _FAIL else _ABSENT
        if not isinstance(block, dict):
            self._malformed("content_block_start")
            return
        model = None
        if block.get("type") == "fallback":
            to = block.get("to")
            if isinstance(to, dict) and type(to.get("model")) is str:
                model = to["model"]
        message = self._message_for("content_block_start")
        if model is not None:
            message["model"] = model
        self._blocks.append(_Block(block))

    def _block_delta(self, ev: dict) -> None:
        delta = _block_delta(ev.get("delta"))
        if delta is None:
            self._malformed("content_block_delta")
            return
        if delta.get("type") == "__unknown__":
            delta = _block_delta(delta.get("data"))
            if delta is None:
                self._malformed("content_block_delta")
                return
            if delta.get("original_type") is not None:
                self._unknown += 1
                return
        self._message_for("content_block_delta")
        index = ev.get("index") or 0
        if index >= len(self._blocks):
            self._warnings.append(f"content_block_delta: no content block at index {index}")
            return
        block = self._blocks[index]
        obj = block.object
        block_type = obj.get("type")
        kind = delta.get("type")
        cap = self._cap
        if kind == "text_delta":
            text = delta.get("text")
            if block_type == "text" and text is not None:
                _append_text(obj, "text", text, cap)
        elif kind == "thinking_delta":
            text = delta.get("thinking")
            if block_type == "thinking" and text is not None:
                _append_text(obj, "thinking", text, cap)
        elif kind == "signature_delta":
            signature = delta.get("signature")
            if block_type == "thinking" and signature is not None:
                obj["signature"] = signature
        elif kind == "input_json_delta":
            piece = delta.get("partial_json")
            buf = block.input_json
            if buf is not None and piece is not None:
                size = _utf8_len(piece)
                if cap.limit is None or cap.admits(buf.size, piece):
                    buf.parts.append(piece)
                    buf.size += size
        elif kind == "citations_delta":
            raw = delta.get("citation")
            citation = _ABSENT if raw is None else _strict(raw)
            if block_type == "text" and citation is not _ABSENT and citation is not _FAIL:
                citation = _unwrap_unknown(citation)
                citations = obj.get("citations")
                if isinstance(citations, list):
                    citations.append(citation)
                else:
                    obj["citations"] = [citation]
        elif kind == "compaction_delta":
            if block_type == "compaction":
                for key in ("content", "encrypted_content"):
                    raw = delta.get(key)
                    v = None if raw is None else _strict(raw)
                    obj[key] = None if v is _FAIL else v
        else:
            self._unknown += 1

    def _block_stop(self, ev: dict) -> None:
        index = ev.get("index") or 0
        if index >= len(self._blocks):
            return
        block = self._blocks[index]
        buf = block.input_json
        if buf is None or not buf.parts:
            return
        text = buf.value()
        if text:
            parsed = _parse_partial(text)
            if parsed is _ABSENT:
                self._warnings.append(f"content_block_stop: the input JSON of block {index} does not parse")
            else:
                block.object["input"] = parsed
        block.input_json = _Buf([], 0)

    def _message_delta(self, ev: dict) -> None:
        raw = ev.get("delta", _ABSENT)
        delta = {} if raw is _ABSENT or raw is None else _raw_object(raw)
        raw = ev.get("usage")
        usage = {} if raw is None else _raw_object(raw)
        if delta is None or usage is None:
            self._malformed("message_delta")
            return
        message = self._message_for("message_delta")
        for key in ("stop_reason", "stop_sequence", "stop_details"):
            message[key] = delta.get(key)
        for key, value in delta.items():
            if value is not None:
                message[key] = value
        for key in ("context_management", "input_transformations"):
            raw = ev.get(key)
            value = None if raw is None else _strict(raw)
            if value is not None and value is not _FAIL:
                message[key] = value
        if not usage:
            return
        ours = message.get("usage")
        if not isinstance(ours, dict):
            ours = message["usage"] = {}
        for key, value in usage.items():
            if value is not None:
                ours[key] = value

    def snapshot_json(self) -> bytes | None:
        if self._message is None:
            return None
        return _dumps(_with_output_key(self._message, "content", [b.snapshot() for b in self._blocks]))
