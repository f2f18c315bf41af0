"""JSON values of the pure cores: read as the Rust core's serde_json reads them, written as
``rust/src/accumulate/json.rs`` writes them (``_dumps``: compact, non-ASCII kept).

JSON is read the way the Rust core's serde_json reads it, accept/reject decision for decision:

- Fast path: the payload decodes as UTF-8 and the stdlib ``json`` accepts it with no ``NaN`` /
  ``Infinity`` literal, no number overflowing an f64, no lone surrogate escape and at most 127
  levels of nesting. Then serde_json's strict parse accepts it too, and the values are the same
  (integers outside i64/u64 become floats, as in serde_json; ``-0`` is the float ``-0.0``).
- Otherwise a port of serde_json's ``ignore_value`` (the lenient ``IgnoredAny`` parse that gives
  the Rust side's error messages) reads the bytes, giving the same message, line and column, and
  a tree in which strings that are not valid UTF-8 or hold lone surrogates, and numbers out of
  f64 range, are marked. The typed parse of the event (which fields are read as strings,
  integers, raw fragments or skipped; ``mod.py``) is then replayed on that tree: a marked value
  where serde would decode it is a syntax error (the Rust side then reports "not a JSON
  object"), a wrong type or a duplicated read field is a data error ("malformed event"), and a
  fragment the Rust side parses later as a ``Value`` (nesting limit 128) is treated as absent
  when it is marked.

Text deltas are kept as piece lists (``_Buf``) joined when read, so the cost stays linear in the
input whatever the number of deltas."""

from __future__ import annotations

import json
import re
from json.decoder import scanstring as _scanstring
from typing import Any


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
