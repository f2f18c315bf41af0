"""Shared bases and helpers of the typed event schemas (``responses``, ``chat``, ``realtime``).

Every schema type is a :class:`msgspec.Struct` that derives from :class:`Model` (plain objects) or
:class:`Tagged` (objects told apart by their JSON ``"type"``), so they all share one configuration:

- ``omit_defaults=True``: ``msgspec.json.encode(x)`` writes a compact payload that decodes back equal;
- ``gc=False``: decoded events are trees of strings, numbers, lists and dicts that never form reference
  cycles, so the garbage collector need not track them (faster decoding, less GC work). Do not store
  a struct inside itself.

Nearly every field has a default, because real servers omit fields freely.

What came on the wire
---------------------
msgspec drops JSON members the schema does not list, and ``omit_defaults`` leaves out fields whose
value equals the default (``"index": 0``, ``"logprobs": null``). So every schema Struct has one
hidden attribute, ``_wire``, that is not a msgspec field: a slot of the mixin :class:`_WireSlot`
that :class:`Model` derives from, which msgspec does not know about. It is ``None`` (or unset, on
a Struct built by hand) when the Struct encoded with ``omit_defaults`` is exactly what came, else
a shared, immutable :class:`Wire` saying what differs (see :mod:`rapidsse._wire`, which computes
it, and ``docs/fidelity.md``). Read the unknown members with :func:`rapidsse.extras`, write an
event back as received with :func:`rapidsse.encode`.

Being no field, ``_wire`` is in nothing msgspec writes or reads: ``msgspec.json.encode``,
``msgspec.msgpack.encode``, ``msgspec.to_builtins``, ``msgspec.structs.asdict`` / ``astuple``,
``repr`` and ``==`` see the schema's fields only. msgspec's own copies (``msgspec.structs.replace``,
``copy.copy``) copy fields only, so :class:`Model` carries the slot over in ``__copy__`` and
``__replace__``, and :func:`replace` (installed as ``msgspec.structs.replace``, see there) does the
same for ``msgspec.structs.replace``.

Unknown nested types
--------------------
msgspec decodes a tagged union only if the tag is known, and a union cannot mix tagged Structs with
``dict``. So each nested tagged union of the schemas (output items, content parts, annotations, tools,
...) has one extra member, a subclass of :class:`UnknownVariant` tagged ``"__unknown__"``, that keeps
the original type string and the whole object. :func:`decode_lenient` puts unknown objects there: it
decodes normally (the fast path), and only when msgspec reports an unknown tag below the top level
(``Invalid value 'hologram_call' - at `$.response.output[0].type```) does it decode the payload
generically, wrap that object (and its siblings of the same type in the same list) as
``{"type": "__unknown__", "original_type": ..., "data": {...}}``, and convert again (with
``msgspec.convert``), once per unknown type and place, a bounded number of times. An unknown type at
the top level (``$.type``) is left to the caller, which turns such events into :class:`UnknownEvent`.
No custom ``dec_hook`` is involved, so the fast path (``msgspec.json.Decoder(list[Event])``) stays
as fast as msgspec allows.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

__all__ = [
    "Model",
    "Wire",
    "WIRE_NAME",
    "replace",
    "Tagged",
    "UnknownVariant",
    "UnknownEvent",
    "RateLimit",
    "TopLogprob",
    "UNKNOWN_TAG",
    "decode_lenient",
]

#: The tag of every :class:`UnknownVariant`; no real API uses it.
UNKNOWN_TAG = "__unknown__"


#: The name the wire record went by when it was a msgspec field (it is no field now, and no
#: encoder writes it). A payload that sends it is read as an unknown member like any other.
WIRE_NAME = "__rapidsse_wire__"


class Wire(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """What one decoded JSON object had beyond its Struct's ``omit_defaults`` encoding.

    - ``extra``: the members the schema does not know, as the raw JSON text of an object, exactly
      as received and in the order received (``b'{"x_groq":{"id":"r1"},"token_id":5}'``), or None;
    - ``present``: the JSON names of known fields that were sent although their value equals the
      field's default (so ``omit_defaults`` would drop them), e.g. ``("index", "logprobs")``.

    ``Wire()`` (both empty) marks a Struct that is exact itself but holds a Struct that is not (or
    an :class:`UnknownVariant`), so that a Struct whose ``_wire`` is None is exact all the way down.
    Immutable, so one instance is shared by many events. (``array_like``: it is nothing a JSON
    walker should mirror; :func:`rapidsse.encode` writes events, never a Wire.)
    """

    extra: bytes | None = None
    present: tuple[str, ...] = ()


class _WireSlot:
    """The slot ``_wire`` of every schema Struct, kept out of msgspec's fields.

    msgspec lays out a Struct class's fields after the slots of its bases; a plain base class with
    ``__slots__`` adds one pointer to each instance that msgspec neither fills, encodes, compares
    nor copies, and frees with the instance. Unset it reads as missing (:func:`wire_of` gives None);
    the decoders set it on every Struct they make (None when exact).
    """

    __slots__ = ("_wire",)


def wire_of(obj: Any) -> Any:
    """``obj._wire``: None when unset (a Struct built by hand) or for anything else."""
    return getattr(obj, "_wire", None)


_msgspec_replace = getattr(msgspec.structs.replace, "__wrapped__", msgspec.structs.replace)
_msgspec_copy = msgspec.Struct.__copy__


class Model(msgspec.Struct, _WireSlot, omit_defaults=True, gc=False, kw_only=True, repr_omit_defaults=True):
    """Base of all schema Structs: compact encoding, no GC tracking.

    Construct them with keywords: the fields shared by many events (``sequence_number``,
    ``item_id``, ...) are keyword-only, so that each event's required fields can follow them.

    ``_wire`` (an attribute, no field: see :class:`_WireSlot`) is ``None`` or a :class:`Wire`: what
    the JSON this object was decoded from had beyond its ``omit_defaults`` encoding. Set by the
    decoders; read it through :func:`rapidsse.extras` and :func:`rapidsse.encode`. Copies keep it
    (``copy.copy``, ``copy.replace``, ``msgspec.structs.replace``).
    """

    def __copy__(self) -> Any:
        out = _msgspec_copy(self)
        wire = getattr(self, "_wire", None)
        if wire is not None:
            out._wire = wire
        return out

    def __replace__(self, **changes: Any) -> Any:
        return replace(self, **changes)


def replace(struct: Any, /, **changes: Any) -> Any:
    """``msgspec.structs.replace`` that keeps a schema Struct's ``_wire`` (what came beyond its
    fields: unknown members, defaults that were sent) on the copy, so that
    :func:`rapidsse.encode` writes the changed fields and the rest as received.

    msgspec's own copies fields only, and ``_wire`` is no field (so that msgspec's encoders do not
    write it). Importing rapidsse installs this function as ``msgspec.structs.replace``; for any
    other Struct it is msgspec's, plus one ``isinstance`` (``__wrapped__`` is msgspec's).
    """
    out = _msgspec_replace(struct, **changes)
    if isinstance(struct, _WireSlot):
        wire = getattr(struct, "_wire", None)
        if wire is not None:
            out._wire = wire
    return out


replace.__wrapped__ = _msgspec_replace  # type: ignore[attr-defined]
msgspec.structs.replace = replace


class Tagged(Model, tag_field="type"):
    """Base of the Structs told apart by their JSON ``"type"`` (each subclass sets ``tag=``).

    The tag is not a field, but ``obj.type`` gives it, as on the wire.
    """

    @property
    def type(self) -> str:
        """The wire type string of this object (its tag)."""
        return self.__struct_config__.tag  # type: ignore[return-value]


class UnknownVariant(Tagged, tag=UNKNOWN_TAG):
    """Base of the members that hold a nested object of a type the schemas do not know.

    ``type`` is the object's original type string and ``data`` the whole object as decoded JSON
    (``type`` included). :func:`decode_lenient` creates these; plain ``msgspec.json.decode`` does not.
    :func:`rapidsse.encode` writes ``data``, the original object; ``msgspec.json.encode`` writes the
    wrapper (``{"type": "__unknown__", "original_type": ..., "data": ...}``), which decodes back equal.
    """

    original_type: str
    data: dict[str, Any]

    @property
    def type(self) -> str:
        """The original type string of the unknown object."""
        return self.original_type


class UnknownEvent(msgspec.Struct, gc=False):
    """An event whose ``type`` the schemas do not know (a new or vendor-specific event type).

    ``type`` is its wire type string and ``raw`` its JSON payload exactly as received, to decode
    further (``msgspec.json.decode(event.raw)``) or pass on unchanged.
    """

    type: str
    raw: bytes


class RateLimit(Model):
    """One rate limit as reported by ``rate_limits.updated`` events (Realtime and Responses)."""

    name: str | None = None
    limit: int | None = None
    remaining: int | None = None
    reset_seconds: float | None = None


class TopLogprob(Model):
    """A token and its log probability (``bytes``: its UTF-8 bytes): one alternative token (Chat
    Completions, Responses) or one transcribed token (Realtime's ``LogProb``)."""

    token: str | None = None
    logprob: float | None = None
    bytes: list[int] | None = None


# msgspec's message for an unknown tag, e.g. "Invalid value 'x' - at `$.output[0].type`". (A bad
# Literal value reads "Invalid enum value", so it does not match.)
_UNKNOWN_TAG_ERROR = re.compile(r"Invalid value '(.*)' - at `(\$.*)\.type`", re.DOTALL)
_PATH_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")
_MAX_REPAIRS = 1000


def _unknown_tag(error: msgspec.ValidationError) -> tuple[str, list[str | int]] | None:
    """The unknown nested tag named by ``error`` (as msgspec read it: the raw string) and the path
    to its object, or None."""
    match = _UNKNOWN_TAG_ERROR.fullmatch(str(error))
    if match is None:
        return None
    path = match.group(2)[1:]  # drop the leading "$"
    steps: list[str | int] = []
    pos = 0
    while pos < len(path):
        step = _PATH_STEP.match(path, pos)
        if step is None:  # e.g. "[...]" (inside a dict value): not a place we can reach
            return None
        steps.append(step.group(1) if step.group(1) is not None else int(step.group(2)))
        pos = step.end()
    return (match.group(1), steps) if steps else None  # [] is the top level: the caller's business


def decode_lenient(buf: bytes | bytearray | memoryview | str, type: Any) -> Any:
    """Decode JSON ``buf`` as ``type``, keeping nested objects of unknown types.

    Same result as ``msgspec.json.decode(buf, type=type)`` when every nested type is known (and just
    as fast). When a nested tagged object has a type the schemas do not know, it becomes the
    :class:`UnknownVariant` member of its union, with its original type string and data, instead of
    failing the whole payload::

        >>> r = decode_lenient(b'{"output": [{"type": "hologram_call", "id": "h1"}]}', responses.Response)
        >>> r.output[0].type, r.output[0].data
        ('hologram_call', {'type': 'hologram_call', 'id': 'h1'})

    Raises ``msgspec.ValidationError`` for anything else: an unknown top-level type (``$.type``),
    an unknown type where the union has no unknown member, or other invalid data; and
    ``msgspec.DecodeError`` for malformed JSON.
    """
    try:
        return msgspec.json.decode(buf, type=type)
    except msgspec.ValidationError as exc:
        error = exc
    document: Any = None
    # the error at each wrapped place, to raise if wrapping did not help (no unknown member there)
    wrapped: dict[tuple[str | int, ...], msgspec.ValidationError] = {}
    for _ in range(_MAX_REPAIRS):
        found = _unknown_tag(error)
        if found is None:
            raise error
        unknown_type, location = found
        if tuple(location) in wrapped:
            raise wrapped[tuple(location)]
        wrapped[tuple(location)] = error
        if document is None:
            document = msgspec.json.decode(buf)
        parent = document
        for step in location[:-1]:
            parent = parent[step]
        # The tag msgspec read is the object's first "type"; a generic decode keeps the last. They
        # differ only when the key is repeated: the data then says the type it was decoded by, so
        # that the object written back decodes the same.
        culprit = parent[location[-1]]
        if culprit.get("type") != unknown_type:
            parent[location[-1]] = {**culprit, "type": unknown_type}
        # its siblings of the same type in a list are just as unknown: wrap them in the same pass
        indices = range(len(parent)) if isinstance(parent, list) else [location[-1]]
        for index in indices:
            obj = parent[index]
            if isinstance(obj, dict) and obj.get("type") == unknown_type:
                parent[index] = {"type": UNKNOWN_TAG, "original_type": unknown_type, "data": obj}
        try:
            return msgspec.convert(document, type=type)
        except msgspec.ValidationError as exc:
            error = exc
    raise error
