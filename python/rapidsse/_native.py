"""The schemas described to the Rust core, which builds the plain Structs of a stream itself.

On the Rust backend, :class:`rapidsse.EventDecoder` builds the common events (text deltas, Chat
chunks, ...) straight from their JSON, without a call into msgspec, and leaves the rest to
msgspec (see ``rust/src/bindings/native.rs``). This module tells it, from
:mod:`msgspec.inspect`, what each Struct class holds: every field's JSON name, what its type
admits (None, str, int, float, bool, a list, a nested untagged Struct) and its default. A type
the builder does not handle (a dict, ``Any``, a literal, a constrained type) is marked
unsupported: an event with such a field present goes to msgspec. With ``tagged_unions`` (the
Anthropic schemas, whose deltas and blocks are nested unions), a union of Structs tagged on one
field is described by its tag field and the class of each tag (the builder reads the tag, which
must come first, and builds that class; anything else goes to msgspec); without it, such a
union is unsupported too.

The hidden ``_wire`` attribute of :class:`rapidsse._schema.Model` (what came on the wire beyond
the Struct's ``omit_defaults`` encoding, see :mod:`rapidsse._wire`) is no msgspec field but a slot
of its own: the builder finds it on the class and sets it itself (``docs/internals-fidelity.md``).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import msgspec
import msgspec.inspect as mi

from ._schema import Model, Wire

#: ``RAPIDSSE_NATIVE_STRUCTS=0`` leaves every event to msgspec (to compare, or to rule the builder
#: out when chasing a problem); read when a decoder is made.
ENABLED = os.environ.get("RAPIDSSE_NATIVE_STRUCTS", "1") != "0"

NULL, STR, INT, FLOAT, BOOL, LIST, STRUCT, UNSUPPORTED = 1, 2, 4, 8, 16, 32, 64, 128

_NUMBER_CONSTRAINTS = ("gt", "ge", "lt", "le", "multiple_of")

Node = tuple[int, Any, int, Any]


class _Describer:
    def __init__(self, tagged_unions: bool = False) -> None:
        self.tagged_unions = tagged_unions
        self.structs: list[Any] = []
        self.index: dict[type, int] = {}

    def struct(self, st: mi.StructType) -> int:
        cls = st.cls
        if cls in self.index:
            return self.index[cls]
        i = len(self.structs)
        self.index[cls] = i
        self.structs.append(None)  # taken by `i` before the fields, which may refer to it
        self.structs[i] = (cls, self.fields(st), st.forbid_unknown_fields, st.tag_field)
        return i

    def fields(self, st: mi.StructType) -> list[tuple[str, str, Node, int, Any]] | None:
        """The fields of ``st``, or None when the builder must leave the class to msgspec."""
        if st.array_like or len(st.fields) > 64 or "__post_init__" in dir(st.cls):
            return None
        out = []
        for f in st.fields:
            if f.required:
                kind, default = 0, None
            elif f.default_factory is not msgspec.NODEFAULT:
                if f.default_factory is list:
                    kind, default = 2, None
                elif f.default_factory is dict:
                    kind, default = 3, None
                else:
                    return None
            else:
                kind, default = 1, f.default
            out.append((f.name, f.encode_name, self.node(f.type), kind, default))
        return out

    def node(self, t: Any) -> Node:
        members = t.types if isinstance(t, mi.UnionType) else (t,)
        mask, item, struct = 0, None, -1
        tagged: dict[str, int] = {}
        tag_fields = set()
        for m in members:
            if isinstance(m, mi.NoneType):
                mask |= NULL
            elif isinstance(m, mi.StrType) and m.min_length is None and m.max_length is None and m.pattern is None:
                mask |= STR
            elif isinstance(m, mi.BoolType):
                mask |= BOOL
            elif isinstance(m, mi.IntType) and all(getattr(m, c) is None for c in _NUMBER_CONSTRAINTS):
                mask |= INT
            elif isinstance(m, mi.FloatType) and all(getattr(m, c) is None for c in _NUMBER_CONSTRAINTS):
                mask |= FLOAT
            elif isinstance(m, mi.ListType) and m.min_length is None and m.max_length is None:
                mask |= LIST
                item = self.node(m.item_type)
            elif isinstance(m, mi.StructType) and m.tag_field is None and not m.array_like and struct < 0:
                mask |= STRUCT
                struct = self.struct(m)
            elif (
                self.tagged_unions and isinstance(m, mi.StructType) and m.tag_field is not None
                and isinstance(m.tag, str) and not m.array_like
            ):
                tag_fields.add(m.tag_field)
                tagged[m.tag] = self.struct(m)
            else:
                mask |= UNSUPPORTED
        tags = None
        if tagged:
            if struct < 0 and len(tag_fields) == 1:
                mask |= STRUCT
                tags = (tag_fields.pop(), tagged)
            else:
                mask |= UNSUPPORTED
        return (mask, item, struct, tags)


def describe(event_type: Any, tagged_unions: bool = False) -> tuple[list[Any], dict[str, int] | int, str | None]:
    """``(structs, roots, tag_field)`` for :class:`rapidsse._rapidsse.NativeSchema`: the top-level
    classes by tag (a tagged union of Structs) or the one top-level class. ``tagged_unions``:
    describe nested tagged unions for the builder (see the module docs)."""
    d = _Describer(tagged_unions)
    info = mi.type_info(event_type)
    if isinstance(info, mi.StructType) and info.tag_field is None:
        return d.structs, d.struct(info), None
    members = info.types if isinstance(info, mi.UnionType) else (info,)
    roots: dict[str, int] = {}
    tag_fields = set()
    for m in members:
        if isinstance(m, mi.StructType) and isinstance(m.tag, str) and m.tag_field is not None:
            tag_fields.add(m.tag_field)
            roots[m.tag] = d.struct(m)
    if len(tag_fields) != 1:
        raise ValueError(f"expected a union of Structs tagged on one field, got {event_type!r}")
    return d.structs, roots, tag_fields.pop()


@functools.lru_cache(maxsize=None)
def native_schema(core: Any, event_type: Any, tagged_unions: bool = False) -> Any:
    """The ``NativeSchema`` of ``event_type`` for the extension module ``core`` (built once;
    ``tagged_unions``: see :func:`describe`). It makes the ``_wire`` values itself: :class:`~rapidsse._schema.Wire` objects, and
    :data:`rapidsse._wire.DEEP` for a Struct exact itself holding one that is not."""
    from ._wire import DEEP

    return core.NativeSchema(*describe(event_type, tagged_unions), wire=(Wire, DEEP))


# How the native wire-info pass (``rust/src/bindings/wire.rs``) tells a field at its default:
# never (required), by identity (a None default), by ``==``, an empty list, an empty dict.
_AT_NEVER, _AT_IDENTITY, _AT_EQUAL, _AT_EMPTY_LIST, _AT_EMPTY_DICT = 0, 1, 2, 3, 4


def wire_class(cls: type) -> Any:
    """What the native wire-info pass needs of the class ``cls`` (asked once per class):
    None when it is no :class:`~rapidsse._schema.Model` (the pass does not look inside it), else
    ``(tag_field, is_unknown_variant, fields)``, each field ``(attr, json_name, at_default_kind,
    default, may_hold_a_struct)``, in field order (``_wire`` is no field): what
    :mod:`rapidsse._wire`'s Python pass reads of the class, so that both give the same ``_wire``."""
    from ._schema import UnknownVariant
    from ._wire import _holds_struct

    if not (isinstance(cls, type) and issubclass(cls, Model)):
        return None
    info = mi.type_info(cls)
    fields = []
    for f in info.fields:
        if f.required:
            kind, default = _AT_NEVER, None
        elif f.default_factory is not msgspec.NODEFAULT:
            kind = {list: _AT_EMPTY_LIST, dict: _AT_EMPTY_DICT}.get(f.default_factory, _AT_NEVER)
            default = None
        elif f.default is None:
            kind, default = _AT_IDENTITY, None
        else:
            kind, default = _AT_EQUAL, f.default
        fields.append((f.name, f.encode_name, kind, default, _holds_struct(f.type)))
    return (info.tag_field, issubclass(cls, UnknownVariant), fields)
