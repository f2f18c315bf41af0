"""The Responses accumulator core: the twin of ``rust/src/accumulate/responses.rs`` (whose
module docs give the rules)."""

from __future__ import annotations

from .json import _ABSENT, _U64_MAX, _as_str, _dumps
from .mod import (_ANY, _CODE_INTERPRETER_CALL, _CUSTOM_TOOL_CALL, _FUNCTION_CALL, _MCP_CALL, _MESSAGE,
                  _REASONING, _Core, _ItemStore, _TextSpec, _apply_part, _apply_text, _event_error_warning,
                  _fresh_part, _index_warning, _output_of, _part_mut, _raw_object, _raw_value, _with_output)


_R_OUTPUT_TEXT = _TextSpec(_MESSAGE, "text", "text", "content", ("output_text",), "output_text")
_R_REFUSAL = _TextSpec(_MESSAGE, "refusal", "refusal", "content", ("refusal",), "refusal")
_R_REASONING_TEXT = _TextSpec(_REASONING, "text", "text", "content", ("reasoning_text",), "reasoning_text")
_R_SUMMARY_TEXT = _TextSpec(_REASONING, "text", "text", "summary", ("summary_text",), "summary_text")
_R_FUNCTION_ARGS = _TextSpec(_FUNCTION_CALL, "arguments", "arguments")
_R_CUSTOM_INPUT = _TextSpec(_CUSTOM_TOOL_CALL, "input", "input")
_R_MCP_ARGS = _TextSpec(_MCP_CALL, "arguments", "arguments")
_R_CODE = _TextSpec(_CODE_INTERPRETER_CALL, "code", "code")

_RESPONSE_TEXT = {}
for _name, _spec in (
    ("response.output_text", _R_OUTPUT_TEXT),
    ("response.function_call_arguments", _R_FUNCTION_ARGS),
    ("response.reasoning_text", _R_REASONING_TEXT),
    ("response.reasoning_summary_text", _R_SUMMARY_TEXT),
    ("response.refusal", _R_REFUSAL),
    ("response.code_interpreter_call_code", _R_CODE),
    ("response.custom_tool_call_input", _R_CUSTOM_INPUT),
    ("response.mcp_call_arguments", _R_MCP_ARGS),
):
    _RESPONSE_TEXT[_name + ".delta"] = (_spec, False)
    _RESPONSE_TEXT[_name + ".done"] = (_spec, True)

_RESPONSE_USED = frozenset(_RESPONSE_TEXT) | frozenset(
    [
        "response.created", "response.queued", "response.in_progress", "response.completed",
        "response.incomplete", "response.failed", "response.output_item.added",
        "response.output_item.done", "response.content_part.added", "response.content_part.done",
        "response.reasoning_part.added", "response.reasoning_part.done",
        "response.reasoning_summary_part.added", "response.reasoning_summary_part.done",
        "response.output_text.annotation.added",
    ]
)
_LIFECYCLE_OPEN = frozenset(["response.created", "response.queued", "response.in_progress"])
_LIFECYCLE_FINAL = frozenset(["response.completed", "response.incomplete", "response.failed"])


class ResponseCore(_Core):
    """Responses accumulator core (pure Python)."""

    __slots__ = ("_base", "_implied", "_items", "_last_sequence")

    def __init__(self, max_event_size: int | None = 16 * 1024 * 1024) -> None:
        super().__init__(max_event_size)
        self._base: dict | None = None
        self._implied = False
        self._items = _ItemStore(False)
        self._last_sequence: int | None = None

    def _add(self, payload: bytes) -> None:
        ev = self._read_stream_event(payload, _RESPONSE_USED)
        if ev is None:
            return
        self._events += 1
        n = ev.get("sequence_number")
        if n is not None:
            previous = self._last_sequence
            if previous is not None and previous + 1 != n:
                self._warnings.append(
                    f"sequence gap: expected {(previous + 1) & _U64_MAX}, got {n}"
                )
            self._last_sequence = n
        if not self._apply(ev):
            self._unknown += 1

    def _apply(self, ev: dict) -> bool:
        kind = ev.get("type") or ""
        text = _RESPONSE_TEXT.get(kind)
        if text is not None:
            used = _apply_text(self._items, self._warnings, self._cap, ev, text[0], text[1])
            self._implied |= used
            return used
        if kind in _LIFECYCLE_OPEN:
            return self._lifecycle(ev, kind, False)
        if kind in _LIFECYCLE_FINAL:
            return self._lifecycle(ev, kind, True)
        if kind == "response.output_item.added" or kind == "response.output_item.done":
            item = _raw_object(ev.get("item"))
            if item is None:
                return False
            if kind.endswith("added"):
                self._items.added(item, ev.get("output_index"), kind, self._warnings)
            else:
                self._items.done_item(item, ev.get("output_index"), kind, self._warnings)
            used = True
        elif kind == "response.content_part.added" or kind == "response.content_part.done":
            used = _apply_part(self._items, self._warnings, ev, "content", _ANY, kind.endswith("done"))
        elif kind == "response.reasoning_part.added" or kind == "response.reasoning_part.done":
            used = _apply_part(self._items, self._warnings, ev, "content", _REASONING, kind.endswith("done"))
        elif kind in ("response.reasoning_summary_part.added", "response.reasoning_summary_part.done"):
            used = _apply_part(self._items, self._warnings, ev, "summary", _REASONING, kind.endswith("done"))
        elif kind == "response.output_text.annotation.added":
            used = self._annotation(ev)
        elif kind == "error":
            self._warnings.append(_event_error_warning(ev))
            used = False
        else:
            used = False
        self._implied |= used
        return used

    def _lifecycle(self, ev: dict, kind: str, is_final: bool) -> bool:
        response = _raw_object(ev.get("response"))
        if response is None:
            return False
        output = _output_of(response)
        if isinstance(output, list) and output:
            if is_final:
                self._items.replace_with(output, kind, self._warnings)
            elif not self._items.items:
                for k, item in enumerate(output):
                    if isinstance(item, dict):
                        self._items.added(item, k, kind, self._warnings)
        self._base = response
        return True

    def _annotation(self, ev: dict) -> bool:
        annotation = _raw_value(ev.get("annotation"))
        if annotation is _ABSENT:
            return False
        p = self._items.resolve(ev.get("item_id"), ev.get("output_index"), _MESSAGE)
        item = self._items.items[p]
        content_index = ev.get("content_index")
        found = _part_mut(
            item, "content", content_index, ("output_text",), "text",
            lambda: _fresh_part("output_text", "text"),
        )
        if found is None:
            self._warnings.append(_index_warning(ev.get("type") or "", content_index))
            return True
        part = found[1]
        annotations = part.get("annotations")
        if not isinstance(annotations, list):
            annotations = []
            part["annotations"] = annotations
        i = ev.get("annotation_index")
        if i is not None and i < len(annotations):
            annotations[i] = annotation
        else:
            annotations.append(annotation)
        return True

    def snapshot_json(self) -> bytes | None:
        base = self._base
        if base is None:
            if not self._implied:
                return None
            base = {"id": "", "object": "response", "status": "in_progress", "output": None}
        return _dumps(_with_output(base, self._items.items))

    def output_text(self) -> str:
        pieces = []
        for item in self._items.items:
            if item.get("type") != "message":
                continue
            parts = item.get("content")
            if not isinstance(parts, list):
                continue
            for part in parts:
                if isinstance(part, dict) and part.get("type") == "output_text":
                    t = _as_str(part.get("text"))
                    if t is not None:
                        pieces.append(t)
        return "".join(pieces)
