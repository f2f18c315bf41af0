//! Typed events built by Rust itself: msgspec Structs made straight from a payload's JSON, with
//! no call into msgspec, for the classes whose every field has a plain type.
//!
//! msgspec decodes into whatever a schema says; most events of a stream are a handful of flat
//! classes (text deltas, Chat chunks) whose fields are strings, integers, floats, bools, lists
//! and nested Structs. For those, this module allocates the Struct the way msgspec does (the
//! class's `tp_alloc`), writes each field into its slot (at the offset its member descriptor
//! gives, checked against `getattr` on an instance first), fills the defaults as msgspec's
//! `Struct_fill_in_defaults` does, and reuses the string objects of fields that repeat from
//! event to event (item ids, model names).
//!
//! It only builds what msgspec would build, equal field by field: on anything else it
//! declines and the payload goes to msgspec as before. It declines an unknown tag, a field of a
//! type it does not handle (a dict, `Any`, a literal, a constrained type), a nested tagged
//! union whose tag is not the first key or not one of its classes', a
//! missing required field, a duplicate key, a key or string it would have to think about (an
//! escape in a key, a lone surrogate, a raw control character, invalid UTF-8), an integer
//! beyond 64 bits, a non-finite float, and broken JSON. The schemas are described by Python
//! (`rapidsse._native`, from `msgspec.inspect`); the JSON is read by [`crate::lex`].
//!
//! It also sets each Struct's hidden `_wire` field (what came beyond the Struct's
//! `omit_defaults` encoding: the unknown members' raw text, the fields sent at their default),
//! as `rapidsse._wire`'s Python pass would, sharing `Wire` objects where it can; a repeated or
//! non-UTF-8 unknown key declines. See `docs/internals-fidelity.md`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple, PyType};

use super::structs::{direct_reads, Slot};
use crate::lex::{same, Lexer, Num, Text, MAX_DEPTH};

// What a field's type admits (its union's members), as `rapidsse._native` writes it.
const NULL: u8 = 1;
const STR: u8 = 2;
const INT: u8 = 4;
const FLOAT: u8 = 8;
const BOOL: u8 = 16;
const LIST: u8 = 32;
const STRUCT: u8 = 64;
const UNSUPPORTED: u8 = 128;

/// The largest integer a float field takes exactly (msgspec converts an int to float).
const EXACT_FLOAT_INT: i64 = 1 << 53;

const SMALL_INT_MIN: i64 = -5;
const SMALL_INT_MAX: i64 = 256;

/// Strings up to this length are kept for reuse by the next event.
const CACHED_LEN: usize = 64;

struct Node {
    mask: u8,
    item: Option<Box<Node>>,
    strukt: usize,
    /// A tagged union of Structs (with `STRUCT` in `mask`, and no `strukt`): its tag key and
    /// the class of each tag.
    tags: Option<Box<Tags>>,
    /// The string cache slot of this node (every node admitting strings has one).
    cache: usize,
    /// The integer cache slot of this node (every node admitting ints has one).
    int_cache: usize,
}

struct Tags {
    field: Box<[u8]>,
    classes: HashMap<Box<[u8]>, usize>,
}

enum Default {
    Required,
    Value(Py<PyAny>),
    List,
    Dict,
}

/// How a field's value is told to be at its default (`value == default`, as the Python pass
/// `rapidsse._wire` asks it; an empty list or dict for those default factories).
pub(crate) enum AtDefault {
    /// Equal only when it is the very default object: None; True or False for a field that
    /// admits no number; a small int (CPython keeps one of each, and the builder hands out
    /// those) for a field that admits no float or bool.
    Identity(Py<PyAny>),
    /// Compared with `==`.
    Equal(Py<PyAny>),
    /// A `str` default (exactly a str): an exact str is compared by its length and
    /// characters, without a rich comparison; anything else with `==`.
    Str(Py<PyAny>),
    EmptyList,
    EmptyDict,
    Never,
}

struct Field {
    json: Box<[u8]>,
    /// The JSON name as a str, for `Wire.present`.
    name: Py<PyAny>,
    offset: usize,
    node: Node,
    default: Default,
    at_default: AtDefault,
}

impl JsonNamed for Field {
    fn json(&self) -> &[u8] {
        &self.json
    }
}

/// A Struct field as an object walk meets it: by its JSON name.
pub(super) trait JsonNamed {
    fn json(&self) -> &[u8];
}

/// The field of `fields` that a member named `key` sets, for a walk over an object's members:
/// the one after the last matched first (members mostly come in declared order), then all.
/// `Some(None)`: no such field. `None`: that field was set already (a repeated key, which the
/// walks leave to msgspec). Marks the field in `seen` and moves `next` past it.
#[inline]
pub(super) fn claim_field<F: JsonNamed>(
    fields: &[F],
    key: &[u8],
    seen: &mut u64,
    next: &mut usize,
) -> Option<Option<usize>> {
    let found = if fields.get(*next).is_some_and(|f| same(f.json(), key)) {
        Some(*next)
    } else {
        fields.iter().position(|f| same(f.json(), key))
    };
    let Some(i) = found else {
        return Some(None);
    };
    let bit = 1u64 << i;
    if *seen & bit != 0 {
        return None;
    }
    *seen |= bit;
    *next = i + 1;
    Some(Some(i))
}

struct StructPlan {
    cls: Py<PyType>,
    alloc: ffi::allocfunc,
    /// None when the class is left to msgspec.
    fields: Option<Vec<Field>>,
    forbid_unknown: bool,
    tag_field: Option<Box<[u8]>>,
    /// The offset of the `_wire` slot (a `rapidsse._schema.Model`), when it has one.
    wire: Option<usize>,
}

/// What the builder makes `_wire` values with: the `Wire` class (a frozen msgspec Struct of two
/// fields, built as the schema classes are: its own `tp_alloc`, the slots written) and the
/// shared `DEEP` (the `_wire` of a Struct exact itself that holds one that is not).
pub(crate) struct WireKit {
    cls: Py<PyType>,
    alloc: ffi::allocfunc,
    extra: usize,
    present: usize,
    pub(crate) deep: Py<PyAny>,
    pub(crate) empty: Py<PyAny>,
}

/// The schemas of one protocol, as the builder reads them. Shared by all decoders.
pub(crate) struct Schema {
    structs: Vec<StructPlan>,
    /// Tagged protocols: the top-level tag key and the class of each tag.
    tag_field: Option<Box<[u8]>>,
    tags: HashMap<Box<[u8]>, usize>,
    /// Untagged protocols: the top-level class.
    root: Option<usize>,
    caches: usize,
    int_caches: usize,
    /// CPython's own small ints, -5 to 256, taken once (handing one out is then a reference
    /// count, not a call that looks it up).
    small_ints: Vec<Py<PyAny>>,
    /// How `_wire` values are made; None: the builder leaves `_wire` None and skips unknown
    /// members as before (a description without wire info, as in some tests).
    wire: Option<WireKit>,
}

/// A decoder's own state: its working buffers and caches, and the shape of its events.
pub(crate) struct State {
    work: Work,
    shape: Shape,
}

/// A scratch buffer for unescaping and the strings kept for reuse.
struct Work {
    scratch: Vec<u8>,
    cache: Vec<Cached>,
    ints: Vec<CachedInt>,
    last_tag: Vec<u8>,
    last_struct: usize,
    /// The last nested tag read, its union (the `Tags`' address) and its class: a run of
    /// deltas of one type is built without a lookup.
    nested_tag: Vec<u8>,
    nested_union: usize,
    nested_struct: usize,
    /// Per Struct class: the `Wire(present=...)` made for each set of present-at-default fields
    /// (events without unknown members share them), and the `present` tuples.
    wires: Vec<Vec<(u64, Py<PyAny>)>>,
    presents: Vec<Vec<(u64, Py<PyAny>)>>,
}

#[derive(Default)]
struct Cached {
    bytes: Vec<u8>,
    obj: Option<Py<PyAny>>,
    /// Hits minus misses, bounded; at the floor the slot stops caching (a field that changes
    /// every time, like a delta's text, then costs nothing more).
    score: i8,
}

/// The previous value of an int field (a timestamp or a model's `created`, repeated by every
/// chunk), scored as [`Cached`].
#[derive(Default)]
struct CachedInt {
    value: i64,
    obj: Option<Py<PyAny>>,
    score: i8,
}

/// Slot `index` of a per-field or per-class list of [`Work`], the list first grown to hold it
/// (the lists start empty: [`Schema::state`]).
#[inline]
fn slot<T: std::default::Default>(list: &mut Vec<T>, index: usize) -> &mut T {
    if index >= list.len() {
        grow(list, index);
    }
    &mut list[index]
}

#[cold]
fn grow<T: std::default::Default>(list: &mut Vec<T>, index: usize) {
    list.resize_with(index + 1, T::default);
}

/// The most `Wire` objects (and `present` tuples) kept per class, one per set of present
/// fields: past that, each is made afresh (the same value).
pub(crate) const MAX_CACHED_WIRES: usize = 64;

const SCORE_MAX: i8 = 16;
const SCORE_OFF: i8 = -16;

/// An owned reference, released on drop (what a declined, half-built object becomes).
pub(crate) struct Owned(pub(crate) *mut ffi::PyObject);

impl Owned {
    pub(crate) fn new(ptr: *mut ffi::PyObject) -> Option<Owned> {
        if ptr.is_null() {
            // SAFETY: called with the GIL held (every caller is under a `Python` token).
            unsafe { ffi::PyErr_Clear() };
            None
        } else {
            Some(Owned(ptr))
        }
    }

    pub(crate) fn into_raw(self) -> *mut ffi::PyObject {
        let ptr = self.0;
        std::mem::forget(self);
        ptr
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: `self.0` is an owned reference, released with the GIL held.
        unsafe { ffi::Py_DecRef(self.0) }
    }
}

pub(crate) fn new_ref(ptr: *mut ffi::PyObject) -> Owned {
    // SAFETY: `ptr` is a live object (None, True, False, a default value kept by the schema).
    unsafe { ffi::Py_IncRef(ptr) };
    Owned(ptr)
}

impl WireKit {
    /// The kit of `(Wire, DEEP)`; None (no wire info) when `Wire`'s slots do not check out.
    pub(crate) fn of(py: Python<'_>, kit: &Bound<'_, PyTuple>) -> PyResult<Option<WireKit>> {
        let cls = kit.get_item(0)?.cast_into::<PyType>()?;
        let deep = kit.get_item(1)?.unbind();
        if !direct_reads(py) || cls.getattr("__itemsize__")?.extract::<isize>()? != 0 {
            return Ok(None);
        }
        let builtins = py.import("builtins")?;
        let (a, b) = (
            builtins.getattr("object")?.call0()?,
            builtins.getattr("object")?.call0()?,
        );
        let instance = cls.call((a, b), None)?;
        let (Some(extra), Some(present)) = (
            Slot::of(&cls, "extra", &instance),
            Slot::of(&cls, "present", &instance),
        ) else {
            return Ok(None);
        };
        // SAFETY: `cls` is a live type object; `tp_alloc` is one of its slots.
        let alloc = unsafe { ffi::PyType_GetSlot(cls.as_type_ptr(), ffi::Py_tp_alloc) };
        if alloc.is_null() {
            return Ok(None);
        }
        Ok(Some(WireKit {
            // SAFETY: the `Py_tp_alloc` slot holds an `allocfunc`.
            alloc: unsafe { std::mem::transmute::<*mut std::ffi::c_void, ffi::allocfunc>(alloc) },
            cls: cls.unbind(),
            extra: extra.offset(),
            present: present.offset(),
            deep,
            empty: PyTuple::empty(py).into_any().unbind(),
        }))
    }

    /// A new `Wire(extra, present)` (`extra` None when the bytes are None).
    pub(crate) fn make(&self, extra: Option<&[u8]>, present: *mut ffi::PyObject) -> Option<Owned> {
        // SAFETY: the class's own `tp_alloc`, a zeroed instance or NULL; each slot (checked
        // against `getattr`) written once with a new reference; objects made with the GIL held.
        unsafe {
            let extra = match extra {
                Some(bytes) => Owned::new(ffi::PyBytes_FromStringAndSize(
                    bytes.as_ptr().cast(),
                    bytes.len() as ffi::Py_ssize_t,
                ))?,
                None => new_ref(ffi::Py_None()),
            };
            let present = new_ref(present);
            let obj = Owned::new((self.alloc)(self.cls.as_ptr().cast(), 0))?;
            let base = obj.0.cast::<u8>();
            *base.add(self.extra).cast::<*mut ffi::PyObject>() = extra.into_raw();
            *base.add(self.present).cast::<*mut ffi::PyObject>() = present.into_raw();
            Some(obj)
        }
    }
}

/// Whether `value` (a field's value, built or kept) equals the field's default, as the Python
/// pass decides it (`value is default or value == default`; empty for the factories).
fn at_default(field: &Field, value: *mut ffi::PyObject) -> bool {
    field.at_default.holds(value)
}

impl AtDefault {
    /// The default compared with `==`: [`AtDefault::Str`] for an exact str, else
    /// [`AtDefault::Equal`].
    pub(crate) fn equal(default: Py<PyAny>) -> AtDefault {
        // SAFETY: reading the type of a live object.
        let exact_str = unsafe {
            ffi::Py_TYPE(default.as_ptr()) == std::ptr::addr_of_mut!(ffi::PyUnicode_Type)
        };
        if exact_str {
            AtDefault::Str(default)
        } else {
            AtDefault::Equal(default)
        }
    }

    /// Whether `value` (a live object) is at this default.
    pub(crate) fn holds(&self, value: *mut ffi::PyObject) -> bool {
        // SAFETY: `value` is a live object; type checks, sizes and a comparison with the GIL held.
        unsafe {
            match self {
                AtDefault::Identity(d) => value == d.as_ptr(),
                AtDefault::Equal(d) => value == d.as_ptr() || rich_equal(value, d.as_ptr()),
                AtDefault::Str(d) => {
                    let d = d.as_ptr();
                    if value == d {
                        return true;
                    }
                    if ffi::Py_TYPE(value) != std::ptr::addr_of_mut!(ffi::PyUnicode_Type) {
                        return rich_equal(value, d);
                    }
                    // Two exact strs are equal when their lengths and characters are.
                    let n = ffi::PyUnicode_GetLength(value);
                    n == ffi::PyUnicode_GetLength(d)
                        && (n == 0 || ffi::PyUnicode_Compare(value, d) == 0)
                }
                AtDefault::EmptyList => {
                    ffi::Py_TYPE(value) == std::ptr::addr_of_mut!(ffi::PyList_Type)
                        && ffi::PyList_Size(value) == 0
                }
                AtDefault::EmptyDict => {
                    ffi::Py_TYPE(value) == std::ptr::addr_of_mut!(ffi::PyDict_Type)
                        && ffi::PyDict_Size(value) == 0
                }
                AtDefault::Never => false,
            }
        }
    }
}

/// `value == default` (an exception in the comparison: not equal).
///
/// # Safety
/// Both are live objects; the GIL is held.
unsafe fn rich_equal(value: *mut ffi::PyObject, default: *mut ffi::PyObject) -> bool {
    // SAFETY: as this function's contract.
    unsafe {
        match ffi::PyObject_RichCompareBool(value, default, ffi::Py_EQ) {
            1 => true,
            0 => false,
            _ => {
                ffi::PyErr_Clear();
                false
            }
        }
    }
}

/// What one object of a payload had beyond its Struct's `omit_defaults` encoding, as the
/// builder gathers it: the fields sent at their default, the unknown members (as the JSON text
/// of an object, `{"k":v,...}`, keys as sent, values byte for byte), and whether a Struct
/// below it is not exact.
#[derive(Default)]
pub(crate) struct Deviation {
    pub(crate) present: u64,
    pub(crate) extra: Option<Vec<u8>>,
    /// Where each unknown key lies in `extra`, to refuse a repeated one (the Python pass keeps
    /// one member per name: such a payload is left to it).
    keys: Vec<(u32, u32)>,
    pub(crate) deep: bool,
}

impl Deviation {
    /// Adds the unknown member `key` (its bytes between the quotes) with `value` (its JSON
    /// text); None when `key` was seen before or is not UTF-8.
    pub(crate) fn unknown(&mut self, key: &[u8], value: &[u8]) -> Option<()> {
        if !key.is_ascii() {
            std::str::from_utf8(key).ok()?;
        }
        let extra = self.extra.get_or_insert_with(|| Vec::with_capacity(64));
        for &(from, to) in &self.keys {
            if same(&extra[from as usize..to as usize], key) {
                return None;
            }
        }
        extra.push(if self.keys.is_empty() { b'{' } else { b',' });
        extra.push(b'"');
        let from = u32::try_from(extra.len()).ok()?;
        extra.extend_from_slice(key);
        let to = u32::try_from(extra.len()).ok()?;
        extra.extend_from_slice(b"\":");
        extra.extend_from_slice(value);
        self.keys.push((from, to));
        Some(())
    }
}

impl Schema {
    /// The `_wire` of a Struct `index` that deviates so (a new reference; None for an exact
    /// one), or None on a failure.
    fn wire_of(
        &self,
        py: Python<'_>,
        work: &mut Work,
        index: usize,
        dev: &mut Deviation,
    ) -> Option<Owned> {
        let Some(kit) = &self.wire else {
            return Some(new_ref(unsafe { ffi::Py_None() }));
        };
        if let Some(extra) = &mut dev.extra {
            extra.push(b'}');
            let present = if dev.present == 0 {
                kit.empty.as_ptr()
            } else {
                self.present_tuple(py, work, index, dev.present)?
            };
            return kit.make(Some(extra), present);
        }
        if dev.present != 0 {
            if let Some((_, w)) = slot(&mut work.wires, index)
                .iter()
                .find(|(p, _)| *p == dev.present)
            {
                return Some(new_ref(w.as_ptr()));
            }
            let tuple = self.present_tuple(py, work, index, dev.present)?;
            let wire = kit.make(None, tuple)?;
            // SAFETY: a new reference for the cache, kept with the decoder's state.
            let kept = unsafe { Bound::from_owned_ptr(py, new_ref(wire.0).into_raw()) };
            if work.wires[index].len() < MAX_CACHED_WIRES {
                work.wires[index].push((dev.present, kept.unbind()));
            }
            return Some(wire);
        }
        // SAFETY: None is a live object.
        Some(new_ref(if dev.deep {
            kit.deep.as_ptr()
        } else {
            unsafe { ffi::Py_None() }
        }))
    }

    /// The `present` tuple of the fields of Struct `index` in `present` (their JSON names, in
    /// field order), made once per decoder (a borrowed pointer, kept by `work`).
    fn present_tuple(
        &self,
        py: Python<'_>,
        work: &mut Work,
        index: usize,
        present: u64,
    ) -> Option<*mut ffi::PyObject> {
        if let Some((_, t)) = slot(&mut work.presents, index)
            .iter()
            .find(|(p, _)| *p == present)
        {
            return Some(t.as_ptr());
        }
        let fields = self.structs[index].fields.as_deref()?;
        // SAFETY: a new tuple of `n` items, each set once with a new reference; GIL held.
        let tuple = unsafe {
            let n = present.count_ones() as ffi::Py_ssize_t;
            let tuple = Owned::new(ffi::PyTuple_New(n))?;
            let mut at = 0;
            for (i, f) in fields.iter().enumerate() {
                if present & (1u64 << i) != 0 {
                    ffi::PyTuple_SetItem(tuple.0, at, new_ref(f.name.as_ptr()).into_raw());
                    at += 1;
                }
            }
            Bound::from_owned_ptr(py, tuple.into_raw()).unbind()
        };
        let ptr = tuple.as_ptr();
        if work.presents[index].len() < MAX_CACHED_WIRES {
            work.presents[index].push((present, tuple));
        }
        Some(ptr)
    }

    /// Sets the `_wire` slot of `obj` (a complete Struct `index`, its `_wire` filled with None)
    /// to `wire`, and tells the parent whether `obj` deviates.
    fn set_wire(&self, obj: &Owned, index: usize, wire: Owned, deep: &mut bool) {
        let Some(offset) = self.structs[index].wire else {
            return;
        };
        // SAFETY: the `_wire` slot of the instance, holding a reference (None) released here.
        unsafe {
            if wire.0 != ffi::Py_None() {
                *deep = true;
            }
            let slot = obj.0.cast::<u8>().add(offset).cast::<*mut ffi::PyObject>();
            let old = std::mem::replace(&mut *slot, wire.into_raw());
            ffi::Py_DecRef(old);
        }
    }

    /// Reads the description `rapidsse._native.describe` wrote.
    fn from_description(
        py: Python<'_>,
        structs: &Bound<'_, PyList>,
        roots: &Bound<'_, PyAny>,
        tag_field: Option<String>,
        wire: Option<&Bound<'_, PyTuple>>,
    ) -> PyResult<Schema> {
        let wire = match wire {
            Some(kit) => WireKit::of(py, kit)?,
            None => None,
        };
        let mut schema = Schema {
            structs: Vec::with_capacity(structs.len()),
            tag_field: tag_field.map(|t| t.into_bytes().into_boxed_slice()),
            tags: HashMap::new(),
            root: None,
            caches: 0,
            int_caches: 0,
            small_ints: (SMALL_INT_MIN..=SMALL_INT_MAX)
                .map(|n| pyo3::types::PyInt::new(py, n).into_any().unbind())
                .collect(),
            wire,
        };
        let usable = direct_reads(py);
        for entry in structs.iter() {
            let entry = entry.cast_into::<PyTuple>()?;
            let cls = entry.get_item(0)?.cast_into::<PyType>()?;
            let described = entry.get_item(1)?;
            let forbid_unknown: bool = entry.get_item(2)?.extract()?;
            let tag: Option<String> = entry.get_item(3)?.extract()?;
            // SAFETY: `cls` is a live type object; `tp_alloc` is one of its slots.
            let alloc = unsafe { ffi::PyType_GetSlot(cls.as_type_ptr(), ffi::Py_tp_alloc) };
            let alloc: Option<ffi::allocfunc> = if alloc.is_null() {
                None
            } else {
                // SAFETY: the `Py_tp_alloc` slot holds an `allocfunc`.
                Some(unsafe { std::mem::transmute::<*mut std::ffi::c_void, ffi::allocfunc>(alloc) })
            };
            let itemsize: isize = cls.getattr("__itemsize__")?.extract()?;
            let fields = match (alloc, described.is_none(), usable && itemsize == 0) {
                (Some(_), false, true) => {
                    let described = described.cast_into::<PyList>()?;
                    schema.fields_of(py, &cls, &described)?
                }
                _ => None,
            };
            let (fields, wire) = match fields {
                Some((fields, wire)) => (Some(fields), wire),
                None => (None, None),
            };
            schema.structs.push(StructPlan {
                cls: cls.unbind(),
                alloc: alloc.unwrap_or(ffi::PyType_GenericAlloc),
                fields,
                forbid_unknown,
                tag_field: tag.map(|t| t.into_bytes().into_boxed_slice()),
                wire,
            });
        }
        if let Ok(tags) = roots.cast::<PyDict>() {
            for (tag, index) in tags.iter() {
                let tag: String = tag.extract()?;
                schema
                    .tags
                    .insert(tag.into_bytes().into_boxed_slice(), index.extract()?);
            }
        } else {
            schema.root = Some(roots.extract()?);
        }
        let n = schema.structs.len();
        let in_range = |node: &Node| {
            (node.strukt == usize::MAX || node.strukt < n)
                && node
                    .tags
                    .as_ref()
                    .is_none_or(|t| t.classes.values().all(|&i| i < n))
        };
        let valid = schema.structs.iter().all(|s| {
            s.fields
                .iter()
                .flatten()
                .all(|f| in_range(&f.node) && f.node.item.as_deref().is_none_or(in_range))
        }) && schema
            .tags
            .values()
            .chain(schema.root.iter())
            .all(|&i| i < n);
        if !valid {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "struct index out of range in the schema description",
            ));
        }
        Ok(schema)
    }

    /// The fields of `cls`, their slots checked on an instance holding a distinct object in
    /// every field; None (left to msgspec) when a slot does not check out.
    fn fields_of(
        &mut self,
        py: Python<'_>,
        cls: &Bound<'_, PyType>,
        described: &Bound<'_, PyList>,
    ) -> PyResult<Option<(Vec<Field>, Option<usize>)>> {
        if described.len() > 64 {
            return Ok(None);
        }
        let kwargs = PyDict::new(py);
        let builtins = py.import("builtins")?;
        let make_object = builtins.getattr("object")?;
        for field in described.iter() {
            let field = field.cast_into::<PyTuple>()?;
            kwargs.set_item(field.get_item(0)?, make_object.call0()?)?;
        }
        let Ok(instance) = cls.call((), Some(&kwargs)) else {
            return Ok(None);
        };
        if !instance.get_type().is(cls) {
            return Ok(None);
        }
        let mut fields = Vec::with_capacity(described.len());
        for field in described.iter() {
            let field = field.cast_into::<PyTuple>()?;
            let name: String = field.get_item(0)?.extract()?;
            let json: String = field.get_item(1)?.extract()?;
            let Some(slot) = Slot::of(cls, &name, &instance) else {
                return Ok(None);
            };
            let node = self.node(&field.get_item(2)?)?;
            let kind: u8 = field.get_item(3)?.extract()?;
            let default = match kind {
                0 => Default::Required,
                1 => Default::Value(field.get_item(4)?.unbind()),
                2 => Default::List,
                3 => Default::Dict,
                _ => return Ok(None),
            };
            let at_default = match &default {
                Default::Required => AtDefault::Never,
                Default::List => AtDefault::EmptyList,
                Default::Dict => AtDefault::EmptyDict,
                Default::Value(v) => {
                    let v = v.bind(py);
                    let small_int = v.get_type().is(py.get_type::<pyo3::types::PyInt>())
                        && v.extract::<i64>()
                            .is_ok_and(|n| (SMALL_INT_MIN..=SMALL_INT_MAX).contains(&n));
                    let singleton = v.is_none()
                        || (v.is(&pyo3::types::PyBool::new(py, true).to_owned())
                            || v.is(&pyo3::types::PyBool::new(py, false).to_owned()))
                            && node.mask & (INT | FLOAT) == 0
                        || small_int && node.mask & (FLOAT | BOOL) == 0;
                    if singleton {
                        AtDefault::Identity(v.clone().unbind())
                    } else {
                        AtDefault::equal(v.clone().unbind())
                    }
                }
            };
            fields.push(Field {
                name: pyo3::types::PyString::new(py, &json).into_any().unbind(),
                json: json.into_bytes().into_boxed_slice(),
                offset: slot.offset(),
                node,
                default,
                at_default,
            });
        }
        // The `_wire` slot of a `rapidsse._schema.Model`: no msgspec field, a slot of its base
        // `_WireSlot`, checked as the fields are.
        let wire = if instance.setattr("_wire", make_object.call0()?).is_ok() {
            Slot::of(cls, "_wire", &instance).map(|slot| slot.offset())
        } else {
            None
        };
        Ok(Some((fields, wire)))
    }

    fn node(&mut self, described: &Bound<'_, PyAny>) -> PyResult<Node> {
        let (mask, item, strukt, tagged): (u8, Bound<'_, PyAny>, isize, Bound<'_, PyAny>) =
            described.extract()?;
        let tags = if tagged.is_none() {
            None
        } else {
            let (field, described): (String, Bound<'_, PyDict>) = tagged.extract()?;
            let mut classes = HashMap::new();
            for (tag, index) in described.iter() {
                let tag: String = tag.extract()?;
                classes.insert(tag.into_bytes().into_boxed_slice(), index.extract()?);
            }
            Some(Box::new(Tags {
                field: field.into_bytes().into_boxed_slice(),
                classes,
            }))
        };
        let item = if item.is_none() {
            None
        } else {
            Some(Box::new(self.node(&item)?))
        };
        let cache = self.caches;
        if mask & STR != 0 {
            self.caches += 1;
        }
        let int_cache = self.int_caches;
        if mask & INT != 0 {
            self.int_caches += 1;
        }
        Ok(Node {
            mask,
            item,
            strukt: usize::try_from(strukt).unwrap_or(usize::MAX),
            tags,
            cache,
            int_cache,
        })
    }

    /// A new decoder's state. It allocates nothing: the caches and the per-class `Wire` lists
    /// grow to the slots a stream uses ([`slot`]), so that a decoder made per stream does not
    /// pay for every class and field of the schema (the Responses schema's made and dropped
    /// ~150 empty lists per decoder).
    pub(crate) fn state(&self) -> State {
        State {
            work: Work {
                scratch: Vec::new(),
                cache: Vec::new(),
                ints: Vec::new(),
                last_tag: Vec::new(),
                last_struct: usize::MAX,
                nested_tag: Vec::new(),
                nested_union: 0,
                nested_struct: usize::MAX,
                wires: Vec::new(),
                presents: Vec::new(),
            },
            shape: Shape::default(),
        }
    }

    /// The typed event of `payload` (one JSON object), or None to leave it to msgspec.
    pub(crate) fn decode<'py>(
        &self,
        py: Python<'py>,
        state: &mut State,
        payload: &[u8],
    ) -> Option<Bound<'py, PyAny>> {
        let State { work, shape } = state;
        if !shape.root.pieces.is_empty() {
            if let Some(obj) = self.shaped(py, work, shape, payload) {
                shape.hits += 1;
                // SAFETY: `obj` is an owned reference to a complete object.
                return Some(unsafe { Bound::from_owned_ptr(py, obj.into_raw()) });
            }
        }
        let (obj, index) = self.decode_member_by_member(py, work, payload)?;
        self.learn(py, shape, payload, index, &obj);
        // SAFETY: `obj` is an owned reference to a complete object.
        Some(unsafe { Bound::from_owned_ptr(py, obj.into_raw()) })
    }

    /// [`decode`](Self::decode) without a shape: the object and the index of its Struct.
    fn decode_member_by_member(
        &self,
        py: Python<'_>,
        state: &mut Work,
        payload: &[u8],
    ) -> Option<(Owned, usize)> {
        let mut lx = Lexer::new(payload);
        if !lx.eat(b'{') {
            return None;
        }
        let (obj, index) = match &self.tag_field {
            Some(tag_field) => {
                if lx.plain_string()? != &tag_field[..] || !lx.eat(b':') {
                    return None;
                }
                let tag = lx.plain_string()?;
                let index = if state.last_struct != usize::MAX && same(&state.last_tag, tag) {
                    state.last_struct
                } else {
                    let index = *self.tags.get(tag)?;
                    state.last_tag.clear();
                    state.last_tag.extend_from_slice(tag);
                    state.last_struct = index;
                    index
                };
                (
                    self.object(py, &mut lx, state, index, false, 0, &mut false)?,
                    index,
                )
            }
            None => {
                let index = self.root?;
                (
                    self.object(py, &mut lx, state, index, true, 0, &mut false)?,
                    index,
                )
            }
        };
        if !lx.at_end() {
            return None;
        }
        Some((obj, index))
    }

    /// `payload` read through `shape` (see [`Shape`]), or None on a miss.
    fn shaped(
        &self,
        py: Python<'_>,
        state: &mut Work,
        shape: &Shape,
        payload: &[u8],
    ) -> Option<Owned> {
        // The cheapest test first: the learned payload's opening bytes (the tag, for tagged
        // protocols) are not worth building an object for when they differ.
        let Some(&ShapePiece::Fixed { start, end }) = shape.root.pieces.first() else {
            return None;
        };
        let opening = &shape.learned[start as usize..end as usize];
        if !same(payload.get(..opening.len())?, opening) {
            return None;
        }
        let mut lx = Lexer::new(payload);
        let obj = self.build_shaped(
            py,
            state,
            &shape.learned,
            &shape.root,
            &mut lx,
            0,
            &mut false,
        )?;
        (lx.position() == payload.len()).then_some(obj)
    }

    /// The Struct of `object` (a shape or a nested one) read from `lx`'s position on: its
    /// fixed pieces compared, its holes read as the member-by-member path reads them.
    /// `deep` is set when the Struct is not exact.
    #[allow(clippy::too_many_arguments)]
    fn build_shaped(
        &self,
        py: Python<'_>,
        state: &mut Work,
        learned: &[u8],
        object: &ObjectShape,
        lx: &mut Lexer<'_>,
        depth: usize,
        deep: &mut bool,
    ) -> Option<Owned> {
        let plan = &self.structs[object.index];
        let mut dev = Deviation {
            present: object.fixed_defaults,
            ..Deviation::default()
        };
        // The values of the `Skip` holes (unknown members), in order.
        let mut skipped: Vec<std::ops::Range<usize>> = Vec::new();
        let fields = plan.fields.as_deref()?;
        // SAFETY: as in `object`: the class's own `tp_alloc`, a zeroed instance or NULL.
        let obj = Owned::new(unsafe { (plan.alloc)(plan.cls.as_ptr().cast(), 0) })?;
        let base = obj.0.cast::<u8>();
        let set = |offset: usize, value: Owned| {
            // SAFETY: the field's slot in the instance (see `object`), still NULL: a shape
            // sets each field once, and only the fields it has.
            unsafe { *base.add(offset).cast::<*mut ffi::PyObject>() = value.into_raw() }
        };
        for piece in &object.pieces {
            match piece {
                &ShapePiece::Fixed { start, end } => {
                    let fixed = &learned[start as usize..end as usize];
                    let at = lx.position();
                    if !same(lx.input().get(at..at + fixed.len())?, fixed) {
                        return None;
                    }
                    lx.seek(at + fixed.len());
                }
                &ShapePiece::Field(i) => {
                    let field = &fields[i];
                    let mut below = false;
                    let value = self.value(py, lx, state, &field.node, depth, &mut below)?;
                    if at_default(field, value.0) {
                        dev.present |= 1u64 << i;
                    } else {
                        dev.deep |= below;
                    }
                    set(field.offset, value);
                }
                ShapePiece::Skip => {
                    lx.peek()?;
                    let from = lx.position();
                    lx.skip_value(depth + 1)?;
                    if self.wire.is_some() {
                        skipped.push(from..lx.position());
                    }
                }
                // (A Struct, or a list of one, is never a field's default.)
                ShapePiece::Struct(i, inner) => {
                    let value =
                        self.build_shaped(py, state, learned, inner, lx, depth + 1, &mut dev.deep)?;
                    set(fields[*i].offset, value);
                }
                ShapePiece::ListOfOne(i, inner) => {
                    let item =
                        self.build_shaped(py, state, learned, inner, lx, depth + 2, &mut dev.deep)?;
                    // SAFETY: creating a list with the GIL held; it takes the item.
                    let list = Owned::new(unsafe { ffi::PyList_New(1) })?;
                    unsafe { ffi::PyList_SetItem(list.0, 0, item.into_raw()) };
                    set(fields[*i].offset, list);
                }
            }
        }
        for (offset, kept) in &object.kept {
            // SAFETY: creating objects with the GIL held.
            let value = match kept {
                Kept::Object(v) => new_ref(v.as_ptr()),
                Kept::List => Owned::new(unsafe { ffi::PyList_New(0) })?,
                Kept::Dict => Owned::new(unsafe { ffi::PyDict_New() })?,
            };
            set(*offset, value);
        }
        self.fill_defaults(base, plan, fields, object.present)?;
        if self.wire.is_none() {
            return Some(obj);
        }
        if !object.unknowns.is_empty() {
            if let Some((present, wire)) = &object.learned_wire {
                if *present == dev.present {
                    self.set_wire(&obj, object.index, new_ref(wire.as_ptr()), deep);
                    return Some(obj);
                }
            }
            let mut holes = skipped.iter();
            for (key, value) in &object.unknowns {
                let key = &learned[key.start as usize..key.end as usize];
                let value = match value {
                    Some(v) => &learned[v.start as usize..v.end as usize],
                    None => &lx.input()[holes.next()?.clone()],
                };
                dev.unknown(key, value)?;
            }
        }
        if dev.present != 0 || dev.extra.is_some() || dev.deep {
            let wire = self.wire_of(py, state, object.index, &mut dev)?;
            self.set_wire(&obj, object.index, wire, deep);
        }
        Some(obj)
    }

    /// After `payload` was decoded member by member into `obj` (a Struct `index`): learns the
    /// shape it shares with the payload decoded before it, if any (see [`Shape`]). Shapes that
    /// never hit are learned less and less often (a stream whose events keep changing shape).
    fn learn(&self, py: Python<'_>, shape: &mut Shape, payload: &[u8], index: usize, obj: &Owned) {
        if !shape.root.pieces.is_empty() {
            shape.barren = if shape.hits == 0 {
                shape.barren.saturating_add(1)
            } else {
                0
            };
            shape.root = ObjectShape::default();
        }
        shape.misses = shape.misses.wrapping_add(1);
        if shape.barren < 8 || shape.misses % 32 == 0 {
            shape.misses = 0;
            shape.hits = 0;
            let (old, new) = (&shape.previous[..], payload);
            let cut = Cut { py, old, new };
            let tag = self.tag_field.as_deref();
            if let Some(root) = self.cut(&cut, 0..old.len(), 0..new.len(), index, obj.0, 0, tag) {
                shape.root = root;
                shape.learned.clear();
                shape.learned.extend_from_slice(payload);
            }
        }
        shape.previous.clear();
        shape.previous.extend_from_slice(payload);
    }

    /// Cuts the object at `new_at` of the new payload (built as `obj`, a Struct `index`) into
    /// the pieces of a shape, against the object at `old_at` of the previous payload: the
    /// members whose bytes are equal in both (same keys in the same order, same bytes between
    /// them) are fixed; a member that differs is a hole, or a nested shape when it holds a
    /// Struct (or a list of one) in both. `tag` is the key of the object's tag member (the
    /// top-level tag, or a tagged union's): it must be fixed (the same class in both).
    #[allow(clippy::too_many_arguments)]
    fn cut(
        &self,
        c: &Cut<'_, '_>,
        old_at: std::ops::Range<usize>,
        new_at: std::ops::Range<usize>,
        index: usize,
        obj: *mut ffi::PyObject,
        depth: usize,
        tag: Option<&[u8]>,
    ) -> Option<ObjectShape> {
        let fields = self.structs[index].fields.as_deref()?;
        let before = members(c.old, old_at.clone())?;
        let now = members(c.new, new_at.clone())?;
        if before.len() != now.len() || now.is_empty() {
            return None;
        }
        let mut shape = ObjectShape {
            index,
            ..ObjectShape::default()
        };
        let (mut old_from, mut new_from, mut fixed_from) =
            (old_at.start, new_at.start, new_at.start);
        let mut learned_present = 0u64;
        for (b, n) in before.iter().zip(&now) {
            if !same(
                &c.old[old_from..b.value.start],
                &c.new[new_from..n.value.start],
            ) {
                return None;
            }
            let equal = same(&c.old[b.value.clone()], &c.new[n.value.clone()]);
            let key = &c.new[n.key.clone()];
            let field = fields.iter().position(|f| same(&f.json, key));
            // SAFETY: the field's slot in the complete instance `obj`: a valid reference.
            let slot = |i: usize| unsafe {
                *obj.cast::<u8>()
                    .add(fields[i].offset)
                    .cast::<*mut ffi::PyObject>()
            };
            let tag = tag == Some(key);
            if field.is_none() && !tag {
                let key = u32::try_from(n.key.start).ok()?..u32::try_from(n.key.end).ok()?;
                let value = u32::try_from(n.value.start).ok()?..u32::try_from(n.value.end).ok()?;
                shape.unknowns.push((key, equal.then_some(value)));
            }
            let piece = match field {
                None if tag && !equal => {
                    return None; // another tag: another class
                }
                None if equal => None,
                None => Some(ShapePiece::Skip),
                Some(i) => {
                    shape.present |= 1u64 << i;
                    let at = at_default(&fields[i], slot(i));
                    if at {
                        learned_present |= 1u64 << i;
                    }
                    let kept = if equal { kept(c.py, slot(i)) } else { None };
                    match kept {
                        Some(kept) => {
                            if at {
                                shape.fixed_defaults |= 1u64 << i;
                            }
                            shape.kept.push((fields[i].offset, kept));
                            None
                        }
                        None => Some(self.nested(c, b, n, &fields[i].node, i, slot(i), depth)?),
                    }
                }
            };
            if let Some(piece) = piece {
                let (start, end) = match &piece {
                    // A nested shape's own pieces cover its object's bytes; the list's brackets
                    // (and any spaces inside them) stay in this object's fixed pieces.
                    ShapePiece::Struct(_, inner) | ShapePiece::ListOfOne(_, inner) => {
                        (inner.from, inner.to)
                    }
                    _ => (n.value.start, n.value.end),
                };
                push_fixed(&mut shape.pieces, fixed_from, start)?;
                shape.pieces.push(piece);
                fixed_from = end;
            }
            old_from = b.value.end;
            new_from = n.value.end;
        }
        if !same(&c.old[old_from..old_at.end], &c.new[new_from..new_at.end]) {
            return None;
        }
        push_fixed(&mut shape.pieces, fixed_from, new_at.end)?;
        shape.from = new_at.start;
        shape.to = new_at.end;
        if let Some(offset) = self.structs[index].wire {
            if !shape.unknowns.is_empty() && shape.unknowns.iter().all(|(_, v)| v.is_some()) {
                // SAFETY: the `_wire` slot of the complete instance `obj`: a valid reference.
                let wire = unsafe { *obj.cast::<u8>().add(offset).cast::<*mut ffi::PyObject>() };
                // SAFETY: a new reference for the shape.
                let wire = unsafe { Bound::from_owned_ptr(c.py, new_ref(wire).into_raw()) };
                shape.learned_wire = Some((learned_present, wire.unbind()));
            }
        }
        Some(shape)
    }

    /// The piece for field `i`, whose value differs between the two payloads: a nested shape
    /// when it is a Struct (or a list of exactly one Struct) in both and those cut into one,
    /// else a hole. None (no shape at all) when it holds a tagged union's members of two
    /// classes: a shape with a hole there would keep hitting through the next run of one
    /// class, read member by member, where the next payload learns that run's shape.
    #[allow(clippy::too_many_arguments)]
    fn nested(
        &self,
        c: &Cut<'_, '_>,
        b: &Member,
        n: &Member,
        node: &Node,
        i: usize,
        value: *mut ffi::PyObject,
        depth: usize,
    ) -> Option<ShapePiece> {
        let hole = ShapePiece::Field(i);
        if depth + 2 >= MAX_DEPTH {
            return Some(hole);
        }
        let (old_first, new_first) = (c.old[b.value.start], c.new[n.value.start]);
        if old_first == b'{' && new_first == b'{' && node.mask & STRUCT != 0 {
            // A tagged union's member: the class the member-by-member path built (its tag
            // was the first key), whose tag member the cut keeps fixed, so that a hit has
            // the same tag, first, and builds the same class.
            let (index, tag) = match &node.tags {
                None => (node.strukt, None),
                Some(tags) => {
                    // SAFETY: `value` is the Struct built from this member (borrowed).
                    let cls = unsafe { ffi::Py_TYPE(value) }.cast::<ffi::PyObject>();
                    let found = tags
                        .classes
                        .values()
                        .find(|&&k| self.structs[k].cls.as_ptr() == cls);
                    let Some(&index) = found else {
                        return Some(hole);
                    };
                    let tag_of = |payload: &[u8], at: &std::ops::Range<usize>| {
                        let first = members(payload, at.clone())?.into_iter().next()?;
                        Some(payload[first.value].to_vec())
                    };
                    match (tag_of(c.old, &b.value), tag_of(c.new, &n.value)) {
                        (Some(old), Some(new)) if old != new => return None,
                        (Some(_), Some(_)) => {}
                        _ => return Some(hole),
                    }
                    (index, Some(&tags.field[..]))
                }
            };
            return Some(
                self.cut(
                    c,
                    b.value.clone(),
                    n.value.clone(),
                    index,
                    value,
                    depth + 1,
                    tag,
                )
                .map_or(hole, |inner| ShapePiece::Struct(i, Box::new(inner))),
            );
        }
        let item_node = node.item.as_deref();
        if old_first == b'[' && new_first == b'[' && node.mask & LIST != 0 {
            let (Some(old_item), Some(new_item), Some(item_node)) = (
                only_object(c.old, b.value.clone()),
                only_object(c.new, n.value.clone()),
                item_node,
            ) else {
                return Some(hole);
            };
            if item_node.mask & STRUCT == 0 || item_node.tags.is_some() {
                return Some(hole);
            }
            // SAFETY: `value` is the list the member-by-member path built from this member,
            // of one item (a borrowed reference); read with the GIL held.
            let item = unsafe {
                if ffi::PyList_Size(value) != 1 {
                    return Some(hole);
                }
                ffi::PyList_GetItem(value, 0)
            };
            return Some(
                self.cut(
                    c,
                    old_item,
                    new_item,
                    item_node.strukt,
                    item,
                    depth + 2,
                    None,
                )
                .map_or(hole, |inner| ShapePiece::ListOfOne(i, Box::new(inner))),
            );
        }
        Some(hole)
    }

    /// Fills the fields not in `present` with their defaults (None: one is required), and the
    /// `_wire` slot with None (set afterwards, `set_wire`, when the object deviates).
    fn fill_defaults(
        &self,
        base: *mut u8,
        plan: &StructPlan,
        fields: &[Field],
        present: u64,
    ) -> Option<()> {
        for (i, field) in fields.iter().enumerate() {
            if present & (1u64 << i) != 0 {
                continue;
            }
            // SAFETY: creating objects with the GIL held.
            let value = match &field.default {
                Default::Required => return None,
                Default::Value(v) => new_ref(v.as_ptr()),
                Default::List => Owned::new(unsafe { ffi::PyList_New(0) })?,
                Default::Dict => Owned::new(unsafe { ffi::PyDict_New() })?,
            };
            // SAFETY: the field's slot in the instance, still NULL (not present).
            unsafe {
                *base.add(field.offset).cast::<*mut ffi::PyObject>() = value.into_raw();
            }
        }
        if let Some(offset) = plan.wire {
            // SAFETY: the `_wire` slot of the instance (checked against `getattr` when the
            // schema was read), still NULL: msgspec fields never take it.
            unsafe {
                *base.add(offset).cast::<*mut ffi::PyObject>() = new_ref(ffi::Py_None()).into_raw();
            }
        }
        Some(())
    }

    /// The members of an object whose `{` (and, when `!first`, its tag) was read, built as
    /// the Struct `index`.
    /// `deep` is set when the Struct is not exact (its `_wire` is not None).
    #[allow(clippy::too_many_arguments)]
    fn object(
        &self,
        py: Python<'_>,
        lx: &mut Lexer<'_>,
        state: &mut Work,
        index: usize,
        first: bool,
        depth: usize,
        deep: &mut bool,
    ) -> Option<Owned> {
        let plan = &self.structs[index];
        let mut dev = Deviation::default();
        let fields = plan.fields.as_deref()?;
        // SAFETY: `alloc` is the class's own `tp_alloc`, called as msgspec's `Struct_alloc`
        // calls it (no items); it returns a zeroed instance (every slot NULL) or NULL.
        let obj = Owned::new(unsafe { (plan.alloc)(plan.cls.as_ptr().cast(), 0) })?;
        let base = obj.0.cast::<u8>();
        let mut seen: u64 = 0;
        let mut next = 0usize;
        let mut more = if first {
            !lx.eat(b'}')
        } else if lx.eat(b',') {
            true
        } else if lx.eat(b'}') {
            false
        } else {
            return None;
        };
        while more {
            let key = lx.plain_string()?;
            if !lx.eat(b':') {
                return None;
            }
            match claim_field(fields, key, &mut seen, &mut next)? {
                Some(i) => {
                    let bit = 1u64 << i;
                    let field = &fields[i];
                    let mut below = false;
                    let value = self.value(py, lx, state, &field.node, depth, &mut below)?;
                    if at_default(field, value.0) {
                        dev.present |= bit;
                    } else {
                        dev.deep |= below;
                    }
                    // SAFETY: the slot at `offset` lies in the instance (checked against
                    // `getattr` when the schema was read) and is still NULL (first sight of
                    // this key); the instance takes the reference.
                    unsafe {
                        *base.add(field.offset).cast::<*mut ffi::PyObject>() = value.into_raw();
                    }
                }
                None => {
                    if plan.forbid_unknown || plan.tag_field.as_deref() == Some(key) {
                        return None;
                    }
                    lx.peek()?;
                    let from = lx.position();
                    lx.skip_value(depth + 1)?;
                    if self.wire.is_some() {
                        dev.unknown(key, &lx.input()[from..lx.position()])?;
                    }
                }
            }
            if lx.eat(b',') {
                continue;
            }
            if lx.eat(b'}') {
                more = false;
            } else {
                return None;
            }
        }
        self.fill_defaults(base, plan, fields, seen)?;
        if dev.present != 0 || dev.extra.is_some() || dev.deep {
            let wire = self.wire_of(py, state, index, &mut dev)?;
            self.set_wire(&obj, index, wire, deep);
        }
        Some(obj)
    }

    /// `deep` is set when a Struct in the value is not exact.
    fn value(
        &self,
        py: Python<'_>,
        lx: &mut Lexer<'_>,
        state: &mut Work,
        node: &Node,
        depth: usize,
        deep: &mut bool,
    ) -> Option<Owned> {
        let mask = node.mask;
        if mask & UNSUPPORTED != 0 {
            return None;
        }
        // SAFETY (every FFI call below): creating objects with the GIL held.
        match lx.peek()? {
            b'"' if mask & STR != 0 => {
                let Work { scratch, cache, .. } = state;
                let text = lx.string(scratch)?;
                string(py, text, slot(cache, node.cache))
            }
            b'-' | b'0'..=b'9' if mask & (INT | FLOAT) != 0 => match lx.number()? {
                Num::Int(n) if mask & INT != 0 => {
                    if (SMALL_INT_MIN..=SMALL_INT_MAX).contains(&n) {
                        let i = (n - SMALL_INT_MIN) as usize;
                        Some(new_ref(self.small_ints[i].as_ptr()))
                    } else {
                        int(py, n, slot(&mut state.ints, node.int_cache))
                    }
                }
                Num::Int(n) if (-EXACT_FLOAT_INT..=EXACT_FLOAT_INT).contains(&n) => {
                    Owned::new(unsafe { ffi::PyFloat_FromDouble(n as f64) })
                }
                Num::Float(f) if mask & FLOAT != 0 => {
                    Owned::new(unsafe { ffi::PyFloat_FromDouble(f) })
                }
                _ => None,
            },
            b'n' if mask & NULL != 0 => lx
                .literal(b"null")
                .then(|| new_ref(unsafe { ffi::Py_None() })),
            b't' if mask & BOOL != 0 => lx
                .literal(b"true")
                .then(|| new_ref(unsafe { ffi::Py_True() })),
            b'f' if mask & BOOL != 0 => lx
                .literal(b"false")
                .then(|| new_ref(unsafe { ffi::Py_False() })),
            b'[' if mask & LIST != 0 && depth < MAX_DEPTH => {
                let item = node.item.as_deref()?;
                lx.eat(b'[');
                let mut items: Vec<Owned> = Vec::new();
                if !lx.eat(b']') {
                    loop {
                        items.push(self.value(py, lx, state, item, depth + 1, deep)?);
                        if lx.eat(b',') {
                            continue;
                        }
                        if lx.eat(b']') {
                            break;
                        }
                        return None;
                    }
                }
                let list = Owned::new(unsafe { ffi::PyList_New(items.len() as ffi::Py_ssize_t) })?;
                for (i, item) in items.into_iter().enumerate() {
                    // SAFETY: `i` is within the new list's length; the list takes the reference.
                    unsafe { ffi::PyList_SetItem(list.0, i as ffi::Py_ssize_t, item.into_raw()) };
                }
                Some(list)
            }
            b'{' if mask & STRUCT != 0 && depth < MAX_DEPTH => {
                lx.eat(b'{');
                let Some(tags) = &node.tags else {
                    return self.object(py, lx, state, node.strukt, true, depth + 1, deep);
                };
                // A tagged union: the tag must be the first key (else msgspec decides).
                if lx.plain_string()? != &tags.field[..] || !lx.eat(b':') {
                    return None;
                }
                let tag = lx.plain_string()?;
                let union = std::ptr::from_ref::<Tags>(tags) as usize;
                let index = if state.nested_union == union && same(&state.nested_tag, tag) {
                    state.nested_struct
                } else {
                    let index = *tags.classes.get(tag)?;
                    state.nested_tag.clear();
                    state.nested_tag.extend_from_slice(tag);
                    (state.nested_union, state.nested_struct) = (union, index);
                    index
                };
                self.object(py, lx, state, index, false, depth + 1, deep)
            }
            _ => None,
        }
    }
}

/// The shape of a stream's recent events, to build the next ones with less reading.
///
/// Most of a stream is runs of one kind of event whose members repeat byte for byte (the
/// tag, the item id, the indices, the model) around a few that change (the delta, the
/// sequence number, an unread `obfuscation`). When two payloads decoded in a row have the same
/// keys in the same order with the same bytes between the values, the second is cut into
/// fixed pieces (its bytes) and holes (the values that differed). A later payload whose bytes
/// equal every fixed piece, with values in the holes that the builder accepts, is then built
/// by comparing the pieces and reading the holes only: a fixed field takes the very object the
/// learned event has (an immutable str, int, float, bool or None), or a new empty list or dict.
/// Exactness is by construction: such a payload differs from the learned one (which the
/// builder accepted) only inside holes, each read by the method the member-by-member path uses
/// for that field, so the Struct equals the one that path builds. Anything else misses and goes
/// member by member.
#[derive(Default)]
struct Shape {
    learned: Vec<u8>,
    root: ObjectShape,
    hits: u32,
    /// Shapes learned in a row that never hit.
    barren: u32,
    misses: u32,
    /// The last payload decoded member by member.
    previous: Vec<u8>,
}

/// The shape of one object of the learned payload (the top-level one, or one nested in it).
#[derive(Default)]
struct ObjectShape {
    /// The Struct it builds.
    index: usize,
    /// Its bytes in the learned payload, which its pieces cover.
    from: usize,
    to: usize,
    pieces: Vec<ShapePiece>,
    /// Fixed fields: slot offset and value.
    kept: Vec<(usize, Kept)>,
    /// The fields it sets (the others take their defaults).
    present: u64,
    /// The fixed fields at their default (part of every hit's `Wire.present`; a hole's field
    /// is told afresh).
    fixed_defaults: u64,
    /// The unknown members, in order: the key (a range of the learned payload, between the
    /// quotes), and the value's range when it is fixed (None: a `Skip` hole, read afresh).
    unknowns: Vec<(std::ops::Range<u32>, Option<std::ops::Range<u32>>)>,
    /// With unknown members all fixed: the learned object's `_wire` and its `present`, which a
    /// hit with the same `present` shares.
    learned_wire: Option<(u64, Py<PyAny>)>,
}

enum ShapePiece {
    /// Bytes `start..end` of the learned payload.
    Fixed { start: u32, end: u32 },
    /// A value read into field `i`.
    Field(usize),
    /// An unknown member's value, validated and skipped.
    Skip,
    /// Field `i` holds a Struct built by a nested shape.
    Struct(usize, Box<ObjectShape>),
    /// Field `i` holds a list of one Struct, built by a nested shape.
    ListOfOne(usize, Box<ObjectShape>),
}

/// The two payloads a shape is cut from.
struct Cut<'py, 'p> {
    py: Python<'py>,
    old: &'p [u8],
    new: &'p [u8],
}

enum Kept {
    Object(Py<PyAny>),
    List,
    Dict,
}

/// A fixed field's value as a shape keeps it: an immutable object itself, an empty list or
/// dict as a new one for each event; None for anything else (read afresh each time).
fn kept(py: Python<'_>, obj: *mut ffi::PyObject) -> Option<Kept> {
    // SAFETY: `obj` is a valid reference (a slot of a complete Struct); type checks and
    // sizes with the GIL held.
    unsafe {
        let exact = |t: *mut ffi::PyTypeObject| ffi::Py_TYPE(obj) == t;
        if obj == ffi::Py_None()
            || obj == ffi::Py_True()
            || obj == ffi::Py_False()
            || exact(std::ptr::addr_of_mut!(ffi::PyUnicode_Type))
            || exact(std::ptr::addr_of_mut!(ffi::PyLong_Type))
            || exact(std::ptr::addr_of_mut!(ffi::PyFloat_Type))
        {
            return Some(Kept::Object(
                Bound::from_owned_ptr(py, new_ref(obj).into_raw()).unbind(),
            ));
        }
        if exact(std::ptr::addr_of_mut!(ffi::PyList_Type)) && ffi::PyList_Size(obj) == 0 {
            return Some(Kept::List);
        }
        if exact(std::ptr::addr_of_mut!(ffi::PyDict_Type)) && ffi::PyDict_Size(obj) == 0 {
            return Some(Kept::Dict);
        }
    }
    None
}

fn push_fixed(pieces: &mut Vec<ShapePiece>, start: usize, end: usize) -> Option<()> {
    pieces.push(ShapePiece::Fixed {
        start: u32::try_from(start).ok()?,
        end: u32::try_from(end).ok()?,
    });
    Some(())
}

/// Where a top-level member's key and value lie.
struct Member {
    key: std::ops::Range<usize>,
    value: std::ops::Range<usize>,
}

/// The members of the JSON object at `at` in `payload` (None if it is not one the lexer
/// accepts, or does not fill `at`).
fn members(payload: &[u8], at: std::ops::Range<usize>) -> Option<Vec<Member>> {
    let mut lx = Lexer::new(payload.get(..at.end)?);
    lx.seek(at.start);
    if !lx.eat(b'{') {
        return None;
    }
    let mut out = Vec::new();
    if lx.eat(b'}') {
        return lx.at_end().then_some(out);
    }
    loop {
        lx.peek()?;
        let start = lx.position() + 1;
        let key = lx.plain_string()?;
        let key = start..start + key.len();
        if !lx.eat(b':') {
            return None;
        }
        lx.peek()?;
        let from = lx.position();
        lx.skip_value(1)?;
        out.push(Member {
            key,
            value: from..lx.position(),
        });
        if lx.eat(b',') {
            continue;
        }
        if lx.eat(b'}') {
            break;
        }
        return None;
    }
    lx.at_end().then_some(out)
}

/// Where the one object of the JSON array at `at` lies, if the array holds exactly one object.
fn only_object(payload: &[u8], at: std::ops::Range<usize>) -> Option<std::ops::Range<usize>> {
    let mut lx = Lexer::new(payload.get(..at.end)?);
    lx.seek(at.start);
    if !lx.eat(b'[') || lx.peek()? != b'{' {
        return None;
    }
    let from = lx.position();
    lx.skip_value(1)?;
    let to = lx.position();
    (lx.eat(b']') && lx.at_end()).then_some(from..to)
}

/// An int of `n`, reusing the cached one when the field repeats its previous value (CPython
/// keeps its own small ints, -5 to 256).
fn int(py: Python<'_>, n: i64, cached: &mut CachedInt) -> Option<Owned> {
    let small = (SMALL_INT_MIN..=SMALL_INT_MAX).contains(&n);
    if !small && cached.score > SCORE_OFF {
        if let Some(obj) = &cached.obj {
            if cached.value == n {
                cached.score = (cached.score + 1).min(SCORE_MAX);
                return Some(new_ref(obj.as_ptr()));
            }
        }
    }
    // SAFETY: creating an int with the GIL held.
    let obj = Owned::new(unsafe { ffi::PyLong_FromLongLong(n) })?;
    if !small && cached.score > SCORE_OFF {
        cached.score -= 1;
        cached.value = n;
        // SAFETY: a new reference for the cache, released when it is replaced or dropped.
        cached.obj = Some(unsafe { Bound::from_owned_ptr(py, new_ref(obj.0).into_raw()) }.unbind());
    }
    Some(obj)
}

/// A str of `text` (UTF-8, checked by Python's strict decoder), reusing the cached one when the
/// field repeats its previous value.
fn string(py: Python<'_>, text: Text<'_>, cached: &mut Cached) -> Option<Owned> {
    let bytes = text.bytes;
    let keep = bytes.len() <= CACHED_LEN && cached.score > SCORE_OFF;
    if keep {
        if let Some(obj) = &cached.obj {
            if same(&cached.bytes, bytes) {
                cached.score = (cached.score + 1).min(SCORE_MAX);
                return Some(new_ref(obj.as_ptr()));
            }
        }
    }
    let obj = if text.ascii {
        ascii_str(bytes)?
    } else {
        // SAFETY: decoding a byte slice with the GIL held; NULL (invalid UTF-8) declines.
        Owned::new(unsafe {
            ffi::PyUnicode_DecodeUTF8(
                bytes.as_ptr().cast(),
                bytes.len() as ffi::Py_ssize_t,
                std::ptr::null(),
            )
        })?
    };
    if keep {
        cached.score -= 1;
        cached.bytes.clear();
        cached.bytes.extend_from_slice(bytes);
        // SAFETY: a new reference for the cache, released when it is replaced or dropped.
        cached.obj = Some(unsafe { Bound::from_owned_ptr(py, new_ref(obj.0).into_raw()) }.unbind());
    }
    Some(obj)
}

extern "C" {
    // Not in the limited API, but exported by every CPython 3 (the builder only runs on the
    // CPython versions `direct_reads` admits): a new, writable str, as msgspec makes its own.
    fn PyUnicode_New(size: ffi::Py_ssize_t, maxchar: ffi::Py_UCS4) -> *mut ffi::PyObject;
}

/// A str of ASCII `bytes`, written into a fresh compact ASCII str (no second scan of the bytes,
/// which `PyUnicode_DecodeUTF8` would make).
fn ascii_str(bytes: &[u8]) -> Option<Owned> {
    // SAFETY: a fresh str of `bytes.len()` ASCII characters is not shared yet; its UTF-8 buffer
    // is its character data (compact ASCII), `bytes.len()` long, written once here.
    unsafe {
        let obj = Owned::new(PyUnicode_New(bytes.len() as ffi::Py_ssize_t, 127))?;
        let mut size: ffi::Py_ssize_t = 0;
        let data = ffi::PyUnicode_AsUTF8AndSize(obj.0, &mut size);
        if data.is_null() || size as usize != bytes.len() {
            ffi::PyErr_Clear();
            return None;
        }
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), data.cast_mut().cast::<u8>(), bytes.len());
        Some(obj)
    }
}

/// The schemas of one protocol for the builder (`rapidsse._native.native_schema` makes it):
/// `structs` lists `(cls, fields or None, forbid_unknown_fields, tag_field)`, each field
/// `(name, json_name, node, default_kind, default)`, each node `(mask, item_node, struct)`;
/// `roots` maps each top-level tag to its struct (tagged protocols) or is the top-level struct.
/// `wire`: `(Wire, DEEP)`, to set each Struct's `_wire` field (default kind 4); without it,
/// `_wire` stays None.
#[pyclass(module = "rapidsse._rapidsse", frozen)]
pub struct NativeSchema {
    pub(crate) schema: Arc<Schema>,
    /// [`build`](NativeSchema::build)'s work state, kept between calls as a decoder keeps its
    /// own between events (made and dropped at each call, it was a tenth of the call).
    spare: Mutex<Option<Work>>,
}

#[pymethods]
impl NativeSchema {
    #[new]
    #[pyo3(signature = (structs, roots, tag_field = None, *, wire = None))]
    fn new(
        py: Python<'_>,
        structs: &Bound<'_, PyList>,
        roots: &Bound<'_, PyAny>,
        tag_field: Option<String>,
        wire: Option<Bound<'_, PyTuple>>,
    ) -> PyResult<NativeSchema> {
        Ok(NativeSchema {
            schema: Arc::new(Schema::from_description(
                py,
                structs,
                roots,
                tag_field,
                wire.as_ref(),
            )?),
            spare: Mutex::new(None),
        })
    }

    /// The classes built natively (those whose fields all check out), by name: for tests.
    fn native_classes(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.schema
            .structs
            .iter()
            .filter(|s| s.fields.is_some())
            .map(|s| Ok(s.cls.bind(py).name()?.to_string()))
            .collect()
    }

    /// The object of one payload (a JSON object), built member by member with no shape learned;
    /// None where the builder declines (the caller then decodes it with msgspec and the Python
    /// wire pass). What an accumulator's snapshot is built with: one object, read once.
    fn build<'py>(&self, py: Python<'py>, payload: &[u8]) -> Option<Bound<'py, PyAny>> {
        // Another thread's build holding it: this one makes its own.
        let kept = self
            .spare
            .try_lock()
            .ok()
            .and_then(|mut spare| spare.take());
        let mut work = kept.unwrap_or_else(|| self.schema.state().work);
        let built = self.schema.decode_member_by_member(py, &mut work, payload);
        if let Ok(mut spare) = self.spare.try_lock() {
            *spare = Some(work);
        }
        let (obj, _) = built?;
        // SAFETY: `obj` is an owned reference to a complete object.
        Some(unsafe { Bound::from_owned_ptr(py, obj.into_raw()) })
    }

    /// Decodes each payload, with one state for them all, as a decoder has for its stream;
    /// None where the builder declines. For the tests.
    fn decode_each<'py>(
        &self,
        py: Python<'py>,
        payloads: Vec<Vec<u8>>,
    ) -> Vec<Option<Bound<'py, PyAny>>> {
        let mut state = self.schema.state();
        payloads
            .iter()
            .map(|p| self.schema.decode(py, &mut state, p))
            .collect()
    }

    /// [`decode_each`](Self::decode_each), and how many payloads were built through a shape.
    /// For the tests.
    fn decode_counting<'py>(
        &self,
        py: Python<'py>,
        payloads: Vec<Vec<u8>>,
    ) -> (Vec<Option<Bound<'py, PyAny>>>, u64) {
        let mut state = self.schema.state();
        let mut shaped = 0;
        let out = payloads
            .iter()
            .map(|p| {
                let hits = state.shape.hits;
                let obj = self.schema.decode(py, &mut state, p);
                shaped += u64::from(state.shape.hits > hits);
                obj
            })
            .collect();
        (out, shaped)
    }
}
