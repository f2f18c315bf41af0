"""What came on the wire: the wire-info pass, :func:`encode` and :func:`extras`.

msgspec decodes a payload into Structs and drops what the schema does not hold: members it does
not know, and (when encoding back with ``omit_defaults``) known fields whose value equals the
default. Every schema Struct keeps that in its hidden ``_wire`` attribute (a slot that is no
msgspec field, so msgspec's encoders never write it: see :class:`rapidsse._schema.Wire` and
``_WireSlot``); this module is the one place that computes it and the one writer that reads it.

:func:`compute` is the reference: the pure-Python backend's path, used by every decode path
(the batch, the careful path, the accumulators' snapshots, ``decode_realtime``), and the function a
native implementation must agree with, Struct for Struct (``docs/fidelity.md``). It walks the
payload's JSON, decoded generically by msgspec, beside the Struct tree and sets ``_wire`` on each
Struct (at every depth, in lists and dict values too):

- ``None`` when the Struct's ``omit_defaults`` encoding is exactly what came, all the way down;
- ``Wire(extra, present)`` when the object had members the schema does not know (``extra``, their
  raw JSON text in the order received, sliced from the payload with :class:`msgspec.Raw`) or known
  fields sent with their default value (``present``, JSON names in the order of the Struct's
  fields, which is the order :func:`encode` writes);
- ``Wire()`` (the shared :data:`DEEP`) when it is exact itself but a Struct below it is not, or it
  is an :class:`~rapidsse._schema.UnknownVariant` (whose encoding is not what came either).

A field counts as at its default when ``value == default`` (an empty list or dict for those
default factories); a required field never does.
"""

from __future__ import annotations

import json as _json
from typing import Any, Callable, Union

import msgspec
import msgspec.inspect as mi

from ._schema import UNKNOWN_TAG, Model, UnknownEvent, UnknownVariant, Wire, decode_lenient

__all__ = ["DEEP", "NATIVE_WIRE", "compute", "compute_lines", "decode", "encode", "extras"]

#: Whether the Rust Struct builder (``rust/src/bindings/native.rs``) sets ``_wire`` itself (it
#: does: ``docs/internals-fidelity.md``). False would leave every event of the Rust backend's
#: decoders to msgspec and this pass.
NATIVE_WIRE = True

#: The ``_wire`` of a Struct that is exact itself but holds one that is not.
DEEP = Wire()

_encode = msgspec.json.Encoder().encode
_decode_msgspec = msgspec.json.Decoder().decode
_decode_msgspec_lines = msgspec.json.Decoder().decode_lines


def _decode_any(payload: Any) -> Any:
    """The payload decoded generically. msgspec's generic decoder refuses a number beyond float
    range (``1e400``) that its Struct decoder skips in an unknown member; the pass needs only the
    structure and the keys (values are sliced from the payload), so the stdlib reads those, and
    bytes that are not UTF-8 (which msgspec skips unread in an unknown member too) as
    surrogate escapes."""
    try:
        return _decode_msgspec(payload)
    except msgspec.ValidationError:
        if isinstance(payload, (bytes, bytearray, memoryview)):
            payload = bytes(payload).decode("utf-8", "surrogateescape")
        return _json.loads(payload)


def _decode_any_lines(lines: bytes) -> list[Any]:
    """:func:`_decode_any` of each line (a batch: one JSON value a line, none blank)."""
    try:
        return _decode_msgspec_lines(lines)
    except msgspec.ValidationError:
        return [_decode_any(line) for line in lines.split(b"\n")]


_decode_members = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_decode_items = msgspec.json.Decoder(list[msgspec.Raw]).decode
# What msgspec.json.encode writes that a received payload never has: the wrapper of an
# UnknownVariant. Found in a fast-path encoding, it sends the Struct the careful way.
_MARKER = b'"' + UNKNOWN_TAG.encode() + b'"'

# Default kinds of a field.
_REQUIRED, _VALUE, _EMPTY_LIST, _EMPTY_DICT, _NEVER = 0, 1, 2, 3, 4


class _Field:
    __slots__ = ("attr", "name", "key", "kind", "default", "nested", "order", "none_default")

    def __init__(self, f: mi.Field, order: int) -> None:
        self.order = order
        self.attr = f.name
        self.name = f.encode_name
        self.key = _encode(f.encode_name) + b":"
        self.nested = _holds_struct(f.type)
        self.default: Any = None
        if f.required:
            self.kind = _REQUIRED
        elif f.default_factory is not msgspec.NODEFAULT:
            self.kind = {list: _EMPTY_LIST, dict: _EMPTY_DICT}.get(f.default_factory, _NEVER)
        else:
            self.kind, self.default = _VALUE, f.default
        # At its default exactly when the JSON value is null (JSON null, and only null, decodes
        # to None): the pass need not read the attribute.
        self.none_default = self.kind == _VALUE and self.default is None

    def omitted(self, value: Any) -> bool:
        """Whether msgspec's ``omit_defaults`` leaves ``value`` out (the default itself, or an
        empty list or dict for those factories): how a Struct without wire info is written."""
        kind = self.kind
        if kind == _VALUE:
            return value is self.default
        if kind == _EMPTY_LIST:
            return type(value) is list and not value
        if kind == _EMPTY_DICT:
            return type(value) is dict and not value
        return False

    def at_default(self, value: Any) -> bool:
        kind = self.kind
        if kind == _VALUE:
            return bool(value is self.default or value == self.default)
        if kind == _EMPTY_LIST:
            return type(value) is list and not value
        if kind == _EMPTY_DICT:
            return type(value) is dict and not value
        return False


class _Class:
    """One Struct class as the pass and the writer read it."""

    __slots__ = ("by_name", "known", "fields", "tag_field", "head", "unknown", "wires", "valued", "nested")

    def __init__(self, cls: type) -> None:
        info = mi.type_info(cls)
        assert isinstance(info, mi.StructType)
        self.fields = [_Field(f, i) for i, f in enumerate(info.fields)]
        self.by_name: dict[str, Union[_Field, None]] = {f.name: f for f in self.fields}
        self.tag_field = info.tag_field
        self.head = b""
        if info.tag_field is not None:
            self.by_name[info.tag_field] = None  # the tag: known, not a field
            self.head = _encode(info.tag_field) + b":" + _encode(info.tag)
        self.unknown = issubclass(cls, UnknownVariant)
        # Wire(present=...) by the names sent with their defaults, in wire order: a stream sends
        # the same few again and again, and a Wire is immutable.
        self.wires: dict[tuple[str, ...], Wire] = {}
        self.known = frozenset(self.by_name)
        # Fields whose default is not None (their value is compared with it), and those that
        # may hold Structs (walked).
        self.valued = [f for f in self.fields if f.kind in (_VALUE, _EMPTY_LIST, _EMPTY_DICT) and not f.none_default]
        self.nested = [f for f in self.fields if f.nested]


_CLASSES: dict[type, _Class] = {}


def _class(cls: type) -> _Class:
    c = _CLASSES.get(cls)
    if c is None:
        c = _CLASSES[cls] = _Class(cls)
    return c


def _holds_struct(t: Any) -> bool:
    """Whether a value of type ``t`` may hold a schema Struct (the pass walks only those)."""
    if isinstance(t, mi.StructType):
        return True
    if isinstance(t, mi.UnionType):
        return any(_holds_struct(m) for m in t.types)
    if isinstance(t, (mi.ListType, mi.TupleType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        return _holds_struct(t.item_type)
    if isinstance(t, mi.DictType):
        return _holds_struct(t.value_type)
    if isinstance(t, mi.Metadata):
        return _holds_struct(t.type)
    return False


# --- the wire-info pass -----------------------------------------------------------------------


class _Source:
    """The payload, sliced on demand into the raw text of one object's members."""

    __slots__ = ("payload",)

    def __init__(self, payload: Union[bytes, bytearray, memoryview, str]) -> None:
        self.payload = payload

    def members(self, path: list[Union[str, int]], names: list[str]) -> bytes:
        """The JSON text of an object of the members ``names`` of the object at ``path``."""
        node: Any = msgspec.Raw(self.payload.encode("utf-8", "surrogatepass")
                                if isinstance(self.payload, str) else bytes(self.payload))
        for step in path:
            node = (_decode_items(node) if isinstance(step, int) else _decode_members(node))[step]
        members = _decode_members(node)
        return b"{" + b",".join([_encode(name) + b":" + bytes(members[name]) for name in names]) + b"}"


def _struct(doc: dict[str, Any], obj: Any, path: list[Union[str, int]], source: _Source) -> bool:
    """Sets ``obj._wire`` from ``doc``, the JSON object it was decoded from, and the same below.
    Returns whether ``obj`` is not exact (its ``_wire`` is not None). (An exact Struct gets None:
    the slot of a Struct msgspec just made is unset.)"""
    c = _CLASSES.get(type(obj)) or _class(type(obj))
    if c.unknown:
        obj._wire = DEEP
        return True
    by_name = c.by_name
    extra: Union[list[str], None] = None
    present: Union[list[str], None] = None
    # (Set operations and scans in C first: most objects have no unknown member, and few nulls.)
    if not c.known.issuperset(doc):
        extra = [name for name in doc if name not in by_name]
    if None in doc.values():
        for name in [name for name, value in doc.items() if value is None]:
            f = by_name.get(name)
            if f is not None and f.none_default:
                if present is None:
                    present = [name]
                else:
                    present.append(name)
    for f in c.valued:
        if f.name in doc and f.at_default(getattr(obj, f.attr)):
            if present is None:
                present = [f.name]
            else:
                present.append(f.name)
    deep = False
    for f in c.nested:
        value = doc.get(f.name)
        if type(value) is list:
            typed = getattr(obj, f.attr)
            if type(typed) is list and len(typed) == len(value):
                path.append(f.name)
                for i, item in enumerate(typed):  # (a list of Structs, inline: the common case)
                    if isinstance(item, Model):
                        item_doc = value[i]
                        if type(item_doc) is dict:
                            path.append(i)
                            if _struct(item_doc, item, path, source):
                                deep = True
                            path.pop()
                    elif isinstance(item, (list, dict)):
                        path.append(i)
                        if _value(value[i], item, path, source):
                            deep = True
                        path.pop()
                path.pop()
        elif type(value) is dict:
            path.append(f.name)
            if _value(value, getattr(obj, f.attr), path, source):
                deep = True
            path.pop()
    if extra is not None:
        obj._wire = Wire(
            extra=source.members(path, extra), present=() if present is None else _names(c, present)
        )
        return True
    if present is not None:
        key = tuple(present)
        wire = c.wires.get(key)
        if wire is None:
            wire = Wire(present=_names(c, present))
            if len(c.wires) < _MAX_WIRES:
                c.wires[key] = wire
        obj._wire = wire
        return True
    if deep:
        obj._wire = DEEP
        return True
    obj._wire = None
    return False


_MAX_WIRES = 256


def _names(c: _Class, present: list[str]) -> tuple[str, ...]:
    """``present`` (JSON names) in the order of the Struct's fields (the order :func:`encode`
    writes them in, so that a re-decoded event is equal)."""
    if len(present) > 1:
        by_name = c.by_name
        present.sort(key=lambda name: by_name[name].order)  # type: ignore[union-attr]
    return tuple(present)


def _value(doc: Any, typed: Any, path: list[Union[str, int]], source: _Source) -> bool:
    """The pass over one value: a Struct, or a list or dict that may hold Structs."""
    if isinstance(typed, Model):
        return type(doc) is dict and _struct(doc, typed, path, source)
    deep = False
    if type(typed) is list:
        if type(doc) is list and len(doc) == len(typed):
            for i, item in enumerate(typed):
                if isinstance(item, (Model, list, dict)):
                    path.append(i)
                    if _value(doc[i], item, path, source):
                        deep = True
                    path.pop()
    elif type(typed) is dict and type(doc) is dict:
        for key, item in typed.items():
            if isinstance(item, (Model, list, dict)) and key in doc:
                path.append(key)
                if _value(doc[key], item, path, source):
                    deep = True
                path.pop()
    return deep


def compute(obj: Any, payload: Union[bytes, bytearray, memoryview, str], doc: Any = None) -> Any:
    """Sets ``_wire`` on ``obj`` and on every Struct in it, from ``payload``, the JSON that ``obj``
    was decoded from (``doc``: that JSON decoded generically, if the caller has it). Returns
    ``obj``. Anything but a schema Struct, or a list or dict of them, is returned untouched.

    >>> from rapidsse import chat
    >>> raw = b'{"choices":[{"index":0,"delta":{"content":"Hi"},"token_id":5}]}'
    >>> c = compute(msgspec.json.decode(raw, type=chat.ChatCompletionChunk), raw)
    >>> c.choices[0]._wire
    Wire(extra=b'{"token_id":5}', present=('index',))
    >>> c._wire is DEEP
    True
    """
    if isinstance(obj, (Model, list, dict)):
        if doc is None:
            if _native_compute is not None and _native_compute(obj, payload):
                return obj
            doc = _decode_any(payload)
        _value(doc, obj, [], _Source(payload))
    return obj


def compute_lines(events: list[Any], lines: Union[bytes, bytearray]) -> list[Any]:
    """:func:`compute` for each event of a batch: ``events[i]`` decoded from line ``i`` of
    ``lines`` (one JSON value a line, as :func:`wrap_lines` checks). Returns ``events``."""
    lines = bytes(lines)  # the Rust core reuses its buffer
    if _native_lines is not None and _native_lines(events, lines):
        return events
    docs = _decode_any_lines(lines)
    payloads: Union[list[bytes], None] = None
    for i, event in enumerate(events):
        if isinstance(event, Model):
            c = _CLASSES.get(type(event)) or _class(type(event))
            doc = docs[i]
            if c.unknown or type(doc) is not dict:
                continue
            if payloads is None:
                payloads = lines.split(b"\n")
            _struct(doc, event, [], _Source(payloads[i]))
    return events


def _native_pass() -> tuple[Any, Any, Any]:
    """The Rust backend's wire-info pass (``rust/src/bindings/wire.rs``: the same ``_wire``, Struct
    for Struct, as this module's; it answers False for what it leaves to this one) and writer
    (``wire_encode`` in ``rust/src/bindings/structs.rs``: JSON equal, as a value, to
    :func:`encode`'s; None for what it leaves to it), or Nones (the pure-Python backend, or
    ``RAPIDSSE_NATIVE_STRUCTS=0``)."""
    from . import _native
    from ._backend import core

    native = core()
    if native is None or not _native.ENABLED or not native.wire_setup((Wire, DEEP), _native.wire_class):
        return None, None, None
    return native.wire_compute, native.wire_compute_lines, native.wire_encode


_native_compute, _native_lines, _native_encode = _native_pass()


def wrap_lines(decoder: msgspec.json.Decoder) -> Callable[[Any, int], list[Any]]:
    """The batch decoder of a schema's ``decoder``: ``(lines, count)``, ``count`` payloads joined by
    ``\\n``, -> one event a line, then :func:`compute_lines`.

    The callers send only payloads that hold no newline and whose first and last non-whitespace
    bytes are ``{`` and ``}`` (what a server sends as ``data: {...}``). msgspec's ``decode_lines``
    reads whitespace-separated JSON values wherever they are (``{...} {...}`` on one line is two
    values, a value cut over two lines is one), but a value cannot hold ``}`` then ``{`` (nor, in a
    string, a raw newline): so no value spans two such lines, each line holds at least one, and as
    many values as lines means exactly one each. Any other count raises msgspec.DecodeError, and
    the payloads take the careful path, one by one."""
    decode_lines = decoder.decode_lines

    def decode_lines_with_wire(lines: Any, count: int) -> list[Any]:
        events = decode_lines(lines)
        if len(events) != count:
            raise msgspec.DecodeError("a payload of the batch is not one JSON value")
        return compute_lines(events, lines)

    return decode_lines_with_wire


def wrap_one(decode_one: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``decode_one`` (one payload) followed by :func:`compute`."""

    def decode_with_wire(payload: Any) -> Any:
        return compute(decode_one(payload), payload)

    return decode_with_wire


def decode(buf: Union[bytes, bytearray, memoryview, str], type: Any) -> Any:
    """:func:`rapidsse._schema.decode_lenient` with ``_wire`` computed."""
    return compute(decode_lenient(buf, type), buf)


# --- writing back ---------------------------------------------------------------------------------


def encode(obj: Any) -> bytes:
    """One event's JSON payload, as received: for an event decoded by rapidsse and not changed,
    JSON equal (as a JSON value) to the payload it came from: the same members, ``null`` where
    the server sent null, absent members absent. Also takes the accumulators' objects
    (``Response``, ``ChatCompletion``, realtime responses) and any schema Struct.

    Each Struct is written as: its tag first (tagged types), then each field whose value is not
    its default or that was sent (``_wire.present``), then the unknown members as received
    (``_wire.extra``). A changed field is written with its new value. :class:`UnknownEvent` writes
    its ``raw`` payload, an ``UnknownVariant`` its ``data``.

    >>> import rapidsse
    >>> raw = b'{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":null}],"x_groq":{"id":"r"}}'
    >>> event = rapidsse.EventDecoder("chat").feed(b"data: " + raw + b"\\n\\n")[0]
    >>> encode(event)
    b'{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":null}],"x_groq":{"id":"r"}}'
    """
    if isinstance(obj, Model):
        if _native_encode is not None:
            native = _native_encode(obj)
            if native is not None:
                return native
        parts: list[bytes] = []
        _write_struct(obj, parts)
        return b"".join(parts)
    if isinstance(obj, UnknownEvent):
        return obj.raw
    if isinstance(obj, (list, dict)):
        parts = []
        _write_value(obj, parts)
        return b"".join(parts)
    raw = getattr(obj, "raw", None)  # an InvalidEvent
    if isinstance(raw, bytes) and isinstance(obj, msgspec.Struct):
        return raw
    raise TypeError(f"encode() takes a rapidsse event or schema object, not {type(obj).__name__}")


def _write_struct(obj: Any, out: list[bytes]) -> None:
    wire = getattr(obj, "_wire", None)
    c = _CLASSES.get(type(obj)) or _class(type(obj))
    if c.unknown:
        out.append(_encode(obj.data))
        return
    if wire is None and not c.nested:
        # Nothing received beyond its fields, and no Struct below that may carry some (msgspec's
        # encoding does not show a nested Struct's wire info, so only a flat Struct goes whole).
        encoded = _encode(obj)
        if _MARKER not in encoded:
            out.append(encoded)
            return
    if not isinstance(wire, Wire):
        _write_fields(obj, c, out)
        return
    present: tuple[str, ...] = wire.present
    out.append(b"{")
    first = True
    if c.head:
        out.append(c.head)
        first = False
    for f in c.fields:
        value = getattr(obj, f.attr)
        if f.at_default(value) and f.name not in present:
            continue
        if not first:
            out.append(b",")
        first = False
        out.append(f.key)
        _write_value(value, out)
    extra = wire.extra
    if extra:
        members = extra.strip()[1:-1].strip()
        if members:
            if not first:
                out.append(b",")
            out.append(members)
    out.append(b"}")


def _write_fields(obj: Any, c: _Class, out: list[bytes]) -> None:
    """A Struct without wire info, as msgspec writes it (``omit_defaults``), each field's value
    by :func:`_write_value` (a Struct below may carry wire info)."""
    out.append(b"{")
    first = True
    if c.head:
        out.append(c.head)
        first = False
    for f in c.fields:
        value = getattr(obj, f.attr)
        if value is msgspec.UNSET or f.omitted(value):
            continue
        if not first:
            out.append(b",")
        first = False
        out.append(f.key)
        _write_value(value, out)
    out.append(b"}")


def _write_value(value: Any, out: list[bytes]) -> None:
    if isinstance(value, Model):
        _write_struct(value, out)
    elif type(value) in (list, tuple):
        out.append(b"[")
        for i, item in enumerate(value):
            if i:
                out.append(b",")
            _write_value(item, out)
        out.append(b"]")
    elif type(value) is dict:
        out.append(b"{")
        for i, (key, item) in enumerate(value.items()):
            if i:
                out.append(b",")
            out.append(_encode(key) + b":")
            _write_value(item, out)
        out.append(b"}")
    else:
        out.append(_encode(value))


def extras(obj: Any) -> dict[str, Any]:
    """The members of the JSON object ``obj`` was decoded from that its schema does not know,
    decoded (``{}`` when there were none), in the order received::

        >>> import rapidsse
        >>> raw = b'{"usage":{"prompt_tokens":12,"prompt_cache_hit_tokens":0,"prompt_cache_miss_tokens":12}}'
        >>> chunk = rapidsse.EventDecoder("chat").feed(b"data: " + raw + b"\\n\\n")[0]
        >>> rapidsse.extras(chunk.usage)
        {'prompt_cache_hit_tokens': 0, 'prompt_cache_miss_tokens': 12}

    Known fields are attributes; this is the one place for the rest, and it cannot collide with a
    field name. :class:`UnknownEvent` (``raw``) and ``UnknownVariant`` (``data``) hold their whole
    object already and give ``{}``.
    """
    if not isinstance(obj, msgspec.Struct):
        raise TypeError(f"extras() takes a rapidsse event or schema object, not {type(obj).__name__}")
    wire = getattr(obj, "_wire", None)
    if isinstance(wire, Wire) and wire.extra:
        members = _decode_any(wire.extra)
        if isinstance(members, dict):
            return members
    return {}
