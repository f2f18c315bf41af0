"""Pure-Python accumulator cores: the twins of ``rust/src/accumulate/*.rs`` (rules in their module
docs) behind the interface of ``rapidsse._rapidsse.ResponseCore`` / ``ChatCore`` /
``RealtimeCore`` (``rust/src/bindings/accumulate.rs``).

JSON is read the way the Rust core's serde_json reads it, accept/reject decision for decision:

- Fast path: the payload decodes as UTF-8 and the stdlib ``json`` accepts it with no ``NaN`` /
  ``Infinity`` literal, no number overflowing an f64, no lone surrogate escape and at most 127
  levels of nesting. Then serde_json's strict parse accepts it too, and the values are the same
  (integers outside i64/u64 become floats, as in serde_json; ``-0`` is the float ``-0.0``).
- Otherwise a port of serde_json's ``ignore_value`` (the lenient ``IgnoredAny`` parse that gives
  the Rust side's error messages) reads the bytes, giving the same message, line and column, and
  a tree in which strings that are not valid UTF-8 or hold lone surrogates, and numbers out of
  f64 range, are marked. The typed parse of the event (which fields are read as strings,
  integers, raw fragments or skipped) is then replayed on that tree: a marked value where serde
  would decode it is a syntax error (the Rust side then reports "not a JSON object"), a wrong
  type or a duplicated read field is a data error ("malformed event"), and a fragment the Rust
  side parses later as a ``Value`` (nesting limit 128) is treated as absent when it is marked.

Known differences from the Rust side, all in rejection *messages* only (never in decisions):
the excerpt quoted in a message is formatted like Rust's ``{:?}`` of a string, with Python's
``str.isprintable`` (its Unicode version) for Rust's printable table and an approximation of the
Grapheme_Extend property (categories Mn/Me plus Other_Grapheme_Extend), so an exotic character in
the first 80 bytes of a rejected payload may be escaped differently.

Text deltas are kept as piece lists (``_Buf``) joined when read, so the cost stays linear in the
input whatever the number of deltas.
"""

from __future__ import annotations

import abc
import functools
import json
import re
import unicodedata
from json.decoder import scanstring as _scanstring
from typing import Any, Callable

import jiter as _jiter
import msgspec

from .._schema import UnknownEvent
from .._wire import encode as _encode
from ..decoding import InvalidEvent
from ..errors import DecodeError, EventTooLarge
from .framing import Framer, as_bytes
from .guard import Exclusive


__all__ = ["ResponseCore", "ChatCore", "RealtimeCore", "GeminiCore", "CompletionsCore", "AnthropicCore"]

# --------------------------------------------------------------------------------------------
# Values


class _Buf:
    """A string under construction (text deltas): pieces joined when read. ``size`` is its
    length in UTF-8 bytes, kept when the core has a text cap."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list[str], size: int = 0) -> None:
        self.parts = parts
        self.size = size

    def value(self) -> str:
        parts = self.parts
        if len(parts) != 1:
            joined = "".join(parts)
            self.parts = [joined]
            return joined
        return parts[0]


class _Pairs(dict):
    """An object with duplicate keys (or any object of the slow path): ``pairs`` in order."""

    __slots__ = ("pairs",)


class _Obj(_Pairs):
    """An object of the slow path, with what the strict (serde ``Value``) parse would think."""

    __slots__ = ("bad", "bad_utf8", "depth")


class _Arr(list):
    __slots__ = ("bad", "bad_utf8", "depth")


class _BadStr:
    """A string serde_json cannot decode: invalid UTF-8 (``utf8``) or a lone surrogate."""

    __slots__ = ("utf8",)

    def __init__(self, utf8: bool) -> None:
        self.utf8 = utf8


class _BadNum:
    """A number out of f64 range."""

    __slots__ = ()


_BADNUM = _BadNum()
_FAIL = object()
_ABSENT = object()
_SYNTAX = "syntax"
_DATA = "data"
_STR_TYPES = (str, _Buf)
_U64_MAX = 2**64 - 1
_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1
_INF = float("inf")
_MAX_DEPTH = 128


def _entries(d: dict) -> Any:
    pairs = getattr(d, "pairs", None)
    return pairs if pairs is not None else d.items()


def _strict(v: Any) -> Any:
    """``serde_json::from_str::<Value>`` of a kept fragment: the value, or ``_FAIL``."""
    t = type(v)
    if t is _Obj or t is _Arr:
        return _FAIL if (v.bad or v.depth >= _MAX_DEPTH) else v
    if t is _BadStr or t is _BadNum:
        return _FAIL
    return v


def _has_bad_utf8(v: Any) -> bool:
    t = type(v)
    if t is _BadStr:
        return v.utf8
    if t is _Obj or t is _Arr:
        return v.bad_utf8
    return False


def _as_str(v: Any) -> str | None:
    t = type(v)
    if t is str:
        return v
    if t is _Buf:
        return v.value()
    return None


def _non_empty_str(v: Any) -> str | None:
    s = _as_str(v)
    return s if s else None


def _jeq(a: Any, b: Any) -> bool:
    """``serde_json::Value`` equality (1 != 1.0, true != 1)."""
    if isinstance(a, dict):
        if not isinstance(b, dict) or len(a) != len(b):
            return False
        for k, v in a.items():
            if k not in b or not _jeq(v, b[k]):
                return False
        return True
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return False
        return all(_jeq(x, y) for x, y in zip(a, b))
    if isinstance(a, _STR_TYPES):
        return isinstance(b, _STR_TYPES) and _as_str(a) == _as_str(b)
    if type(a) is not type(b):
        return False
    return a == b


def _get_eq(a: dict, b: dict, key: str) -> bool:
    """``a.get(key) == b.get(key)`` on ``Option<&Value>`` (absent != null)."""
    va = a.get(key, _ABSENT)
    vb = b.get(key, _ABSENT)
    if va is _ABSENT or vb is _ABSENT:
        return va is vb
    return _jeq(va, vb)


def _default(o: Any) -> Any:
    if type(o) is _Buf:
        return o.value()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _dumps(value: Any) -> bytes:
    return json.dumps(
        value, ensure_ascii=False, separators=(",", ":"), default=_default, allow_nan=False
    ).encode("utf-8")


# --------------------------------------------------------------------------------------------
# Parsing: fast path (stdlib json) and the serde_json emulation (slow path)


class _Reject(Exception):
    pass


def _reject(_s: str) -> Any:
    raise _Reject


def _number(s: str) -> Any:
    """A JSON number's text as serde_json reads it; ``_BADNUM`` when out of f64 range."""
    if "." in s or "e" in s or "E" in s:
        f = float(s)
        return _BADNUM if f == _INF or f == -_INF else f
    if s == "-0":
        return -0.0
    if len(s) <= 21:
        v = int(s)
        if _I64_MIN <= v <= _U64_MAX:
            return v
    f = float(s)
    return _BADNUM if f == _INF or f == -_INF else f


def _parse_int_hook(s: str) -> Any:
    if len(s) < 19:
        return int(s) if s != "-0" else -0.0
    v = _number(s)
    if v is _BADNUM:
        raise _Reject
    return v


def _parse_float_hook(s: str) -> float:
    f = float(s)
    if f == _INF or f == -_INF:
        raise _Reject
    return f


def _pairs_hook(pairs: list) -> dict:
    d = dict(pairs)
    if len(d) != len(pairs):
        p = _Pairs(d)
        p.pairs = pairs
        return p
    return d


_DECODER = json.JSONDecoder(
    object_pairs_hook=_pairs_hook,
    parse_int=_parse_int_hook,
    parse_float=_parse_float_hook,
    parse_constant=_reject,
)
_SCAN = _DECODER.scan_once
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# Escapes in order (valid JSON: every backslash starts one); group 1: a lone surrogate.
_ESCAPE = re.compile(
    r"\\(?:u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|(u[dD][89a-fA-F][0-9a-fA-F]{2})|.)",
    re.S,
)
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKETS = re.compile(r"[\[\]{}]")


def _max_depth(text: str) -> int:
    depth = deepest = 0
    for ch in _BRACKETS.findall(_JSON_STRING.sub("", text)):
        if ch == "[" or ch == "{":
            depth += 1
            if depth > deepest:
                deepest = depth
        else:
            depth -= 1
    return deepest


class _SyntaxError(Exception):
    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


_EOF_LIST = "EOF while parsing a list"
_EOF_OBJECT = "EOF while parsing an object"
_EOF_STRING = "EOF while parsing a string"
_EOF_VALUE = "EOF while parsing a value"
_WS_RE = re.compile(rb"[ \t\n\r]*")
_STR_SPECIAL = re.compile(rb'[\x00-\x1f"\\]')
_DIGITS = re.compile(rb"[0-9]*")
_HEX = frozenset(b"0123456789abcdefABCDEF")
_SIMPLE_ESCAPES = frozenset(b'"\\/bfnrt')


class _Frame:
    __slots__ = ("is_obj", "items", "key", "bad", "bad_utf8", "depth")

    def __init__(self, is_obj: bool) -> None:
        self.is_obj = is_obj
        self.items: list = []
        self.key: Any = None
        self.bad = False
        self.bad_utf8 = False
        self.depth = 0

    def add(self, value: Any) -> None:
        t = type(value)
        if t is _Obj or t is _Arr:
            if value.bad:
                self.bad = True
            if value.bad_utf8:
                self.bad_utf8 = True
            if value.depth > self.depth:
                self.depth = value.depth
        elif t is _BadStr:
            self.bad = True
            if value.utf8:
                self.bad_utf8 = True
        elif t is _BadNum:
            self.bad = True
        if self.is_obj:
            self.items.append((self.key, value))
        else:
            self.items.append(value)

    def finish(self) -> Any:
        if self.is_obj:
            node: Any = _Obj(self.items)
            node.pairs = self.items
        else:
            node = _Arr(self.items)
        node.bad = self.bad
        node.bad_utf8 = self.bad_utf8
        node.depth = self.depth + 1
        return node


class _Lenient:
    """serde_json's ``from_slice::<IgnoredAny>`` (``ignore_value`` + ``end``), building a tree."""

    __slots__ = ("s", "i", "n")

    def __init__(self, data: bytes) -> None:
        self.s = data
        self.i = 0
        self.n = len(data)

    def _fail(self, message: str, at: int) -> _SyntaxError:
        s = self.s
        start = s.rfind(b"\n", 0, at) + 1
        return _SyntaxError(message, 1 + s.count(b"\n", 0, start), at - start)

    def error(self, message: str) -> _SyntaxError:
        return self._fail(message, self.i)

    def peek_error(self, message: str) -> _SyntaxError:
        return self._fail(message, min(self.n, self.i + 1))

    def ws(self) -> int | None:
        self.i = _WS_RE.match(self.s, self.i).end()
        return self.s[self.i] if self.i < self.n else None

    def ident(self, rest: bytes) -> None:
        s = self.s
        for expected in rest:
            if self.i >= self.n:
                raise self.error(_EOF_VALUE)
            c = s[self.i]
            self.i += 1
            if c != expected:
                raise self.error("expected ident")

    def number(self) -> Any:
        s = self.s
        start = self.i
        if s[self.i] == 45:  # '-'
            self.i += 1
        c = s[self.i] if self.i < self.n else 0
        if self.i < self.n:
            self.i += 1
        if c == 48:  # '0'
            if self.i < self.n and 48 <= s[self.i] <= 57:
                raise self.peek_error("invalid number")
        elif 49 <= c <= 57:
            self.i = _DIGITS.match(s, self.i).end()
        else:
            raise self.error("invalid number")
        c = s[self.i] if self.i < self.n else 0
        if c == 46:  # '.'
            self.i += 1
            end = _DIGITS.match(s, self.i).end()
            if end == self.i:
                raise self.peek_error("invalid number")
            self.i = end
            c = s[self.i] if self.i < self.n else 0
        if c == 101 or c == 69:  # e E
            self.i += 1
            if self.i < self.n and s[self.i] in (43, 45):
                self.i += 1
            c = s[self.i] if self.i < self.n else 0
            if self.i < self.n:
                self.i += 1
            if not 48 <= c <= 57:
                raise self.error("invalid number")
            self.i = _DIGITS.match(s, self.i).end()
        return _number(s[start : self.i].decode("ascii"))

    def string(self) -> Any:
        """After the opening quote: serde's ``ignore_str``; returns the decoded value."""
        s = self.s
        start = self.i
        escaped = False
        while True:
            m = _STR_SPECIAL.search(s, self.i)
            if m is None:
                self.i = self.n
                raise self.error(_EOF_STRING)
            self.i = m.start()
            c = s[self.i]
            if c == 34:  # '"'
                self.i += 1
                break
            if c == 92:  # '\\'
                escaped = True
                self.i += 1
                if self.i >= self.n:
                    raise self.error(_EOF_STRING)
                e = s[self.i]
                self.i += 1
                if e == 117:  # 'u'
                    if self.n - self.i < 4:
                        self.i = self.n
                        raise self.error(_EOF_STRING)
                    hexdigits = s[self.i : self.i + 4]
                    self.i += 4
                    if not all(h in _HEX for h in hexdigits):
                        raise self.error("invalid escape")
                elif e not in _SIMPLE_ESCAPES:
                    raise self.error("invalid escape")
                continue
            raise self.error("control character (\\u0000-\\u001F) found while parsing a string")
        raw = s[start : self.i - 1]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return _BadStr(True)
        if escaped:
            text = _scanstring(text + '"', 0)[0]
            if _SURROGATE.search(text):
                return _BadStr(False)
        return text

    def parse(self) -> Any:
        enclosing: _Frame | None = None
        scratch: list[_Frame] = []
        while True:
            c = self.ws()
            if c is None:
                raise self.peek_error(_EOF_VALUE)
            frame: _Frame | None = None
            value: Any = None
            if c == 110:  # n
                self.i += 1
                self.ident(b"ull")
            elif c == 116:  # t
                self.i += 1
                self.ident(b"rue")
                value = True
            elif c == 102:  # f
                self.i += 1
                self.ident(b"alse")
                value = False
            elif c == 45 or 48 <= c <= 57:
                value = self.number()
            elif c == 34:
                self.i += 1
                value = self.string()
            elif c == 91 or c == 123:
                if enclosing is not None:
                    scratch.append(enclosing)
                    enclosing = None
                self.i += 1
                frame = _Frame(c == 123)
            else:
                raise self.peek_error("expected value")

            if frame is not None:
                current = frame
                accept_comma = False
            else:
                if enclosing is not None:
                    current = enclosing
                    enclosing = None
                elif scratch:
                    current = scratch.pop()
                else:
                    return self._end(value)
                current.add(value)
                accept_comma = True

            while True:
                c = self.ws()
                if c == 44 and accept_comma:  # ','
                    self.i += 1
                    break
                if (c == 93 and not current.is_obj) or (c == 125 and current.is_obj):
                    pass
                elif c is not None:
                    if accept_comma:
                        raise self.peek_error(
                            "expected `,` or `}`" if current.is_obj else "expected `,` or `]`"
                        )
                    break
                else:
                    raise self.peek_error(_EOF_OBJECT if current.is_obj else _EOF_LIST)
                self.i += 1
                finished = current.finish()
                if not scratch:
                    return self._end(finished)
                current = scratch.pop()
                current.add(finished)
                accept_comma = True

            if current.is_obj:
                c = self.ws()
                if c == 34:
                    self.i += 1
                elif c is None:
                    raise self.peek_error(_EOF_OBJECT)
                else:
                    raise self.peek_error("key must be a string")
                current.key = self.string()
                c = self.ws()
                if c == 58:  # ':'
                    self.i += 1
                elif c is None:
                    raise self.peek_error(_EOF_OBJECT)
                else:
                    raise self.peek_error("expected `:`")
                if type(current.key) is _BadStr:
                    current.bad = True
                    if current.key.utf8:
                        current.bad_utf8 = True
            enclosing = current

    def _end(self, value: Any) -> Any:
        if self.ws() is not None:
            raise self.peek_error("trailing characters")
        return value


def _load(payload: bytes) -> Any:
    """The payload's JSON (see the module docs); raises ``_SyntaxError`` as serde's IgnoredAny."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        return _Lenient(payload).parse()
    try:
        if text[:1] == "{" and text[-1:] == "}":
            value, end = _SCAN(text, 0)
            if end != len(text):
                raise ValueError
        else:
            value = _DECODER.decode(text)
    except (ValueError, RecursionError, StopIteration, _Reject):
        return _Lenient(payload).parse()
    if "\\u" in text and _SURROGATE_ESCAPE.search(text):
        # Any lone surrogate escape, even in a value a duplicate key drops.
        for m in _ESCAPE.finditer(text):
            if m.group(1):
                return _Lenient(payload).parse()
    if len(text) >= 2 * _MAX_DEPTH and text.count("{") + text.count("[") >= _MAX_DEPTH and _max_depth(text) >= _MAX_DEPTH:
        return _Lenient(payload).parse()
    return value


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


_as_bytes = as_bytes


# --------------------------------------------------------------------------------------------
# Shared item machinery (rust/src/accumulate/mod.rs)


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


# --------------------------------------------------------------------------------------------
# Responses (rust/src/accumulate/responses.rs)

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


# --------------------------------------------------------------------------------------------
# Realtime (rust/src/accumulate/realtime.rs)

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


# --------------------------------------------------------------------------------------------
# Chat Completions (rust/src/accumulate/chat.rs)

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


def _index_is(v: Any, index: int) -> bool:
    if not isinstance(v, dict):
        return False
    i = v.get("index")
    return type(i) is int and i >= 0 and i == index


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


def _with_output_key(base: dict, key: str, value: Any) -> dict:
    return {k: (value if k == key else v) for k, v in base.items()}


# --------------------------------------------------------------------------------------------
# Gemini and Completions (rust/src/accumulate/gemini.rs, completions.rs)


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


_GEMINI_UPDATED = ("usageMetadata", "modelVersion", "responseId", "promptFeedback", "createTime")
_typed_gemini = _typed_reader(frozenset(), frozenset(("candidates", "error") + _GEMINI_UPDATED))


def _text_kind(part: dict) -> bool | None:
    """Whether a text part is a thought; None when ``part`` is not a text part."""
    if not isinstance(part.get("text"), _STR_TYPES):
        return None
    thought = False
    for key, value in part.items():
        if key == "text" or (value is None and key in ("thought", "thoughtSignature")):
            continue
        if key == "thought" and type(value) is bool:
            thought = value
        elif key == "thoughtSignature" and type(value) is str:
            continue
        else:
            return None
    return thought


def _merge_part(parts: list, part: Any, cap: _TextCap) -> None:
    if not isinstance(part, dict):
        parts.append(part)
        return
    kind = _text_kind(part)
    if kind is None:
        parts.append(part)
        return
    last = parts[-1] if parts else None
    if (
        isinstance(last, dict)
        and _text_kind(last) == kind
        and (last.get("thoughtSignature") is None or part.get("thoughtSignature") is None)
    ):
        _append_text(last, "text", part["text"], cap)
        signature = part.get("thoughtSignature")
        if signature is not None:
            last["thoughtSignature"] = signature
        return
    if not cap.admits(0, part["text"]):
        part["text"] = ""
    parts.append(part)


def _merge_content(ours: dict, content: dict, cap: _TextCap) -> None:
    for key, value in content.items():
        if key == "parts":
            if isinstance(value, list):
                parts = ours.setdefault("parts", [])
                if isinstance(parts, list):
                    for part in value:
                        _merge_part(parts, part, cap)
        elif value is not None:
            ours[key] = value


class GeminiCore(_ChunkCore):
    """Gemini accumulator core (pure Python)."""

    __slots__ = ()
    _LABEL = "gemini"
    _OUTPUT = "candidates"
    _DONE_MARKER = False
    _UPDATED = _GEMINI_UPDATED
    _typed = staticmethod(_typed_gemini)

    def _add_entry(self, fields: dict) -> None:
        index = _index_of(fields)
        candidate = self._entry(index, lambda: {"content": {}, "index": index})
        content = fields.pop("content", None)
        for key, value in fields.items():
            if key != "index" and value is not None:
                candidate[key] = value
        ours = candidate.get("content")
        if isinstance(content, dict) and isinstance(ours, dict):
            _merge_content(ours, content, self._cap)


_typed_completions = _typed_reader(
    frozenset(["object"]), frozenset(["choices", "usage", "system_fingerprint", "error"])
)
_LOGPROB_LISTS = frozenset(["tokens", "token_logprobs", "top_logprobs", "text_offset"])


def _merge_logprobs(ours: dict, new: dict) -> None:
    for key, value in new.items():
        is_list = key in _LOGPROB_LISTS
        if value is None:
            continue
        if is_list:
            if isinstance(value, list) and value:
                current = ours.get(key)
                if isinstance(current, list):
                    current.extend(value)
                else:
                    ours[key] = value
        else:
            ours[key] = value


class CompletionsCore(_ChunkCore):
    """Completions accumulator core (pure Python)."""

    __slots__ = ()
    _LABEL = "completions"
    _OUTPUT = "choices"
    _OBJECT = "text_completion"
    _TOP_OBJECT = "text_completion"
    _DEFAULTS = (("id", ""), ("created", 0), ("model", ""))
    _UPDATED = ("usage", "system_fingerprint")
    _typed = staticmethod(_typed_completions)

    def _add_entry(self, fields: dict) -> None:
        index = _index_of(fields)
        choice = self._entry(index, lambda: {"index": index, "text": "", "logprobs": None, "finish_reason": None})
        for key, value in fields.items():
            if key == "index" or value is None:
                continue
            if key == "text":
                if type(value) is str:
                    _append_text(choice, "text", value, self._cap)
            elif key == "logprobs":
                if isinstance(value, dict):
                    ours = choice.get("logprobs")
                    if isinstance(ours, dict):
                        _merge_logprobs(ours, value)
                    else:
                        choice["logprobs"] = value
            elif key == "finish_reason" and type(value) is str and value == "":
                continue
            else:
                choice[key] = value


# --------------------------------------------------------------------------------------------
# Anthropic Messages (rust/src/accumulate/anthropic.rs)

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
