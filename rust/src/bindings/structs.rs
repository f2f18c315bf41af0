//! Reading msgspec Structs from Rust: their fields straight from memory (each slot's offset
//! checked against `getattr` first), and whole Structs walked into JSON values, as
//! `msgspec.json.encode` followed by a JSON parse would give them, without either.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple, PyType};
use serde_json::{Map, Number, Value};

use super::Imported;

static STRUCT: Imported = Imported::new("msgspec", "Struct");
static UNSET: Imported = Imported::new("msgspec", "UNSET");

/// The head of CPython's `PyMemberDescrObject` (`PyDescr_COMMON` then the `PyMemberDef`),
/// unchanged from 3.3 through 3.14. Only read on the CPython versions [`direct_reads`] admits.
#[repr(C)]
struct MemberDescr {
    ob_base: pyo3::ffi::PyObject,
    d_type: *mut pyo3::ffi::PyTypeObject,
    d_name: *mut pyo3::ffi::PyObject,
    d_qualname: *mut pyo3::ffi::PyObject,
    d_member: *const pyo3::ffi::PyMemberDef,
}

/// Whether this interpreter's member descriptors have the layout of [`MemberDescr`]: CPython
/// 3.10 to 3.14. Elsewhere typed text events go by their JSON.
pub(crate) fn direct_reads(py: Python<'_>) -> bool {
    static ADMITTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ADMITTED.get_or_init(|| admitted(py))
}

fn admitted(py: Python<'_>) -> bool {
    let cpython = py
        .import("sys")
        .and_then(|sys| sys.getattr("implementation"))
        .and_then(|i| i.getattr("name"))
        .and_then(|n| n.extract::<String>())
        .is_ok_and(|name| name == "cpython");
    let v = py.version_info();
    cpython && v.major == 3 && (10..=14).contains(&v.minor)
}

/// One field of a Struct class, read straight from the instance's memory at the offset its
/// slot descriptor gives (what the descriptor's own getter does, without a call, a reference
/// count or an exception for an unset field).
#[derive(Clone, Copy)]
pub(crate) struct Slot {
    offset: usize,
}

impl Slot {
    /// The byte offset of the field in an instance.
    pub(crate) fn offset(&self) -> usize {
        self.offset
    }

    /// The slot of `name` in `cls`, if it is a plain object slot (msgspec Struct fields are),
    /// checked against `instance` (an instance of exactly `cls`): the value read at the offset
    /// must be the very object `getattr` returns.
    pub(crate) fn of(
        cls: &Bound<'_, PyType>,
        name: &str,
        instance: &Bound<'_, PyAny>,
    ) -> Option<Slot> {
        Slot::checked(cls, name, instance, false)
    }

    fn checked(
        cls: &Bound<'_, PyType>,
        name: &str,
        instance: &Bound<'_, PyAny>,
        unset_ok: bool,
    ) -> Option<Slot> {
        let py = cls.py();
        let descr = cls.getattr(name).ok()?;
        if descr.get_type().name().ok()?.to_str().ok()? != "member_descriptor" {
            return None;
        }
        let basicsize: usize = cls
            .getattr(pyo3::intern!(py, "__basicsize__"))
            .ok()?
            .extract()
            .ok()?;
        // SAFETY: `descr` is a live member descriptor, whose layout on the interpreters
        // `direct_reads` admits is `MemberDescr`; `d_member` points to its static `PyMemberDef`.
        let offset = unsafe {
            let member = (*descr.as_ptr().cast::<MemberDescr>()).d_member;
            if member.is_null() || (*member).name.is_null() {
                return None;
            }
            let member = &*member;
            if std::ffi::CStr::from_ptr(member.name).to_bytes() != name.as_bytes()
                || member.type_code != pyo3::ffi::Py_T_OBJECT_EX
                || member.flags & pyo3::ffi::Py_RELATIVE_OFFSET != 0
            {
                return None;
            }
            usize::try_from(member.offset).ok()?
        };
        let size = std::mem::size_of::<*mut pyo3::ffi::PyObject>();
        if offset < std::mem::size_of::<pyo3::ffi::PyObject>() || offset + size > basicsize {
            return None;
        }
        let slot = Slot { offset };
        let expected = instance.getattr(name).ok();
        // SAFETY: `instance` is an instance of exactly `cls`, and `offset` lies in its fixed part.
        let read = unsafe { slot.read(instance) };
        match (read, expected) {
            (Some(r), Some(e)) if r.as_ptr() == e.as_ptr() => Some(slot),
            (None, None) if unset_ok => Some(slot),
            _ => None,
        }
    }

    /// The slot of `name` in `cls`, checked against `instance` as [`Slot::of`] does, except
    /// that it may be unset there: for a slot msgspec does not fill, such as the `_wire` slot
    /// of a `rapidsse._schema.Model` (`_WireSlot`), unset on a Struct built by hand.
    pub(crate) fn of_maybe_unset(
        cls: &Bound<'_, PyType>,
        name: &str,
        instance: &Bound<'_, PyAny>,
    ) -> Option<Slot> {
        Slot::checked(cls, name, instance, true)
    }

    /// The field's value on `obj`, borrowed from it; None when the field is unset.
    ///
    /// # Safety
    /// `obj` must be an instance of exactly the class the slot came from.
    #[inline]
    pub(crate) unsafe fn read<'a, 'py>(
        &self,
        obj: &'a Bound<'py, PyAny>,
    ) -> Option<Borrowed<'a, 'py, PyAny>> {
        self.read_from(obj.as_borrowed())
    }

    /// [`Slot::read`] on a borrowed object.
    ///
    /// # Safety
    /// As for [`Slot::read`].
    #[inline]
    pub(crate) unsafe fn read_from<'a, 'py>(
        &self,
        obj: Borrowed<'a, 'py, PyAny>,
    ) -> Option<Borrowed<'a, 'py, PyAny>> {
        let value = *obj
            .as_ptr()
            .cast::<u8>()
            .add(self.offset)
            .cast::<*mut pyo3::ffi::PyObject>();
        Borrowed::from_ptr_or_opt(obj.py(), value)
    }
}

/// A str's UTF-8, borrowed; None for anything else (or a str with lone surrogates).
#[inline]
pub(crate) fn exact_str<'a>(value: Borrowed<'a, '_, PyAny>) -> Option<&'a str> {
    // SAFETY: an exact str's UTF-8 buffer lives as long as the str, which outlives `'a`.
    unsafe {
        if pyo3::ffi::PyUnicode_CheckExact(value.as_ptr()) == 0 {
            return None;
        }
        let mut size: pyo3::ffi::Py_ssize_t = 0;
        let data = pyo3::ffi::PyUnicode_AsUTF8AndSize(value.as_ptr(), &mut size);
        if data.is_null() {
            let _ = PyErr::take(value.py());
            return None;
        }
        let bytes = std::slice::from_raw_parts(data.cast::<u8>(), size as usize);
        Some(std::str::from_utf8_unchecked(bytes))
    }
}

/// None (the outer Option) when the value is not None or an exact non-negative int.
#[inline]
pub(crate) fn optional_index(value: Borrowed<'_, '_, PyAny>) -> Option<Option<u64>> {
    if value.is_none() {
        return Some(None);
    }
    // SAFETY: `value` is a live object; an exact int converts without running Python code.
    unsafe {
        if pyo3::ffi::PyLong_CheckExact(value.as_ptr()) == 0 {
            return None;
        }
        let n = pyo3::ffi::PyLong_AsUnsignedLongLong(value.as_ptr());
        if n == u64::MAX && !pyo3::ffi::PyErr_Occurred().is_null() {
            let _ = PyErr::take(value.py());
            return None;
        }
        Some(Some(n))
    }
}

/// The deepest nesting walked (msgspec's own encoder allows more; deeper goes by JSON).
const MAX_DEPTH: usize = 64;

/// What a field's value is compared with under `omit_defaults`, as msgspec does: the default
/// object itself (identity), or an empty list or dict for those default factories.
enum Default {
    None,
    Object(Py<PyAny>),
    EmptyList,
    EmptyDict,
}

/// One field of a Struct class: its name in JSON, where it lives, and its default.
struct Field {
    name: String,
    slot: Slot,
    default: Default,
}

/// How a Struct class encodes: its tag (`tag_field`, tag value) and fields, in JSON order.
struct Shape {
    tag: Option<(String, Value)>,
    omit_defaults: bool,
    fields: Vec<Field>,
    /// The hidden `_wire` slot of a `rapidsse._schema.Model` (no msgspec field: a slot of its
    /// base `_WireSlot`), read by the walk as received (see [`to_value_as_received`]).
    wire: Option<Slot>,
    /// An `UnknownVariant` (tag `__unknown__`): its `data` field, what it is as received.
    unknown_data: Option<usize>,
}

/// Struct classes seen so far, by type address (the classes are kept alive in the entry, so
/// an address is never reused): their shape, or None when they go by JSON. Shared by all
/// accumulators; never locked while Python code runs.
type Shapes = HashMap<usize, (Py<PyType>, Option<Arc<Shape>>)>;
static SHAPES: Mutex<Option<Shapes>> = Mutex::new(None);

/// Classes kept in [`SHAPES`] at most (the schemas have a few hundred); past that, a class's
/// shape is worked out each time it is met (slower, the same result), so that a program making
/// Struct classes on the fly does not keep them all alive here.
const MAX_SHAPES: usize = 4096;

fn shape_of(obj: Borrowed<'_, '_, PyAny>) -> Option<Arc<Shape>> {
    let key = obj.get_type().as_ptr() as usize;
    if let Some((_, shape)) = SHAPES
        .lock()
        .ok()?
        .get_or_insert_with(HashMap::new)
        .get(&key)
    {
        return shape.clone();
    }
    let cls = obj.get_type();
    let shape = Shape::of(&cls, &obj).map(Arc::new);
    let mut shapes = SHAPES.lock().ok()?;
    let shapes = shapes.get_or_insert_with(HashMap::new);
    if shapes.len() < MAX_SHAPES {
        shapes.insert(key, (cls.unbind(), shape.clone()));
    }
    shape
}

/// The Struct class of an object as the walker reads it: its tag and, by JSON name, the slots
/// of its fields (for the callers that read a few fields straight off instances).
pub(crate) struct ClassSlots(Arc<Shape>);

impl ClassSlots {
    /// `obj`'s class, if the walker mirrors it (see [`Shape::of`]).
    pub(crate) fn of(obj: &Bound<'_, PyAny>) -> Option<ClassSlots> {
        shape_of(obj.as_borrowed()).map(ClassSlots)
    }

    /// The class's tag, when it is a string.
    pub(crate) fn tag(&self) -> Option<&str> {
        match &self.0.tag {
            Some((_, Value::String(tag))) => Some(tag),
            _ => None,
        }
    }

    /// The `_wire` slot (a `rapidsse._schema.Model`).
    pub(crate) fn wire(&self) -> Option<Slot> {
        self.0.wire
    }

    /// The slot of the field written `name` in JSON.
    pub(crate) fn slot(&self, name: &str) -> Option<Slot> {
        self.0
            .fields
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.slot)
    }
}

impl Shape {
    /// The shape of `cls`, a msgspec Struct class, checked on `instance`; None for anything
    /// this walker does not mirror exactly (array-like Structs, non-slot fields, ...).
    fn of(cls: &Bound<'_, PyType>, instance: &Bound<'_, PyAny>) -> Option<Shape> {
        let py = cls.py();
        if !direct_reads(py) || !cls.is_subclass(STRUCT.get(py).ok()?).ok()? {
            return None;
        }
        let config = cls.getattr(pyo3::intern!(py, "__struct_config__")).ok()?;
        let flag = |name: &str| -> Option<bool> { config.getattr(name).ok()?.extract().ok() };
        if flag("array_like")? {
            return None;
        }
        let tag_field: Option<String> = config.getattr("tag_field").ok()?.extract().ok()?;
        let tag = match tag_field {
            None => None,
            Some(field) => {
                let value = config.getattr("tag").ok()?;
                let value = if let Ok(s) = value.extract::<String>() {
                    Value::String(s)
                } else {
                    Value::Number(Number::from(value.extract::<i64>().ok()?))
                };
                Some((field, value))
            }
        };
        let names: Vec<String> = cls.getattr("__struct_fields__").ok()?.extract().ok()?;
        let encoded: Vec<String> = cls
            .getattr("__struct_encode_fields__")
            .ok()?
            .extract()
            .ok()?;
        let defaults = cls.getattr("__struct_defaults__").ok()?;
        let defaults = defaults.cast::<PyTuple>().ok()?;
        if encoded.len() != names.len() || defaults.len() > names.len() {
            return None;
        }
        let first_default = names.len() - defaults.len();
        let nodefault = py.import("msgspec").ok()?.getattr("NODEFAULT").ok()?;
        let mut fields = Vec::with_capacity(names.len());
        for (i, (name, json_name)) in names.iter().zip(encoded).enumerate() {
            let default = match i.checked_sub(first_default) {
                None => Default::None,
                Some(k) => {
                    let d = defaults.get_item(k).ok()?;
                    if d.is(&nodefault) {
                        Default::None
                    } else if d.get_type().name().ok()?.to_str().ok()? == "Factory" {
                        let factory = d.getattr("factory").ok()?;
                        if factory.is(py.get_type::<PyList>()) {
                            Default::EmptyList
                        } else if factory.is(py.get_type::<PyDict>()) {
                            Default::EmptyDict
                        } else {
                            Default::None // other factories: never omitted by msgspec
                        }
                    } else {
                        Default::Object(d.unbind())
                    }
                }
            };
            fields.push(Field {
                name: json_name,
                slot: Slot::of(cls, name, instance)?,
                default,
            });
        }
        let wire = Slot::of_maybe_unset(cls, "_wire", instance);
        let unknown = matches!(&tag, Some((_, Value::String(t))) if t == "__unknown__");
        let unknown_data = fields
            .iter()
            .position(|f| f.name == "data")
            .filter(|_| unknown);
        Some(Shape {
            tag,
            omit_defaults: flag("omit_defaults")?,
            fields,
            wire,
            unknown_data,
        })
    }
}

impl Field {
    /// Whether msgspec leaves `value` out under `omit_defaults`.
    fn is_default(&self, value: Borrowed<'_, '_, PyAny>) -> bool {
        match &self.default {
            Default::None => false,
            Default::Object(d) => value.as_ptr() == d.as_ptr(),
            Default::EmptyList => value.cast_exact::<PyList>().is_ok_and(|l| l.is_empty()),
            Default::EmptyDict => value.cast_exact::<PyDict>().is_ok_and(|d| d.is_empty()),
        }
    }
}

/// `obj` as `msgspec.json.encode` would write it, parsed back as a JSON value; None for what
/// this walker does not mirror exactly (then the caller encodes instead): types other than
/// exact None, bool, int (64-bit), float, str, list, tuple, dict with str keys and msgspec
/// Structs, `UNSET` outside a Struct field, nesting deeper than [`MAX_DEPTH`].
pub(crate) fn to_value(obj: &Bound<'_, PyAny>) -> Option<Value> {
    let unset = UNSET.get(obj.py()).ok()?.as_ptr();
    let mut ctx = Walk {
        unset,
        received: false,
        splices: None,
    };
    walk(obj.as_borrowed(), &mut ctx, 0)
}

/// How a walk goes: msgspec's encoding, or as received; with `splices`, the unknown members of
/// each `Wire.extra` are not read but kept as their text, each behind a placeholder key (see
/// [`wire_encode`]).
struct Walk {
    unset: *mut pyo3::ffi::PyObject,
    received: bool,
    splices: Option<Vec<Vec<u8>>>,
}

/// The start of a placeholder key (a key that does start so declines the writing walk).
const SPLICE_MARK: char = '\u{0}';

/// `obj` as `rapidsse.encode` writes it (as received, from each Struct's `_wire`), parsed back
/// as a JSON value: as [`to_value`], but an `UnknownVariant` is its `data`, and a Struct whose
/// `_wire` is a `Wire` also has the fields named in `present` (at their default though they
/// are, told as `rapidsse._wire` tells it: `is` or `==`) and, after its fields, the unknown
/// members of `extra` (read by the project's reader, [`crate::accumulate::fast::object`];
/// declined when it leaves them to serde: an integer beyond 64 bits, `-0`, a float out of range).
pub(crate) fn to_value_as_received(obj: &Bound<'_, PyAny>) -> Option<Value> {
    let unset = UNSET.get(obj.py()).ok()?.as_ptr();
    let mut ctx = Walk {
        unset,
        received: true,
        splices: None,
    };
    walk(obj.as_borrowed(), &mut ctx, 0)
}

/// A Struct's `_wire` when it is a `Wire`: its `present` names and its `extra` members.
struct WireInfo<'py> {
    present: Option<Bound<'py, PyTuple>>,
    extra: Option<Map<String, Value>>,
    /// With splices: the members' text (`"k":v,...`, what is between the braces).
    members: Option<Vec<u8>>,
}

fn wire_info<'py>(wire: Borrowed<'_, 'py, PyAny>, splice: bool) -> Option<Option<WireInfo<'py>>> {
    if wire.is_none() {
        return Some(None);
    }
    let py = wire.py();
    let present = wire.getattr(pyo3::intern!(py, "present")).ok()?;
    let present = present.cast_into_exact::<PyTuple>().ok()?;
    let extra = wire.getattr(pyo3::intern!(py, "extra")).ok()?;
    let (mut members, mut map) = (None, None);
    if !extra.is_none() {
        let bytes = extra.cast_into_exact::<pyo3::types::PyBytes>().ok()?;
        let text = std::str::from_utf8(bytes.as_bytes()).ok()?;
        // Read (validated) either way: a splice is of one JSON object's members only.
        let read = crate::accumulate::fast::object(text)?;
        if splice {
            // As the Python writer splices them: the text between the outer braces.
            let inner = text.trim().strip_prefix('{')?.strip_suffix('}')?.trim();
            if read.keys().any(|k| k.starts_with(SPLICE_MARK)) {
                return None;
            }
            members = (!inner.is_empty()).then(|| inner.as_bytes().to_vec());
        } else {
            map = Some(read);
        }
    }
    Some(Some(WireInfo {
        present: (!present.is_empty()).then_some(present),
        extra: map,
        members,
    }))
}

fn walk(obj: Borrowed<'_, '_, PyAny>, ctx: &mut Walk, depth: usize) -> Option<Value> {
    let (unset, received) = (ctx.unset, ctx.received);
    if depth > MAX_DEPTH {
        return None;
    }
    let py = obj.py();
    if obj.is_none() {
        return Some(Value::Null);
    }
    let ptr = obj.as_ptr();
    // SAFETY: a type check on a live object.
    if unsafe { pyo3::ffi::PyUnicode_CheckExact(ptr) } != 0 {
        return exact_str(obj).map(|s| Value::String(s.to_owned()));
    }
    // SAFETY: type checks and value reads on a live object; none runs Python code.
    unsafe {
        if ptr == pyo3::ffi::Py_True() || ptr == pyo3::ffi::Py_False() {
            return Some(Value::Bool(ptr == pyo3::ffi::Py_True()));
        }
        if pyo3::ffi::PyLong_CheckExact(ptr) != 0 {
            let mut overflow = 0;
            let n = pyo3::ffi::PyLong_AsLongLongAndOverflow(ptr, &mut overflow);
            return match overflow {
                0 if n >= 0 => Some(Value::Number(Number::from(n as u64))),
                0 if n != -1 || pyo3::ffi::PyErr_Occurred().is_null() => {
                    Some(Value::Number(Number::from(n)))
                }
                1 => {
                    let n = pyo3::ffi::PyLong_AsUnsignedLongLong(ptr);
                    if n == u64::MAX && !pyo3::ffi::PyErr_Occurred().is_null() {
                        let _ = PyErr::take(py);
                        return None;
                    }
                    Some(Value::Number(Number::from(n)))
                }
                _ => {
                    let _ = PyErr::take(py);
                    None
                }
            };
        }
        if pyo3::ffi::PyFloat_CheckExact(ptr) != 0 {
            // msgspec writes NaN and the infinities as null.
            let f = pyo3::ffi::PyFloat_AsDouble(ptr);
            return Some(Number::from_f64(f).map_or(Value::Null, Value::Number));
        }
    }
    if let Ok(list) = obj.cast_exact::<PyList>() {
        let mut items = Vec::with_capacity(list.len());
        for item in list.iter() {
            items.push(walk(item.as_borrowed(), ctx, depth + 1)?);
        }
        return Some(Value::Array(items));
    }
    if let Ok(tuple) = obj.cast_exact::<PyTuple>() {
        let mut items = Vec::with_capacity(tuple.len());
        for item in tuple.iter_borrowed() {
            items.push(walk(item, ctx, depth + 1)?);
        }
        return Some(Value::Array(items));
    }
    if let Ok(dict) = obj.cast_exact::<PyDict>() {
        let mut map = Map::new();
        for (key, value) in dict.iter() {
            let key = exact_str(key.as_borrowed())?;
            if ctx.splices.is_some() && key.starts_with(SPLICE_MARK) {
                return None;
            }
            map.insert(key.to_owned(), walk(value.as_borrowed(), ctx, depth + 1)?);
        }
        return Some(Value::Object(map));
    }
    let shape = shape_of(obj)?;
    if received {
        if let Some(data) = shape.unknown_data {
            // SAFETY: `obj` is an instance of exactly the class `shape` was made for.
            let data = unsafe { shape.fields[data].slot.read_from(obj) }?;
            return walk(data, ctx, depth + 1);
        }
    }
    let wire = match shape.wire {
        // SAFETY: as below. (Unset: a Struct built by hand, nothing received.)
        Some(slot) if received => match unsafe { slot.read_from(obj) } {
            Some(wire) => wire_info(wire, ctx.splices.is_some())?,
            None => None,
        },
        _ => None,
    };
    let present = |name: &str| {
        wire.as_ref()
            .and_then(|w| w.present.as_ref())
            .is_some_and(|p| p.iter_borrowed().any(|n| exact_str(n) == Some(name)))
    };
    // At most a key a field and the tag: no growing on the way.
    let mut map = Map::with_capacity(shape.fields.len() + 1);
    if let Some((field, tag)) = &shape.tag {
        map.insert(field.clone(), tag.clone());
    }
    for field in shape.fields.iter() {
        // SAFETY: `obj` is an instance of exactly the class `shape` was made for.
        let value = unsafe { field.slot.read_from(obj) }?;
        if value.as_ptr() == unset {
            continue;
        }
        if shape.omit_defaults {
            let at_default = match (&field.default, &wire) {
                // As `rapidsse._wire` tells it for a Struct written from its `Wire`.
                (Default::Object(d), Some(_)) => value.eq(d.bind(obj.py())).unwrap_or(false),
                _ => field.is_default(value),
            };
            if at_default && !present(&field.name) {
                continue;
            }
        }
        map.insert(field.name.clone(), walk(value, ctx, depth + 1)?);
    }
    if let (Some(members), Some(splices)) = (
        wire.as_ref().and_then(|w| w.members.clone()),
        ctx.splices.as_mut(),
    ) {
        map.insert(format!("{SPLICE_MARK}{}", splices.len()), Value::Null);
        splices.push(members);
    }
    if let Some(extra) = wire.and_then(|w| w.extra) {
        for (key, value) in extra {
            if map.contains_key(&key) {
                return None; // written twice by the Python writer: left to it
            }
            map.insert(key, value);
        }
    }
    Some(Value::Object(map))
}

/// `to_value(obj)` as compact JSON bytes (None when the walker declines): for the tests, which
/// hold it to `msgspec.json.encode`.
#[pyfunction]
pub(crate) fn _struct_json<'py>(obj: &Bound<'py, PyAny>) -> Option<Vec<u8>> {
    to_value(obj).map(|v| serde_json::to_vec(&v).expect("a Value serialises"))
}

/// `rapidsse.encode(obj)` for a schema Struct (or a list or dict of them), written by Rust:
/// [`to_value_as_received`] as compact JSON; None when the walk declines (then the Python
/// writer writes it).
#[pyfunction]
pub(crate) fn wire_encode<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
) -> Option<Bound<'py, pyo3::types::PyBytes>> {
    let unset = UNSET.get(py).ok()?.as_ptr();
    let mut ctx = Walk {
        unset,
        received: true,
        splices: Some(Vec::new()),
    };
    let value = walk(obj.as_borrowed(), &mut ctx, 0)?;
    let splices = ctx.splices.unwrap_or_default();
    let mut out = Vec::with_capacity(256);
    write_spliced(&mut out, &value, &splices);
    Some(pyo3::types::PyBytes::new(py, &out))
}

/// `value` as compact JSON (the project's writer), each placeholder member replaced by its
/// splice: the unknown members' text as received.
fn write_spliced(out: &mut Vec<u8>, value: &Value, splices: &[Vec<u8>]) {
    use crate::accumulate::json::{write_list, write_str, write_value};
    match value {
        Value::Array(items) => {
            write_list(out, items, |out, _, item| write_spliced(out, item, splices))
        }
        Value::Object(map) => {
            out.push(b'{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                match key
                    .strip_prefix(SPLICE_MARK)
                    .and_then(|n| n.parse::<usize>().ok())
                {
                    Some(n) => out.extend_from_slice(&splices[n]),
                    None => {
                        write_str(out, key);
                        out.push(b':');
                        write_spliced(out, item, splices);
                    }
                }
            }
            out.push(b'}');
        }
        leaf => write_value(out, leaf),
    }
}
