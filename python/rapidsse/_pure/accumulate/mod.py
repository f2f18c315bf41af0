"""What the pure cores share: the twin of ``rust/src/accumulate/mod.rs`` (whose module docs give
the shared rules).

Reading one event (``parse_event``: the typed read of a ``StreamEvent`` or of a chunk's fields,
and the rejection messages), the text cap, settling the server's items against ours, the item
store and text events of Responses and Realtime, and the two bases: ``_Core`` (framing, counts,
the binding's interface: the ``Accumulate`` trait and the ``Tap``) and ``_ChunkCore`` (the
whole-object streams, as ``Tally``: Chat Completions, Completions, Gemini).

Known differences from the Rust side, all in rejection *messages* only (never in decisions):
the excerpt quoted in a message is formatted like Rust's ``{:?}`` of a string, with Python's
``str.isprintable`` (its Unicode version) for Rust's printable table and an approximation of the
Grapheme_Extend property (categories Mn/Me plus Other_Grapheme_Extend), so an exotic character in
the first 80 bytes of a rejected payload may be escaped differently."""

from __future__ import annotations

import abc
import functools
import unicodedata
from typing import Any, Callable

import msgspec

from ..._schema import UnknownEvent
from ..._wire import encode as _encode
from ...decoding import InvalidEvent
from ...errors import DecodeError, EventTooLarge
from ..framing import Framer, as_bytes as _as_bytes
from ..guard import Exclusive
from .json import (_ABSENT, _FAIL, _STR_TYPES, _U64_MAX, _BadNum, _BadStr, _Buf, _SyntaxError, _dumps,
                   _entries, _get_eq, _has_bad_utf8, _load, _non_empty_str, _strict)


# --------------------------------------------------------------------------------------------
# Reading one event (parse_event, read_stream_event)


# Rust's `{:?}` of a str (for the excerpt in error messages).
_OTHER_GRAPHEME_EXTEND = frozenset(
    [0x09BE, 0x09D7, 0x0B3E, 0x0B57, 0x0BBE, 0x0BD7, 0x0CC2, 0x0CD5, 0x0CD6, 0x0D3E, 0x0D57]
    + [0x0DCF, 0x0DDF, 0x1B35, 0x200C, 0x302E, 0x302F, 0xFF9E, 0xFF9F, 0x1133E, 0x11357]
    + [0x114B0, 0x114BD, 0x115AF, 0x11930, 0x1D165, 0x1D16E, 0x1D16F, 0x1D170, 0x1D171, 0x1D172]
    + list(range(0xE0020, 0xE0080))
)
_DEBUG_ESCAPES = {"\0": "\\0", "\t": "\\t", "\r": "\\r", "\n": "\\n", "\\": "\\\\", '"': '\\"'}


def _rust_debug(s: str) -> str:
    out = ['"']
    for ch in s:
        esc = _DEBUG_ESCAPES.get(ch)
        if esc is not None:
            out.append(esc)
        elif " " <= ch <= "~":
            out.append(ch)
        elif (
            unicodedata.category(ch) in ("Mn", "Me")
            or ord(ch) in _OTHER_GRAPHEME_EXTEND
            or not ch.isprintable()
        ):
            out.append(f"\\u{{{ord(ch):x}}}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _excerpt(payload: bytes) -> str:
    return _rust_debug(payload[:80].decode("utf-8", "replace"))


_ASCII_WS = b" \t\n\x0c\r"


def _is_done_marker(payload: bytes) -> bool:
    return payload.strip(_ASCII_WS) == b"[DONE]"


class _Rejected(Exception):
    """The payload is an AccumulateError (``str(exc)`` is its Display); ``limit`` is set for
    ``TextTooLarge`` (a delta refused by the text cap)."""

    limit: int | None = None


class _Malformed(Exception):
    def __init__(self, kind: str) -> None:
        self.kind = kind


_SYNTAX = "syntax"
_DATA = "data"


def _parse_event(payload: bytes, event_index: int, typed: Any) -> tuple[Any, dict]:
    """``parse_event``: (the object, its typed read fields); raises _Rejected / _Malformed."""
    try:
        payload.decode("utf-8")
    except UnicodeDecodeError as e:
        line = payload.count(b"\n", 0, e.start) + 1
        column = e.start - (payload.rfind(b"\n", 0, e.start) + 1) + 1
        where = f"at line {line} column {column}"
        raise _Rejected(
            f"invalid JSON in event {event_index} {where}: invalid UTF-8 {where}: {_excerpt(payload)}"
        ) from None
    try:
        tree = _load(payload)
    except _SyntaxError as e:
        where = f"at line {e.line} column {e.column}"
        raise _Rejected(
            f"invalid JSON in event {event_index} {where}: {e.message} {where}: {_excerpt(payload)}"
        ) from None
    if isinstance(tree, dict) and payload.lstrip(_ASCII_WS)[:1] == b"{":
        fields = typed(tree)
        if type(fields) is dict:
            return tree, fields
        if fields is _DATA:
            raise _Malformed(_head_kind(tree))
    raise _Rejected(f"event {event_index} is not a JSON object: {_excerpt(payload)}")


def _head_kind(top: dict) -> str:
    kind = None
    seen = False
    for k, v in _entries(top):
        if type(k) is not str:
            return "?"
        if k == "type":
            if seen:
                return "?"
            seen = True
            if v is None or type(v) is str:
                kind = v
            else:
                return "?"
    return kind if kind is not None else "?"


def _invalid(v: Any) -> str:
    """serde's ``peek_invalid_type``: a data error, unless the value itself does not parse."""
    return _SYNTAX if (type(v) is _BadStr or type(v) is _BadNum) else _DATA


_EV_STR = frozenset(
    ["type", "item_id", "response_id", "delta", "text", "refusal", "arguments", "input"]
    + ["transcript", "name", "call_id"]
)
_EV_U64 = frozenset(
    ["sequence_number", "output_index", "content_index", "summary_index", "annotation_index"]
)
_EV_RAW = frozenset(
    ["code", "item", "part", "response", "annotation", "error", "usage", "message"]
)


_EV_CLASS = {**{k: 0 for k in _EV_STR}, **{k: 1 for k in _EV_U64}, **{k: 2 for k in _EV_RAW}}
_EV_READ = frozenset(_EV_CLASS)


def _typed_event(top: dict) -> Any:
    """The typed parse of a ``StreamEvent``: its read fields, or _DATA / _SYNTAX."""
    if type(top) is dict:
        # Fast path (clean JSON, no duplicate keys): any failure is a data error, so the order
        # of the checks does not matter; the object itself serves as the fields.
        for k in _EV_READ.intersection(top):
            v = top[k]
            if v is None:
                continue
            c = _EV_CLASS[k]
            if c == 0:
                if type(v) is not str:
                    return _DATA
            elif c == 1 and (type(v) is not int or v < 0):
                return _DATA
        return top
    return _typed_fields(top, _EV_STR, _EV_U64, _EV_RAW)


def _typed_fields(top: Any, strs: frozenset, u64s: frozenset, raws: frozenset) -> Any:
    """A serde derive of an object with string, u64 and raw fields, read member by member (the
    object as its pairs, duplicates kept): its read fields, or _DATA / _SYNTAX."""
    fields: dict = {}
    for k, v in _entries(top):
        if type(k) is not str:
            return _SYNTAX
        if k in strs:
            if k in fields:
                return _DATA
            if v is None or type(v) is str:
                fields[k] = v
            else:
                return _invalid(v)
        elif k in u64s:
            if k in fields:
                return _DATA
            if v is None or (type(v) is int and 0 <= v <= _U64_MAX):
                fields[k] = v
            else:
                return _invalid(v)
        elif k in raws:
            if k in fields:
                return _DATA
            if _has_bad_utf8(v):
                return _SYNTAX
            fields[k] = v
    return fields


def _typed_reader(strs: frozenset, raws: frozenset) -> Callable[[dict], Any]:
    """The typed parse of a chunk whose read fields are the strings ``strs`` and the raw
    fragments ``raws`` (the serde struct of each core): its read fields, or _DATA / _SYNTAX."""
    return functools.partial(_typed_fields, strs=strs, u64s=frozenset(), raws=raws)


def _raw_object(raw: Any) -> dict | None:
    if raw is None:
        return None
    v = _strict(raw)
    return v if isinstance(v, dict) else None


def _raw_value(raw: Any) -> Any:
    """A raw fragment parsed as a Value: the value, or ``_ABSENT`` (missing or unparsable)."""
    if raw is None:
        return _ABSENT
    v = _strict(raw)
    return _ABSENT if v is _FAIL else v


def _error_warning(message: Any) -> str:
    text = message if type(message) is str else "(no message)"
    return f"error event: {text}"


def _event_error_warning(ev: dict) -> str:
    err = _raw_object(ev.get("error"))
    nested = err.get("message") if err is not None else None
    if type(nested) is str:
        return _error_warning(nested)
    flat = _raw_value(ev.get("message"))
    return _error_warning(flat)


# --------------------------------------------------------------------------------------------
# Shared item machinery


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


class _TextCap:
    """``TextCap``: the cap on one accumulated text in UTF-8 bytes (None: none), and the first
    refusal since the core last looked."""

    __slots__ = ("limit", "refused")

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.refused: int | None = None

    def admits(self, size: int, delta: str) -> bool:
        """Whether a text of ``size`` bytes may take ``delta``; a refusal is remembered."""
        limit = self.limit
        if limit is None:
            return True
        total = size + _utf8_len(delta)
        if total > limit:
            if self.refused is None:
                self.refused = total
            return False
        return True


def _text_size(value: Any) -> int:
    t = type(value)
    if t is _Buf:
        return value.size
    if t is str:
        return _utf8_len(value)
    return 0


def _append_text(m: dict, key: str, delta: str, cap: _TextCap) -> None:
    cur = m.get(key)
    t = type(cur)
    if cap.limit is not None:
        size = _text_size(cur) if t is _Buf or t is str else 0
        if not cap.admits(size, delta):
            return
        size += _utf8_len(delta)
    else:
        size = 0
    if t is _Buf:
        cur.parts.append(delta)
        cur.size = size
    elif t is str:
        m[key] = _Buf([cur, delta], size) if cur else delta
    else:
        m[key] = delta


class _Origin:
    __slots__ = ("source", "item")

    def __init__(self, source: str, item: str) -> None:
        self.source = source
        self.item = item

    def warn(self, warnings: list[str], path: str) -> None:
        warnings.append(f"{self.source}: item {self.item} {path} differs from the accumulated deltas")


def _settle_text(m: dict, key: str, server: str, origin: _Origin, path: str, warnings: list) -> None:
    ours = _non_empty_str(m.get(key))
    if not server:
        if ours is None:
            m[key] = ""
        return
    if ours is not None and ours != server:
        origin.warn(warnings, path)
    m[key] = server


_ITEM_TEXT_KEYS = ("arguments", "input", "code")
_PART_TEXT_KEYS = ("text", "refusal", "transcript")
_PART_ARRAYS = ("content", "summary")


def _is_empty_value(m: dict, key: str) -> bool:
    v = m.get(key)
    if v is None:
        return True
    if type(v) is str:
        return not v
    if type(v) is _Buf:
        return not v.value()
    if isinstance(v, list):
        return not v
    return False


def _keep_ours(ours: dict, server: dict, key: str) -> bool:
    if not _is_empty_value(server, key) or ours.get(key) is None:
        return False
    server[key] = ours.pop(key)
    return True


def _compare_text(ours: dict, server: dict, key: str, origin: _Origin, path: str, warnings: list) -> None:
    mine = _non_empty_str(ours.get(key))
    theirs = _non_empty_str(server.get(key))
    if mine is not None and theirs is not None and mine != theirs:
        origin.warn(warnings, path)


def _settle_part(ours: dict, server: dict, origin: _Origin, prefix: str, warnings: list) -> dict:
    _keep_ours(ours, server, "annotations")
    for key in _PART_TEXT_KEYS:
        if not _keep_ours(ours, server, key):
            _compare_text(ours, server, key, origin, prefix + key, warnings)
    return server


def _settle_item(ours: dict, server: dict, origin: _Origin, warnings: list) -> dict:
    for array_key in _PART_ARRAYS:
        if _keep_ours(ours, server, array_key):
            continue
        our_parts = ours.get(array_key)
        server_parts = server.get(array_key)
        if not isinstance(our_parts, list) or not isinstance(server_parts, list):
            continue
        for i, server_part in enumerate(server_parts):
            if i < len(our_parts) and isinstance(our_parts[i], dict) and isinstance(server_part, dict):
                server_parts[i] = _settle_part(
                    our_parts[i], server_part, origin, f"{array_key}[{i}].", warnings
                )
    for key in _ITEM_TEXT_KEYS:
        if not _keep_ours(ours, server, key):
            _compare_text(ours, server, key, origin, key, warnings)
    return server


# ItemKind: the type name an item of that kind has ("" for Any).
_MESSAGE = "message"
_REASONING = "reasoning"
_FUNCTION_CALL = "function_call"
_CUSTOM_TOOL_CALL = "custom_tool_call"
_MCP_CALL = "mcp_call"
_CODE_INTERPRETER_CALL = "code_interpreter_call"
_ANY = ""


def _fits(kind: str, item: dict) -> bool:
    return kind == _ANY or item.get("type") == kind and type(item.get("type")) is str


def _item_id(item: dict) -> str | None:
    v = item.get("id")
    return v if type(v) is str and v else None


class _ItemStore:
    __slots__ = ("realtime", "items", "done", "by_id", "by_index")

    def __init__(self, realtime: bool) -> None:
        self.realtime = realtime
        self.items: list[dict] = []
        self.done: list[bool] = []
        self.by_id: dict[str, int] = {}
        self.by_index: dict[int, int] = {}

    def label(self, p: int) -> str:
        i = _item_id(self.items[p])
        return i if i is not None else f"#{p}"

    def push(self, item: dict, output_index: int | None) -> int:
        p = len(self.items)
        i = _item_id(item)
        if i is not None:
            self.by_id[i] = p
        if output_index is not None:
            self.by_index[output_index] = p
        self.items.append(item)
        self.done.append(False)
        return p

    def existing(self, item: dict, output_index: int | None, for_done: bool) -> int | None:
        i = _item_id(item)
        if i is not None:
            p = self.by_id.get(i)
        elif output_index is not None:
            p = self.by_index.get(output_index)
            if p is not None and _item_id(self.items[p]) is not None:
                return None
        else:
            return None
        if p is None:
            return None
        if not _get_eq(self.items[p], item, "type"):
            return None
        if not for_done and self.done[p]:
            return None
        return p

    def added(self, item: dict, output_index: int | None, source: str, warnings: list) -> int:
        p = self.existing(item, output_index, False)
        if p is None:
            return self.push(item, output_index)
        self.settle(p, item, source, warnings)
        if output_index is not None:
            self.by_index[output_index] = p
        return p

    def done_item(self, item: dict, output_index: int | None, source: str, warnings: list) -> int:
        p = self.existing(item, output_index, True)
        if p is None:
            p = self.push(item, output_index)
        else:
            self.settle(p, item, source, warnings)
        self.done[p] = True
        return p

    def settle(self, p: int, server: dict, source: str, warnings: list) -> None:
        origin = _Origin(source, self.label(p))
        self.items[p] = _settle_item(self.items[p], server, origin, warnings)
        i = _item_id(self.items[p])
        if i is not None:
            self.by_id[i] = p

    def resolve(self, item_id: str | None, output_index: int | None, kind: str) -> int:
        items = self.items
        if item_id:
            p = self.by_id.get(item_id)
            if p is not None and _fits(kind, items[p]):
                return p
            if output_index is not None:
                p = self.by_index.get(output_index)
                if p is not None and _fits(kind, items[p]) and _item_id(items[p]) is None:
                    items[p]["id"] = item_id
                    self.by_id[item_id] = p
                    return p
        elif output_index is not None:
            p = self.by_index.get(output_index)
            if p is not None and _fits(kind, items[p]):
                return p
        elif items:
            p = len(items) - 1
            if _fits(kind, items[p]) and not self.done[p]:
                return p
        return self.push(self.new_item(item_id if item_id is not None else "", kind), output_index)

    def new_item(self, item_id: str, kind: str) -> dict:
        item: dict = {"id": item_id}
        if self.realtime:
            item["object"] = "realtime.item"
        item["type"] = kind or _MESSAGE
        if kind == _MESSAGE or kind == _ANY:
            item["status"] = "in_progress"
            item["role"] = "assistant"
            item["content"] = []
        elif kind == _REASONING:
            item["summary"] = []
            item["content"] = []
        elif kind == _FUNCTION_CALL or kind == _CUSTOM_TOOL_CALL:
            item["status"] = "in_progress"
            item["call_id"] = ""
            item["name"] = ""
            item["arguments" if kind == _FUNCTION_CALL else "input"] = ""
        elif kind == _MCP_CALL:
            item["status"] = "in_progress"
            item["name"] = ""
            item["server_label"] = ""
            item["arguments"] = ""
        elif kind == _CODE_INTERPRETER_CALL:
            item["status"] = "in_progress"
            item["code"] = ""
            item["container_id"] = ""
            item["outputs"] = None
        return item

    def replace_with(self, output: list, source: str, warnings: list) -> None:
        ours_by_id: dict[str, list[int]] = {}
        for p, item in enumerate(self.items):
            i = _item_id(item)
            if i is not None:
                ours_by_id.setdefault(i, []).append(p)
        heads = {i: 0 for i in ours_by_id}
        old = self.items
        old_labels = [self.label(p) for p in range(len(old))]
        self.items = []
        self.done = []
        self.by_id = {}
        self.by_index = {}
        for k, server in enumerate(output):
            if not isinstance(server, dict):
                continue
            i = _item_id(server)
            partner = None
            if i is not None:
                queue = ours_by_id.get(i)
                if queue is not None and heads[i] < len(queue):
                    partner = queue[heads[i]]
                    heads[i] += 1
            elif k < len(old) and _item_id(old[k]) is None and _get_eq(old[k], server, "type"):
                partner = k
            if partner is not None:
                mine = old[partner]
                old[partner] = {}
                item = _settle_item(mine, server, _Origin(source, old_labels[partner]), warnings)
            else:
                item = server
            p = self.push(item, k)
            self.done[p] = True


_MAX_PART_GAP = 256


def _part_mut(item: dict, array_key: str, index: int | None, types: tuple, text_key: str | None, new_part: Any) -> tuple[int, dict] | None:
    parts = item.get(array_key)
    if not isinstance(parts, list):
        parts = []
        item[array_key] = parts
    if index is not None:
        if index > len(parts) + _MAX_PART_GAP:
            return None
        while len(parts) <= index:
            parts.append(new_part())
        position = index
    else:
        last = parts[-1] if parts else None
        kind = last.get("type") if isinstance(last, dict) else None
        if not (type(kind) is str and kind in types):
            parts.append(new_part())
        position = len(parts) - 1
    part = parts[position]
    if not isinstance(part, dict):
        part = {}
        parts[position] = part
    if text_key is not None and not isinstance(part.get(text_key), _STR_TYPES):
        part[text_key] = ""
    return position, part


def _fresh_part(part_type: str, text_key: str) -> dict:
    part = {"type": part_type, text_key: ""}
    if part_type == "output_text":
        part["annotations"] = []
    return part


class _TextSpec:
    """One family of text events: ``X.delta`` appends, ``X.done`` settles with ``done_field``."""

    __slots__ = ("kind", "array", "types", "new_type", "key", "done_field")

    def __init__(self, kind: str, key: str, done_field: str, array: str | None = None, types: tuple = (), new_type: str = "") -> None:
        self.kind = kind
        self.array = array  # None: a string field of the item itself
        self.types = types
        self.new_type = new_type
        self.key = key
        self.done_field = done_field


def _full_text(ev: dict, field: str) -> str | None:
    if field == "code":
        v = ev.get("code")
        return v if type(v) is str else None
    return ev.get(field)


def _index_warning(kind: str, index: int | None) -> str:
    return f"{kind}: index {index if index is not None else 0} out of range, event ignored"


def _apply_text(store: _ItemStore, warnings: list, cap: _TextCap, ev: dict, spec: _TextSpec,
                is_done: bool) -> bool:
    value = _full_text(ev, spec.done_field) if is_done else ev.get("delta")
    if value is None:
        return False
    p = store.resolve(ev.get("item_id"), ev.get("output_index"), spec.kind)
    kind = ev.get("type") or ""
    origin = _Origin(kind, store.label(p) if is_done else "")
    item = store.items[p]
    key = spec.key
    if spec.array is None:
        if is_done:
            _settle_text(item, key, value, origin, key, warnings)
        else:
            _append_text(item, key, value, cap)
        return True
    array = spec.array
    index = ev.get("summary_index") if array == "summary" else ev.get("content_index")
    new_type = spec.new_type
    found = _part_mut(item, array, index, spec.types, key, lambda: _fresh_part(new_type, key))
    if found is None:
        warnings.append(_index_warning(kind, index))
        return True
    i, part = found
    if is_done:
        _settle_text(part, key, value, origin, f"{array}[{i}].{key}", warnings)
    else:
        _append_text(part, key, value, cap)
    return True


def _part_text_key(part_type: str) -> str | None:
    if part_type in ("output_text", "text", "reasoning_text", "summary_text"):
        return "text"
    if part_type == "refusal":
        return "refusal"
    if part_type in ("audio", "output_audio"):
        return "transcript"
    return None


def _apply_part(store: _ItemStore, warnings: list, ev: dict, array: str, kind: str, is_done: bool) -> bool:
    part = _raw_object(ev.get("part"))
    if part is None:
        return True
    part_type = part.get("type")
    if type(part_type) is not str:
        part_type = ""
    if kind == _ANY:
        if part_type in ("output_text", "refusal", "text", "audio", "output_audio"):
            kind = _MESSAGE
        elif part_type == "reasoning_text":
            kind = _REASONING
    index = ev.get("summary_index") if array == "summary" else ev.get("content_index")
    p = store.resolve(ev.get("item_id"), ev.get("output_index"), kind)
    source = ev.get("type") or ""
    origin = _Origin(source, store.label(p))
    item = store.items[p]
    types = (part_type,) if is_done else ()
    found = _part_mut(item, array, index, types, _part_text_key(part_type), lambda: {"type": part_type})
    if found is None:
        warnings.append(_index_warning(source, index))
        return True
    i, slot = found
    item[array][i] = _settle_part(slot, part, origin, f"{array}[{i}].", warnings)
    return True


def _output_of(base: dict) -> Any:
    """Takes a lifecycle ``response``'s ``output`` (left as null in place, or added as null)."""
    output = base.get("output")
    base["output"] = None
    return output


def _with_output(base: dict, items: list) -> dict:
    return {k: (items if k == "output" else v) for k, v in base.items()}


# --------------------------------------------------------------------------------------------
# The bases of the cores


class _Core:
    """What the cores share: framing, counts, the binding's interface."""

    __slots__ = ("_framer", "_warnings", "_unknown", "_events", "_busy", "_cap", "_on_rejected", "__weakref__")

    def __init__(self, max_event_size: int | None = 16 * 1024 * 1024) -> None:
        if max_event_size is not None:
            if not isinstance(max_event_size, int):
                raise TypeError(f"max_event_size must be an int or None, not {type(max_event_size).__name__}")
            if max_event_size < 0:
                raise OverflowError("can't convert negative int to unsigned")
        self._framer = Framer(max_event_size)
        self._cap = _TextCap(max_event_size)
        self._warnings: list[str] = []
        self._unknown = 0
        self._events = 0
        self._busy = Exclusive()
        self._on_rejected: Any = None

    def _error(self, raw: Any) -> None:
        """An error the stream carries (``raw``, its error object): warned about, counted unknown."""
        err = _raw_object(raw)
        self._warnings.append(_error_warning(err.get("message") if err is not None else None))
        self._unknown += 1

    def set_on_rejected(self, handler: Any) -> None:
        """A callable that ``feed`` hands the rejected payloads to (then ``feed`` returns None)."""
        self._on_rejected = handler

    def direct_methods(self) -> tuple[Callable[[Any], Any], Callable[[Any], None]]:
        """``feed`` and ``add``, for the wrapper to bind (the Rust core's take their argument
        without a method call's argument parsing; here they are the bound methods)."""
        return self.feed, self.add

    def feed(self, data: Any) -> list[tuple] | None:
        with self._busy:
            rejected = self._feed(data)
        if rejected and self._on_rejected is not None:
            self._on_rejected(rejected)
            return None
        return rejected

    def _feed(self, data: Any) -> list[tuple] | None:
        data = _as_bytes(data)
        rejected: list[tuple] = []
        add = self._add_capped

        def build(event: str, payload: bytes, _id: str, _retry: Any, index: int, offset: int) -> None:
            try:
                add(payload)
            except _Rejected as e:
                rejected.append((str(e), index, event, offset, payload, e.limit))

        self._framer.feed(data, [], build)
        return rejected or None

    def add_json(self, payload: Any) -> tuple[str, int | None] | None:
        with self._busy:
            try:
                self._add_capped(_as_bytes(payload))
            except _Rejected as e:
                return str(e), e.limit
        return None

    def _add_capped(self, payload: bytes) -> None:
        """``_add``, then ``TextCap::check``: a delta the cap refused is reported here."""
        self._add(payload)
        cap = self._cap
        if cap.refused is not None:
            length, cap.refused = cap.refused, None
            e = _Rejected(
                f"event {self._events - 1} would take an accumulated text to {length} bytes, past "
                f"max_event_size={cap.limit} bytes: its delta was not appended"
            )
            e.limit = cap.limit
            raise e

    def close(self) -> None:
        self._framer.close()

    def warnings(self) -> list[str]:
        return list(self._warnings)

    def unknown_events(self) -> int:
        return self._unknown

    def events(self) -> int:
        return self._events

    def add(self, event: Any) -> None:
        """A typed event, by its JSON: ``UnknownEvent`` by its raw payload, another schema Struct
        written back as received (:func:`rapidsse.encode`); ``InvalidEvent`` was reported by the decoder already and is skipped."""
        if isinstance(event, UnknownEvent):
            payload = event.raw
        elif isinstance(event, InvalidEvent):
            return
        elif isinstance(event, msgspec.Struct):
            payload = _encode(event)
        else:
            raise TypeError(f"add() takes a rapidsse event, not {type(event).__name__}")
        index = self._events
        refused = self.add_json(payload)
        if refused is not None:
            reason, limit = refused
            if limit is not None:
                raise EventTooLarge(reason, limit=limit, offset=-1)
            kind = getattr(event, "type", "message")
            raise DecodeError(reason, index=index, event=kind if isinstance(kind, str) else "message",
                              offset=-1, raw=payload)

    def _read_stream_event(self, payload: bytes, used: frozenset) -> dict | None:
        """``read_stream_event``: the typed read fields of a Responses / Realtime payload, or None
        for ``[DONE]`` and for a malformed event (counted here, warned about when ``used``)."""
        if _is_done_marker(payload):
            return None
        try:
            _, ev = _parse_event(payload, self._events, _typed_event)
        except _Malformed as m:
            self._events += 1
            self._unknown += 1
            if m.kind in used:
                self._warnings.append(f"{m.kind}: malformed event ignored")
            return None
        return ev

    # Each core defines ``_add(payload: bytes)``: one payload, raising _Rejected / _Malformed.


def _index_is(v: Any, index: int) -> bool:
    if not isinstance(v, dict):
        return False
    i = v.get("index")
    return type(i) is int and i >= 0 and i == index


class _ChunkCore(_Core, abc.ABC):
    """What the cores of whole-object streams share (Chat Completions, Completions, Gemini): each
    event is a chunk object; the first one gives the top level, later ones update some of its keys,
    and their entries (``choices``, ``candidates``) merge by ``index`` into ``_entries``."""

    __slots__ = ("_top", "_entries")

    _LABEL = ""
    """The protocol's name in warnings."""
    _OUTPUT = ""
    """The top-level key of the merged entries."""
    _OBJECT: str | None = None
    """The chunks' ``object`` (chunks of another are counted unknown); None: no such check."""
    _TOP_OBJECT: str | None = None
    """The ``object`` of the accumulated top level; None: the first chunk's own."""
    _DONE_MARKER = True
    """Whether a ``[DONE]`` payload ends the stream (skipped)."""
    _DEFAULTS: tuple = ()
    """(key, value) pairs the first chunk's top level gets when it lacks them."""
    _DROPPED: tuple = ()
    """Keys of the first chunk kept out of the top level."""
    _UPDATED: tuple = ()
    """The keys later chunks update (when present, even as null)."""

    def __init__(self, max_event_size: int | None = 16 * 1024 * 1024) -> None:
        super().__init__(max_event_size)
        self._top: dict | None = None
        self._entries: list[dict] = []

    @staticmethod
    @abc.abstractmethod
    def _typed(top: dict) -> Any:
        """The typed parse of a chunk (the serde struct of the Rust core)."""

    def _add(self, payload: bytes) -> None:
        if self._DONE_MARKER and _is_done_marker(payload):
            return
        try:
            tree, chunk = _parse_event(payload, self._events, self._typed)
        except _Malformed:
            self._events += 1
            self._unknown += 1
            self._warnings.append(f"{self._LABEL}: malformed chunk ignored")
            return
        self._events += 1
        error = chunk.get("error")
        if error is not None:
            self._error(error)
            return
        obj = chunk.get("object")
        if self._OBJECT is not None and obj is not None and obj != self._OBJECT:
            self._unknown += 1
            return
        if self._top is None:
            self._top = self._first_top_level(tree)
        else:
            self._update(self._top, chunk)
        self._add_entries(chunk)

    def _first_top_level(self, tree: dict) -> dict:
        whole = _strict(tree)
        top = {} if whole is _FAIL else dict(whole)
        for key in self._DROPPED:
            top.pop(key, None)
        top[self._OUTPUT] = None
        if self._TOP_OBJECT is not None:
            top["object"] = self._TOP_OBJECT
        for key, default in self._DEFAULTS:
            top.setdefault(key, default)
        return top

    def _update(self, top: dict, chunk: dict) -> None:
        for key in self._UPDATED:
            value = _raw_value(chunk.get(key))
            if value is not _ABSENT:
                top[key] = value

    def _add_entries(self, chunk: dict) -> None:
        """Merges each entry of the chunk's ``_OUTPUT`` list (a choice, a candidate) with the
        subclass's ``_add_entry(fields)`` (Chat merges its choices its own way)."""
        entries = _raw_value(chunk.get(self._OUTPUT))
        if isinstance(entries, list):
            for entry in entries:
                if isinstance(entry, dict):
                    self._add_entry(dict(entry))

    def _entry(self, index: int, fresh: Callable[[], dict]) -> dict:
        """The merged entry of ``index``; a new one (``fresh()``, appended) when there is none."""
        position = _find_indexed(self._entries, index)
        if position is not None:
            return self._entries[position]
        entry = fresh()
        self._entries.append(entry)
        return entry

    def snapshot_json(self) -> bytes | None:
        if self._top is None:
            return None
        return _dumps(_with_output_key(self._top, self._OUTPUT, self._entries))


def _with_output_key(base: dict, key: str, value: Any) -> dict:
    return {k: (value if k == key else v) for k, v in base.items()}


def _index_of(fields: dict) -> int:
    """``fields.get("index").and_then(Value::as_u64).unwrap_or(0)``."""
    i = fields.get("index")
    return i if type(i) is int and i >= 0 else 0


def _find_indexed(entries: list[dict], index: int) -> int | None:
    if index < len(entries) and _index_is(entries[index], index):
        return index
    for p, entry in enumerate(entries):
        if _index_is(entry, index):
            return p
    return None
