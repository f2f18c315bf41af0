//! The wire-info pass in Rust: `_wire` set on a Struct tree msgspec decoded, from the payload.
//!
//! The Struct builder (`native.rs`) sets `_wire` on what it builds. What msgspec decodes (events
//! with items, parts or whole responses, the batch and careful paths, the accumulators'
//! snapshots, Realtime messages) gets it from `rapidsse._wire.compute`, whose Python pass is the
//! reference; on the Rust backend that pass is this one, with the same result Struct for Struct.
//! It walks the payload with [`crate::lex::Lexer`] (the one JSON reader) beside the decoded tree:
//! at each Struct, each member is a known field (read straight from its slot and told at its
//! default or not), the tag, or an unknown member (kept as its raw text); the recursion follows
//! the Python values (a Struct, a list) as the Python pass does. Anything it is not sure to read
//! as the Python pass reads it (an escaped key, a repeated key, a dict that holds Structs, a class
//! whose slots do not check out, nesting beyond [`MAX_DEPTH`]) makes it answer false, and the
//! caller runs the Python pass instead.
//!
//! The classes are described by `rapidsse._native.wire_class`, once each, on first sight.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyString, PyTuple, PyType};

use super::native::{
    claim_field, new_ref, AtDefault, Deviation, JsonNamed, Owned, WireKit, MAX_CACHED_WIRES,
};
use super::structs::{direct_reads, Slot};
use crate::lex::{Lexer, MAX_DEPTH};

struct PassField {
    json: Box<[u8]>,
    /// The JSON name as a str, for `Wire.present`.
    name: Py<PyAny>,
    offset: usize,
    at_default: AtDefault,
    /// Whether its type may hold a Struct (only those are walked into).
    nested: bool,
}

/// One `rapidsse._schema.Model` class, as the pass reads it.
impl JsonNamed for PassField {
    fn json(&self) -> &[u8] {
        &self.json
    }
}

struct PassClass {
    _cls: Py<PyType>,
    tag: Option<Box<[u8]>>,
    unknown_variant: bool,
    fields: Vec<PassField>,
    /// The offset of the `_wire` slot.
    wire: usize,
    /// The `Wire(present=...)` made for each set of present fields (shared by objects without
    /// unknown members), and the `present` tuples.
    wires: Mutex<Vec<(u64, Py<PyAny>)>>,
    presents: Mutex<Vec<(u64, Py<PyAny>)>>,
}

enum Class {
    Model(Arc<PassClass>),
    /// Not a Model: the pass does not look inside (as the Python pass does not).
    Plain,
    /// A Model whose slots do not check out: the Python pass decides.
    Unsupported,
}

struct Setup {
    kit: WireKit,
    describe: Py<PyAny>,
    /// By type object address (each entry keeps its type alive).
    classes: Mutex<HashMap<usize, Arc<Class>>>,
}

static SETUP: PyOnceLock<Option<Setup>> = PyOnceLock::new();

fn describe(py: Python<'_>, cls: &Bound<'_, PyType>, described: &Bound<'_, PyAny>) -> Class {
    let make = || -> PyResult<Option<PassClass>> {
        let described = described.cast::<PyTuple>()?;
        let tag: Option<String> = described.get_item(0)?.extract()?;
        let unknown_variant: bool = described.get_item(1)?.extract()?;
        let fields = described.get_item(2)?.cast_into::<PyList>()?;
        if fields.len() > 64 || cls.getattr("__itemsize__")?.extract::<isize>()? != 0 {
            return Ok(None);
        }
        // An instance holding a distinct object in every field, to check each slot against.
        let object = py.import("builtins")?.getattr("object")?;
        let kwargs = PyDict::new(py);
        for field in fields.iter() {
            kwargs.set_item(field.cast::<PyTuple>()?.get_item(0)?, object.call0()?)?;
        }
        let Ok(instance) = cls.call((), Some(&kwargs)) else {
            return Ok(None);
        };
        if !instance.get_type().is(cls) || instance.setattr("_wire", object.call0()?).is_err() {
            return Ok(None);
        }
        let Some(wire) = Slot::of(cls, "_wire", &instance) else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(fields.len());
        for field in fields.iter() {
            let field = field.cast_into::<PyTuple>()?;
            let attr: String = field.get_item(0)?.extract()?;
            let json: String = field.get_item(1)?.extract()?;
            let kind: u8 = field.get_item(2)?.extract()?;
            let default = field.get_item(3)?.unbind();
            let Some(slot) = Slot::of(cls, &attr, &instance) else {
                return Ok(None);
            };
            out.push(PassField {
                name: PyString::new(py, &json).into_any().unbind(),
                json: json.into_bytes().into_boxed_slice(),
                offset: slot.offset(),
                at_default: match kind {
                    1 => AtDefault::Identity(default),
                    2 => AtDefault::equal(default),
                    3 => AtDefault::EmptyList,
                    4 => AtDefault::EmptyDict,
                    _ => AtDefault::Never,
                },
                nested: field.get_item(4)?.extract()?,
            });
        }
        Ok(Some(PassClass {
            _cls: cls.clone().unbind(),
            tag: tag.map(|t| t.into_bytes().into_boxed_slice()),
            unknown_variant,
            fields: out,
            wire: wire.offset(),
            wires: Mutex::new(Vec::new()),
            presents: Mutex::new(Vec::new()),
        }))
    };
    match make() {
        Ok(Some(class)) => Class::Model(Arc::new(class)),
        _ => Class::Unsupported,
    }
}

struct Pass<'s, 'py> {
    py: Python<'py>,
    setup: &'s Setup,
}

/// Whether `obj` is an exact list, an exact dict, or neither.
fn is_list(obj: *mut ffi::PyObject) -> bool {
    // SAFETY: `obj` is a live object.
    unsafe { ffi::Py_TYPE(obj) == std::ptr::addr_of_mut!(ffi::PyList_Type) }
}

fn is_dict(obj: *mut ffi::PyObject) -> bool {
    // SAFETY: `obj` is a live object.
    unsafe { ffi::Py_TYPE(obj) == std::ptr::addr_of_mut!(ffi::PyDict_Type) }
}

/// Whether `obj` is of a type no Struct can be: str, int, float, bool, None.
fn is_scalar(obj: *mut ffi::PyObject) -> bool {
    // SAFETY: `obj` is a live object; comparing type pointers.
    unsafe {
        let t = ffi::Py_TYPE(obj);
        obj == ffi::Py_None()
            || t == std::ptr::addr_of_mut!(ffi::PyUnicode_Type)
            || t == std::ptr::addr_of_mut!(ffi::PyLong_Type)
            || t == std::ptr::addr_of_mut!(ffi::PyFloat_Type)
            || t == std::ptr::addr_of_mut!(ffi::PyBool_Type)
    }
}

impl Pass<'_, '_> {
    fn class(&self, obj: *mut ffi::PyObject) -> Arc<Class> {
        // SAFETY: `obj` is a live object; its type is a live type object.
        let ty = unsafe { ffi::Py_TYPE(obj) };
        let key = ty as usize;
        if let Some(c) = self
            .setup
            .classes
            .lock()
            .ok()
            .and_then(|m| m.get(&key).cloned())
        {
            return c;
        }
        // Described with no lock held (Python runs).
        // SAFETY: `ty` is a live type object (the type of `obj`).
        let cls = unsafe { Bound::from_borrowed_ptr(self.py, ty.cast()) };
        let class = match cls.cast::<PyType>() {
            Ok(cls) => match self.setup.describe.bind(self.py).call1((cls,)) {
                Ok(d) if d.is_none() => Class::Plain,
                Ok(d) => describe(self.py, cls, &d),
                Err(_) => Class::Unsupported,
            },
            Err(_) => Class::Unsupported,
        };
        let class = Arc::new(class);
        if let Ok(mut m) = self.setup.classes.lock() {
            m.insert(key, class.clone());
        }
        class
    }

    /// The pass over one value read from `lx` and the object decoded from it; whether a
    /// Struct in it is not exact. None: leave it to the Python pass.
    fn value(&self, lx: &mut Lexer<'_>, obj: *mut ffi::PyObject, depth: usize) -> Option<bool> {
        if depth >= MAX_DEPTH {
            return None;
        }
        if is_scalar(obj) {
            lx.skip_value(depth)?;
            return Some(false);
        }
        if is_list(obj) {
            if lx.peek()? != b'[' {
                lx.skip_value(depth)?;
                return Some(false);
            }
            lx.eat(b'[');
            // SAFETY: `obj` is a list; its items are borrowed while it lives.
            let n = unsafe { ffi::PyList_Size(obj) };
            let mut deep = false;
            let mut i: ffi::Py_ssize_t = 0;
            if !lx.eat(b']') {
                loop {
                    if i >= n {
                        return None;
                    }
                    // SAFETY: `0 <= i < n`.
                    let item = unsafe { ffi::PyList_GetItem(obj, i) };
                    deep |= self.value(lx, item, depth + 1)?;
                    i += 1;
                    if lx.eat(b',') {
                        continue;
                    }
                    if lx.eat(b']') {
                        break;
                    }
                    return None;
                }
            }
            return (i == n).then_some(deep);
        }
        if is_dict(obj) {
            // A dict of Structs is left to the Python pass (no schema field has one today).
            // SAFETY: iterating a dict's values, borrowed, with the GIL held.
            let holds = unsafe {
                let (mut pos, mut key, mut value) = (0, std::ptr::null_mut(), std::ptr::null_mut());
                let mut holds = false;
                while ffi::PyDict_Next(obj, &mut pos, &mut key, &mut value) != 0 {
                    if !is_scalar(value) {
                        holds = true;
                        break;
                    }
                }
                holds
            };
            if holds && lx.peek()? == b'{' {
                return None;
            }
            lx.skip_value(depth)?;
            return Some(false);
        }
        match &*self.class(obj) {
            Class::Model(c) if lx.peek()? == b'{' => self.strukt(lx, obj, c, depth),
            Class::Model(_) | Class::Plain => {
                lx.skip_value(depth)?;
                Some(false)
            }
            Class::Unsupported => None,
        }
    }

    /// The pass over one Struct `obj` of class `c`, its JSON object next in `lx`.
    fn strukt(
        &self,
        lx: &mut Lexer<'_>,
        obj: *mut ffi::PyObject,
        c: &PassClass,
        depth: usize,
    ) -> Option<bool> {
        let kit = &self.setup.kit;
        if c.unknown_variant {
            lx.skip_value(depth)?;
            self.set(obj, c, new_ref(kit.deep.as_ptr()));
            return Some(true);
        }
        lx.eat(b'{');
        let mut dev = Deviation::default();
        let mut seen = 0u64;
        let mut next = 0usize;
        if !lx.eat(b'}') {
            loop {
                let key = lx.plain_string()?;
                if !lx.eat(b':') {
                    return None;
                }
                match claim_field(&c.fields, key, &mut seen, &mut next)? {
                    Some(i) => {
                        let bit = 1u64 << i;
                        let f = &c.fields[i];
                        // SAFETY: the field's slot of an instance of exactly this class
                        // (checked against `getattr` when the class was described).
                        let value =
                            unsafe { *obj.cast::<u8>().add(f.offset).cast::<*mut ffi::PyObject>() };
                        if value.is_null() {
                            return None;
                        }
                        if f.at_default.holds(value) {
                            dev.present |= bit;
                            lx.skip_value(depth + 1)?;
                        } else if f.nested && matches!(lx.peek()?, b'{' | b'[') {
                            dev.deep |= self.value(lx, value, depth + 1)?;
                        } else {
                            lx.skip_value(depth + 1)?;
                        }
                    }
                    None if c.tag.as_deref() == Some(key) => lx.skip_value(depth + 1)?,
                    None => {
                        lx.peek()?;
                        let from = lx.position();
                        lx.skip_value(depth + 1)?;
                        dev.unknown(key, &lx.input()[from..lx.position()])?;
                    }
                }
                if lx.eat(b',') {
                    continue;
                }
                if lx.eat(b'}') {
                    break;
                }
                return None;
            }
        }
        let wire = if dev.extra.is_some() || dev.present != 0 {
            self.wire(c, &mut dev)?
        } else if dev.deep {
            new_ref(kit.deep.as_ptr())
        } else {
            // SAFETY: None is a live object.
            new_ref(unsafe { ffi::Py_None() })
        };
        // SAFETY: comparing with None, a live object.
        let deviates = wire.0 != unsafe { ffi::Py_None() };
        self.set(obj, c, wire);
        Some(deviates)
    }

    /// The `Wire` of an object that deviates so (with unknown members or present fields).
    fn wire(&self, c: &PassClass, dev: &mut Deviation) -> Option<Owned> {
        let kit = &self.setup.kit;
        let present = if dev.present == 0 {
            new_ref(kit.empty.as_ptr())
        } else {
            self.present(c, dev.present)?
        };
        if let Some(extra) = &mut dev.extra {
            extra.push(b'}');
            return kit.make(Some(extra), present.0);
        }
        let cached = c.wires.lock().ok().and_then(|w| {
            w.iter()
                .find(|(p, _)| *p == dev.present)
                .map(|(_, w)| new_ref(w.as_ptr()))
        });
        if let Some(wire) = cached {
            return Some(wire);
        }
        let wire = kit.make(None, present.0)?;
        // SAFETY: a new reference for the cache.
        let kept = unsafe { Bound::from_owned_ptr(self.py, new_ref(wire.0).into_raw()) }.unbind();
        if let Ok(mut w) = c.wires.lock() {
            if w.len() < MAX_CACHED_WIRES {
                w.push((dev.present, kept));
            }
        }
        Some(wire)
    }

    /// The `present` tuple of the fields in `present` (JSON names in field order), made once.
    fn present(&self, c: &PassClass, present: u64) -> Option<Owned> {
        let cached = c.presents.lock().ok().and_then(|t| {
            t.iter()
                .find(|(p, _)| *p == present)
                .map(|(_, t)| new_ref(t.as_ptr()))
        });
        if let Some(tuple) = cached {
            return Some(tuple);
        }
        // SAFETY: a new tuple of `n` items, each set once with a new reference; GIL held.
        let tuple = unsafe {
            let tuple = Owned::new(ffi::PyTuple_New(present.count_ones() as ffi::Py_ssize_t))?;
            let mut at = 0;
            for (i, f) in c.fields.iter().enumerate() {
                if present & (1u64 << i) != 0 {
                    ffi::PyTuple_SetItem(tuple.0, at, new_ref(f.name.as_ptr()).into_raw());
                    at += 1;
                }
            }
            tuple
        };
        // SAFETY: a new reference for the cache.
        let kept = unsafe { Bound::from_owned_ptr(self.py, new_ref(tuple.0).into_raw()) }.unbind();
        if let Ok(mut t) = c.presents.lock() {
            if t.len() < MAX_CACHED_WIRES {
                t.push((present, kept));
            }
        }
        Some(tuple)
    }

    fn set(&self, obj: *mut ffi::PyObject, c: &PassClass, wire: Owned) {
        // SAFETY: the `_wire` slot of an instance of exactly this class, holding a reference
        // (or NULL) released here.
        unsafe {
            let slot = obj.cast::<u8>().add(c.wire).cast::<*mut ffi::PyObject>();
            let old = std::mem::replace(&mut *slot, wire.into_raw());
            if !old.is_null() {
                ffi::Py_DecRef(old);
            }
        }
    }
}

fn setup(py: Python<'_>) -> Option<&Setup> {
    SETUP.get(py).and_then(Option::as_ref)
}

/// The payload's bytes: bytes, bytearray, memoryview or str (as UTF-8).
fn payload_bytes<R>(payload: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> R) -> PyResult<R> {
    if let Ok(s) = payload.cast::<PyString>() {
        return Ok(f(s.to_str()?.as_bytes()));
    }
    super::with_bytes(payload, |b| Ok(f(b)))
}

/// Makes the pass ready: `wire` is `(Wire, DEEP)`, `describe` is `rapidsse._native.wire_class`.
/// Returns whether the pass can run on this interpreter (else `wire_compute` answers false).
#[pyfunction]
pub(crate) fn wire_setup(
    py: Python<'_>,
    wire: &Bound<'_, PyTuple>,
    describe: Py<PyAny>,
) -> PyResult<bool> {
    if SETUP.get(py).is_none() {
        let kit = if direct_reads(py) {
            WireKit::of(py, wire)?
        } else {
            None
        };
        let setup = kit.map(|kit| Setup {
            kit,
            describe,
            classes: Mutex::new(HashMap::new()),
        });
        let _ = SETUP.set(py, setup);
    }
    Ok(setup(py).is_some())
}

/// Sets `_wire` on `obj` (a schema Struct, or a list of them) and on every Struct in it, from
/// `payload`, the JSON it was decoded from, as `rapidsse._wire.compute` does. Returns false
/// (having set some `_wire` fields perhaps) when the Python pass must do it.
#[pyfunction]
pub(crate) fn wire_compute(obj: &Bound<'_, PyAny>, payload: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = obj.py();
    let Some(setup) = setup(py) else {
        return Ok(false);
    };
    payload_bytes(payload, |bytes| {
        let pass = Pass { py, setup };
        let mut lx = Lexer::new(bytes);
        pass.value(&mut lx, obj.as_ptr(), 0).is_some() && lx.at_end()
    })
}

/// [`wire_compute`] for each event of a batch (`rapidsse._wire.compute_lines`): the events that
/// are Structs, each with the payload of its line (one JSON value a line; blank lines, which no
/// batch holds, are skipped). False when the Python pass must do them.
#[pyfunction]
pub(crate) fn wire_compute_lines(
    events: &Bound<'_, PyList>,
    lines: &Bound<'_, PyAny>,
) -> PyResult<bool> {
    let py = events.py();
    let Some(setup) = setup(py) else {
        return Ok(false);
    };
    payload_bytes(lines, |bytes| {
        let pass = Pass { py, setup };
        let mut payloads = bytes
            .split(|&b| b == b'\n')
            // (What `bytes.strip()` strips: a line of only these is blank.)
            .filter(|line| {
                !line
                    .iter()
                    .all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c))
            });
        for event in events.iter() {
            let Some(line) = payloads.next() else {
                return false;
            };
            let obj = event.as_ptr();
            if is_scalar(obj) || is_list(obj) || is_dict(obj) {
                continue;
            }
            let class = pass.class(obj);
            let Class::Model(c) = &*class else {
                if matches!(&*class, Class::Unsupported) {
                    return false;
                }
                continue;
            };
            let mut lx = Lexer::new(line);
            if c.unknown_variant || lx.peek() != Some(b'{') {
                continue;
            }
            if pass.strukt(&mut lx, obj, c, 0).is_none() || !lx.at_end() {
                return false;
            }
        }
        payloads.next().is_none()
    })
}
