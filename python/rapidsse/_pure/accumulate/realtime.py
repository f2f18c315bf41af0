"""The Realtime accumulator core: the twin of ``rust/src/accumulate/realtime.rs`` (whose module
docs give the rules)."""

from __future__ import annotations

from .json import _dumps
from .mod import (_ANY, _FUNCTION_CALL, _MCP_CALL, _MESSAGE, _Core, _ItemStore, _TextSpec, _apply_part,
                  _apply_text, _event_error_warning, _output_of, _raw_object, _with_output)


_RT_TEXT = _TextSpec(_MESSAGE, "text", "text", "content", ("text", "output_text"), "text")
_RT_TRANSCRIPT = _TextSpec(_MESSAGE, "transcript", "transcript", "content", ("audio", "output_audio"), "audio")
_RT_FUNCTION_ARGS = _TextSpec(_FUNCTION_CALL, "arguments", "arguments")
_RT_MCP_ARGS = _TextSpec(_MCP_CALL, "arguments", "arguments")
_REALTIME_TEXT = {
    "response.output_text.delta": (_RT_TEXT, False),
    "response.text.delta": (_RT_TEXT, False),
    "response.output_text.done": (_RT_TEXT, True),
    "response.text.done": (_RT_TEXT, True),
    "response.output_audio_transcript.delta": (_RT_TRANSCRIPT, False),
    "response.audio_transcript.delta": (_RT_TRANSCRIPT, False),
    "response.output_audio_transcript.done": (_RT_TRANSCRIPT, True),
    "response.audio_transcript.done": (_RT_TRANSCRIPT, True),
    "response.function_call_arguments.delta": (_RT_FUNCTION_ARGS, False),
    "response.function_call_arguments.done": (_RT_FUNCTION_ARGS, True),
    "response.mcp_call_arguments.delta": (_RT_MCP_ARGS, False),
    "response.mcp_call_arguments.done": (_RT_MCP_ARGS, True),
}
_REALTIME_USED = frozenset(_REALTIME_TEXT) | frozenset(
    [
        "response.created", "response.done", "response.output_item.added",
        "response.output_item.done", "response.content_part.added", "response.content_part.done",
    ]
)


class _RealtimeResponse:
    __slots__ = ("id", "base", "items")

    def __init__(self, response_id: str) -> None:
        self.id = response_id
        self.base: dict = {
            "id": response_id,
            "object": "realtime.response",
            "status": "in_progress",
            "status_details": None,
            "output": None,
            "usage": None,
        }
        self.items = _ItemStore(True)


class RealtimeCore(_Core):
    """Realtime accumulator core (pure Python)."""

    __slots__ = ("_responses", "_by_id")

    def __init__(self, max_event_size: int | None = 16 * 1024 * 1024) -> None:
        super().__init__(max_event_size)
        self._responses: list[_RealtimeResponse] = []
        self._by_id: dict[str, int] = {}

    def _add(self, payload: bytes) -> None:
        ev = self._read_stream_event(payload, _REALTIME_USED)
        if ev is None:
            return
        self._events += 1
        if not self._apply(ev):
            self._unknown += 1

    def _apply(self, ev: dict) -> bool:
        kind = ev.get("type") or ""
        text = _REALTIME_TEXT.get(kind)
        if text is not None:
            spec = text[0]
            response = self._responses[self._response_for(ev)]
            used = _apply_text(response.items, self._warnings, self._cap, ev, spec, text[1])
            if used and spec.kind == _FUNCTION_CALL:
                p = response.items.resolve(ev.get("item_id"), ev.get("output_index"), _FUNCTION_CALL)
                item = response.items.items[p]
                for key in ("call_id", "name"):
                    current = item.get(key)
                    value = ev.get(key)
                    if not (type(current) is str and current) and value is not None:
                        item[key] = value
            return used
        if kind == "response.created" or kind == "response.done":
            return self._lifecycle(ev, kind, kind == "response.done")
        if kind == "response.output_item.added" or kind == "response.output_item.done":
            item = _raw_object(ev.get("item"))
            if item is None:
                return False
            items = self._responses[self._response_for(ev)].items
            if kind.endswith("added"):
                items.added(item, ev.get("output_index"), kind, self._warnings)
            else:
                items.done_item(item, ev.get("output_index"), kind, self._warnings)
            return True
        if kind == "response.content_part.added" or kind == "response.content_part.done":
            items = self._responses[self._response_for(ev)].items
            return _apply_part(items, self._warnings, ev, "content", _ANY, kind.endswith("done"))
        if kind == "error":
            self._warnings.append(_event_error_warning(ev))
        return False

    def _response_for(self, ev: dict) -> int:
        response_id = ev.get("response_id")
        if response_id is not None:
            return self._response_by_id(response_id)
        if not self._responses:
            return self._response_by_id("")
        return len(self._responses) - 1

    def _response_by_id(self, response_id: str) -> int:
        r = self._by_id.get(response_id)
        if r is not None:
            return r
        self._responses.append(_RealtimeResponse(response_id))
        r = len(self._responses) - 1
        self._by_id[response_id] = r
        return r

    def _lifecycle(self, ev: dict, kind: str, is_done: bool) -> bool:
        base = _raw_object(ev.get("response"))
        if base is None:
            return False
        response_id = base.get("id")
        if type(response_id) is not str:
            response_id = ""
        output = _output_of(base)
        if is_done:
            usage = base.get("usage")
            empty_usage = usage is None or (isinstance(usage, dict) and not usage)
            if empty_usage:
                event_usage = _raw_object(ev.get("usage"))
                if event_usage is not None:
                    base["usage"] = event_usage
        response = self._responses[self._response_by_id(response_id)]
        if isinstance(output, list) and output:
            if is_done:
                response.items.replace_with(output, kind, self._warnings)
            elif not response.items.items:
                for k, item in enumerate(output):
                    if isinstance(item, dict):
                        response.items.added(item, k, kind, self._warnings)
        response.base = base
        return True

    def snapshot_json(self) -> bytes | None:
        if not self._responses:
            return None
        out = {}
        for response in self._responses:
            out[response.id] = _with_output(response.base, response.items.items)
        return _dumps(out)
