"""The Chat Completions accumulator core: the twin of ``rust/src/accumulate/chat.rs`` (whose
module docs give the rules)."""

from __future__ import annotations

from typing import Any

from .json import (_ABSENT, _FAIL, _I64_MAX, _I64_MIN, _INF, _STR_TYPES, _U64_MAX, _BadStr, _entries,
                   _has_bad_utf8, _jeq, _strict)
from .mod import (_DATA, _SYNTAX, _ChunkCore, _TextCap, _append_text, _find_indexed, _index_is, _invalid,
                  _raw_value)


_CHUNK_RAW = frozenset(["usage", "system_fingerprint", "moderation", "error"])
# The other members of the chunk schema (rapidsse.chat.ChatCompletionChunk): not read.
_CHUNK_SCHEMA_KEYS = frozenset(["id", "created", "model", "service_tier", "obfuscation"])


def _typed_chunk(top: dict) -> Any:
    """The typed parse of a Chat ``Chunk``, and the members the chunk schema does not know,
    unparsed, in wire order (``vendor``)."""
    vendor: list = []
    fields: dict = {"vendor": vendor}
    for k, v in _entries(top):
        if type(k) is not str:
            return _SYNTAX
        if k == "object":
            if k in fields:
                return _DATA
            if v is None or type(v) is str:
                fields[k] = v
            else:
                return _invalid(v)
        elif k == "choices":
            if k in fields:
                return _DATA
            if v is None:
                fields[k] = None
            elif isinstance(v, list):
                choices = []
                for element in v:
                    if not isinstance(element, dict):
                        return _invalid(element)
                    entries = list(_entries(element))
                    for ck, cv in entries:
                        if type(ck) is not str or _has_bad_utf8(cv):
                            return _SYNTAX
                    choices.append(entries)
                fields[k] = choices
            else:
                return _invalid(v)
        elif k in _CHUNK_RAW:
            if k in fields:
                return _DATA
            if _has_bad_utf8(v):
                return _SYNTAX
            fields[k] = v
        elif k not in _CHUNK_SCHEMA_KEYS:
            if _has_bad_utf8(v):
                return _SYNTAX
            vendor.append((k, v))
    return fields


_REPLACED_KEYS = frozenset(["index", "type", "role", "id"])


def _has_indexed_entries(value: Any) -> bool:
    return isinstance(value, list) and any(isinstance(e, dict) and "index" in e for e in value)


def _merge_string(message: dict, key: str, delta: str, cap: _TextCap) -> None:
    current = message.get(key)
    if current is None:
        if cap.admits(0, delta):
            message[key] = delta
    elif isinstance(current, _STR_TYPES):
        if key in _REPLACED_KEYS:
            message[key] = delta
        else:
            _append_text(message, key, delta, cap)
    elif key in _REPLACED_KEYS:
        message[key] = delta


def _merge_content_parts(message: dict, raw: Any, cap: _TextCap) -> None:
    parts = _strict(raw)
    if parts is _FAIL:
        return
    for part in parts:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text" and type(kind) is str:
            text = part.get("text")
            if type(text) is str:
                _merge_string(message, "content", text, cap)
        elif kind == "thinking" and type(kind) is str:
            thinking = part.get("thinking")
            if type(thinking) is str:
                _merge_string(message, "reasoning_content", thinking, cap)
            elif isinstance(thinking, list):
                for p in thinking:
                    if isinstance(p, dict) and p.get("type") == "text" and type(p.get("type")) is str:
                        text = p.get("text")
                        if type(text) is str:
                            _merge_string(message, "reasoning_content", text, cap)


def _merge_delta(message: dict, delta: Any, warnings: list, cap: _TextCap) -> None:
    if not isinstance(delta, dict):
        return
    entries = list(_entries(delta))
    for key, _ in entries:
        if type(key) is not str:
            return
    for key, raw in entries:
        if key == "content" and isinstance(raw, list):
            _merge_content_parts(message, raw, cap)
        elif type(raw) is str:
            _merge_string(message, key, raw, cap)
        elif type(raw) is _BadStr:
            continue
        else:
            value = _strict(raw)
            if value is not _FAIL:
                _accumulate_entry(message, key, value, warnings, cap)


def _is_number(v: Any) -> bool:
    t = type(v)
    return t is int or t is float


def _add_numbers(a: Any, b: Any) -> Any:
    if type(a) is int and type(b) is int:
        if _I64_MIN <= a <= _I64_MAX and _I64_MIN <= b <= _I64_MAX and _I64_MIN <= a + b <= _I64_MAX:
            return a + b
        if a >= 0 and b >= 0 and a + b <= _U64_MAX:
            return a + b
    s = float(a) + float(b)
    if s == _INF or s == -_INF or s != s:
        return None
    return s


def _accumulate_entry(acc: dict, key: str, delta: Any, warnings: list, cap: _TextCap) -> None:
    current = acc.get(key)
    if current is None:
        if not _has_indexed_entries(delta):
            acc[key] = delta
            return
        current = []
        acc[key] = current
    elif key in _REPLACED_KEYS:
        if delta is not None:
            acc[key] = delta
        return
    if isinstance(current, _STR_TYPES):
        if type(delta) is str:
            _append_text(acc, key, delta, cap)
    elif _is_number(current):
        if _is_number(delta):
            total = _add_numbers(current, delta)
            if total is not None:
                acc[key] = total
    elif isinstance(current, dict):
        if isinstance(delta, dict):
            for k, v in delta.items():
                _accumulate_entry(current, k, v, warnings, cap)
    elif isinstance(current, list):
        if isinstance(delta, list):
            _merge_list(current, delta, warnings, cap)


def _merge_list(acc: list, delta: list, warnings: list, cap: _TextCap) -> None:
    scalars = all(type(v) in (str, int, float, bool) for v in acc)
    if scalars and (acc or not any(isinstance(e, dict) and "index" in e for e in delta)):
        acc.extend(delta)
        return
    for entry in delta:
        if not isinstance(entry, dict):
            warnings.append("chat: non-object list entry ignored")
            continue
        index = entry.get("index")
        target = None
        if type(index) is int and index >= 0:
            if index < len(acc) and _index_is(acc[index], index):
                target = index
            else:
                for p, v in enumerate(acc):
                    if _index_is(v, index):
                        target = p
                        break
        else:
            entry_id = entry.get("id")
            if entry_id is not None:
                for p, v in enumerate(acc):
                    if isinstance(v, dict) and "id" in v and _jeq(v["id"], entry_id):
                        target = p
                        break
        existing = acc[target] if target is not None else None
        if isinstance(existing, dict):
            for k, v in entry.items():
                _accumulate_entry(existing, k, v, warnings, cap)
        else:
            acc.append(entry)


class ChatCore(_ChunkCore):
    """Chat Completions accumulator core (pure Python)."""

    __slots__ = ()
    _LABEL = "chat"
    _OUTPUT = "choices"
    _OBJECT = "chat.completion.chunk"
    _TOP_OBJECT = "chat.completion"
    _DEFAULTS = (("id", ""), ("created", 0), ("model", ""), ("system_fingerprint", None))
    _DROPPED = ("obfuscation",)
    _typed = staticmethod(_typed_chunk)

    def _update(self, top: dict, chunk: dict) -> None:
        known = [(key, chunk.get(key)) for key in ("usage", "system_fingerprint", "moderation")]
        for key, raw in known + chunk["vendor"]:
            value = _raw_value(raw)
            if value is not _ABSENT and value is not None:
                top[key] = value

    def _add_entries(self, chunk: dict) -> None:
        for entries in chunk.get("choices") or ():
            self._add_choice(entries)

    def _add_choice(self, entries: list) -> None:
        index = 0
        delta = _ABSENT
        finish_reason = None
        logprobs = None
        for key, raw in entries:
            if key == "index":
                index = raw if type(raw) is int and raw >= 0 else 0
            elif key == "delta":
                delta = raw
            elif key == "finish_reason":
                v = _strict(raw)
                finish_reason = None if v is _FAIL else v
            elif key == "logprobs":
                v = _strict(raw)
                logprobs = None if v is _FAIL else v
        choices = self._entries
        position = _find_indexed(choices, index)
        if position is None:
            choice: dict = {"index": index, "finish_reason": None, "logprobs": None}
            for key, raw in entries:
                if key != "delta" and key != "index":
                    v = _strict(raw)
                    if v is not _FAIL:
                        choice[key] = v
            message = {"role": "assistant", "content": None, "refusal": None}
            if delta is not _ABSENT:
                _merge_delta(message, delta, self._warnings, self._cap)
            choice["message"] = message
            choices.append(choice)
            return
        choice = choices[position]
        if delta is not _ABSENT:
            message = choice.get("message")
            if isinstance(message, dict):
                _merge_delta(message, delta, self._warnings, self._cap)
        if finish_reason is not None and not (type(finish_reason) is str and finish_reason == ""):
            choice["finish_reason"] = finish_reason
        if isinstance(logprobs, dict):
            ours = choice.get("logprobs")
            if isinstance(ours, dict):
                for key in ("content", "refusal"):
                    new = logprobs.pop(key, None)
                    if not isinstance(new, list) or not new:
                        continue
                    current = ours.get(key)
                    if isinstance(current, list):
                        current.extend(new)
                    else:
                        ours[key] = new
            else:
                choice["logprobs"] = {
                    "content": logprobs.pop("content", None),
                    "refusal": logprobs.pop("refusal", None),
                }
