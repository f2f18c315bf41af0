//! The accumulator cores for Python: a tap (`feed(bytes)`: frame + accumulate, no Python object
//! per event) and `add_json(payload)` for payloads already split (typed events re-encoded, or
//! Realtime messages). The public classes in `rapidsse.accumulate` wrap these.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple, PyType};

use super::framing::framing_error;
use super::{error_from, with_bytes, Imported, EVENT_TOO_LARGE};
use crate::accumulate::{
    text_field, Accumulate, AccumulateError, ChatAccumulator, RealtimeAccumulator,
    ResponseAccumulator, TextEvent,
};
use crate::framing::Framer;

static UNKNOWN_EVENT: Imported = Imported::new("rapidsse._schema", "UnknownEvent");
static INVALID_EVENT: Imported = Imported::new("rapidsse.decoding", "InvalidEvent");
static STRUCT: Imported = Imported::new("msgspec", "Struct");
static ENCODE: Imported = Imported::new("rapidsse.accumulate", "_encode");
static DECODE_ERROR: Imported = Imported::new("rapidsse.errors", "DecodeError");

/// Adds a typed event by its JSON: `UnknownEvent` by its raw payload, any other schema Struct
/// re-encoded; `InvalidEvent` was reported by the decoder already and is skipped.
fn add_encoded<A: Accumulate>(acc: &mut A, event: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = event.py();
    let payload = if event.is_instance(UNKNOWN_EVENT.get(py)?)? {
        event.getattr(pyo3::intern!(py, "raw"))?
    } else if event.is_instance(INVALID_EVENT.get(py)?)? {
        return Ok(());
    } else if event.is_instance(STRUCT.get(py)?)? {
        ENCODE.get(py)?.call1((event,))?
    } else {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "add() takes a rapidsse event, not {}",
            event.get_type().name()?
        )));
    };
    let events = acc.events();
    with_bytes(&payload, |bytes| match acc.add_json(bytes) {
        Ok(()) => Ok(()),
        Err(err @ AccumulateError::TextTooLarge { .. }) => Err(text_too_large(py, &err)),
        Err(err) => {
            let kind = event
                .getattr(pyo3::intern!(py, "type"))
                .and_then(|t| t.extract::<String>())
                .unwrap_or_else(|_| "message".to_owned());
            Err(error_from(
                py,
                &DECODE_ERROR,
                err.to_string(),
                &[
                    ("index", events.into_pyobject(py)?.into_any().unbind()),
                    ("event", PyString::new(py, &kind).into_any().unbind()),
                    ("offset", (-1i64).into_pyobject(py)?.into_any().unbind()),
                    ("raw", PyBytes::new(py, bytes).into_any().unbind()),
                ],
            ))
        }
    })
}

/// `EventTooLarge` for a delta refused by the text cap.
fn text_too_large(py: Python<'_>, err: &AccumulateError) -> PyErr {
    let limit = match err {
        AccumulateError::TextTooLarge { limit, .. } => *limit,
        _ => 0,
    };
    let kwargs = (|| -> PyResult<_> {
        Ok([
            ("limit", limit.into_pyobject(py)?.into_any().unbind()),
            ("offset", (-1i64).into_pyobject(py)?.into_any().unbind()),
        ])
    })();
    match kwargs {
        Ok(kwargs) => error_from(py, &EVENT_TOO_LARGE, err.to_string(), &kwargs),
        Err(e) => e,
    }
}

/// How each accumulator takes a typed event.
trait AddTyped: Accumulate + Sized {
    fn add_typed(&mut self, _classes: &mut TextClasses, event: &Bound<'_, PyAny>) -> PyResult<()> {
        add_encoded(self, event)
    }
}

impl AddTyped for ChatAccumulator {}
impl AddTyped for RealtimeAccumulator {}

impl AddTyped for ResponseAccumulator {
    /// Text deltas, the bulk of a stream, and the `.done` events that end them are read field
    /// by field (no JSON round trip); other events go by their JSON. Both give the same result.
    fn add_typed(&mut self, classes: &mut TextClasses, event: &Bound<'_, PyAny>) -> PyResult<()> {
        if let Some(class) = classes.get(event) {
            if let Some(text) = read_text(event, class) {
                return match self.add_text_event(&text) {
                    Ok(()) => Ok(()),
                    Err(err) => Err(text_too_large(event.py(), &err)),
                };
            }
        }
        add_encoded(self, event)
    }
}

/// The fields a text event may have besides its text, in the order of [`TextClass::fields`].
const TEXT_EVENT_FIELDS: [&str; 5] = [
    "item_id",
    "output_index",
    "content_index",
    "summary_index",
    "sequence_number",
];

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
fn direct_reads(py: Python<'_>) -> bool {
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
struct Slot {
    offset: usize,
}

impl Slot {
    /// The slot of `name` in `cls`, if it is a plain object slot (msgspec Struct fields are),
    /// checked against `instance` (an instance of exactly `cls`): the value read at the offset
    /// must be the very object `getattr` returns.
    fn of(cls: &Bound<'_, PyType>, name: &str, instance: &Bound<'_, PyAny>) -> Option<Slot> {
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
            _ => None,
        }
    }

    /// The field's value on `obj`, borrowed from it; None when the field is unset.
    ///
    /// # Safety
    /// `obj` must be an instance of exactly the class the slot came from.
    #[inline]
    unsafe fn read<'a, 'py>(&self, obj: &'a Bound<'py, PyAny>) -> Option<Borrowed<'a, 'py, PyAny>> {
        let value = *obj
            .as_ptr()
            .cast::<u8>()
            .add(self.offset)
            .cast::<*mut pyo3::ffi::PyObject>();
        Borrowed::from_ptr_or_opt(obj.py(), value)
    }
}

/// A Responses text event class (see `text_field`): its wire type, the name and slot of its
/// text field, and the slots of each of [`TEXT_EVENT_FIELDS`] it has.
struct TextClass {
    kind: String,
    field: &'static str,
    text: Slot,
    fields: [Option<Slot>; 5],
}

impl TextClass {
    /// The class of `event` if it is a text event class whose fields can all be read directly.
    fn of(cls: &Bound<'_, PyType>, event: &Bound<'_, PyAny>) -> Option<TextClass> {
        let py = cls.py();
        if !direct_reads(py) {
            return None;
        }
        let kind = cls
            .getattr(pyo3::intern!(py, "__struct_config__"))
            .and_then(|c| c.getattr(pyo3::intern!(py, "tag")))
            .and_then(|t| t.extract::<String>())
            .ok()?;
        let field = text_field(&kind)?;
        let fields: Vec<String> = cls
            .getattr(pyo3::intern!(py, "__struct_fields__"))
            .and_then(|f| f.extract())
            .ok()?;
        let has = |name: &str| fields.iter().any(|f| f == name);
        if !has(field) {
            return None;
        }
        let text = Slot::of(cls, field, event)?;
        let mut slots = [None; 5];
        for (slot, name) in slots.iter_mut().zip(TEXT_EVENT_FIELDS) {
            if has(name) {
                // A field that is not a plain slot: this class goes by its JSON.
                *slot = Some(Slot::of(cls, name, event)?);
            }
        }
        Some(TextClass {
            kind,
            field,
            text,
            fields: slots,
        })
    }
}

/// Per event class, looked up once: is it a text event, and its shape. Keyed by the type
/// object's address; the classes are kept alive here, so an address is never reused.
#[derive(Default)]
struct TextClasses {
    seen: Vec<(Py<PyType>, Option<TextClass>)>,
    last: usize,
}

impl TextClasses {
    fn get(&mut self, event: &Bound<'_, PyAny>) -> Option<&TextClass> {
        let cls = unsafe { pyo3::ffi::Py_TYPE(event.as_ptr()) };
        let hit = |c: &Py<PyType>| c.as_ptr().cast() == cls;
        let position = match self.seen.get(self.last) {
            Some((c, _)) if hit(c) => self.last,
            _ => match self.seen.iter().position(|(c, _)| hit(c)) {
                Some(p) => p,
                None => {
                    let cls = event.get_type();
                    let class = TextClass::of(&cls, event);
                    self.seen.push((cls.unbind(), class));
                    self.seen.len() - 1
                }
            },
        };
        self.last = position;
        self.seen[position].1.as_ref()
    }
}

/// A str's UTF-8, borrowed; None for anything else (or a str with lone surrogates).
#[inline]
fn exact_str<'a>(value: Borrowed<'a, '_, PyAny>) -> Option<&'a str> {
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
fn optional_index(value: Borrowed<'_, '_, PyAny>) -> Option<Option<u64>> {
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

/// A text event's fields, read straight off the typed event and borrowed from it; `None`
/// when a field is unset or not of the plain shape its JSON would have (then the event goes
/// the re-encoding way).
fn read_text<'a>(event: &'a Bound<'_, PyAny>, class: &'a TextClass) -> Option<TextEvent<'a>> {
    // SAFETY: the caller matched `event`'s exact class to the one the slots came from.
    let read = |slot: &Slot| unsafe { slot.read(event) };
    let text = exact_str(read(&class.text)?)?;
    let [item_id, output, content, summary, sequence] = &class.fields;
    let item_id = match item_id {
        Some(slot) => {
            let value = read(slot)?;
            if value.is_none() {
                None
            } else {
                Some(exact_str(value)?)
            }
        }
        None => None,
    };
    let index = |slot: &Option<Slot>| match slot {
        Some(slot) => optional_index(read(slot)?),
        None => Some(None),
    };
    Some(TextEvent {
        kind: &class.kind,
        field: class.field,
        text,
        item_id,
        output_index: index(output)?,
        content_index: index(content)?,
        summary_index: index(summary)?,
        sequence_number: index(sequence)?,
    })
}

/// One rejected payload, for the Python side to raise or keep:
/// `(reason, index, event name, byte offset, raw payload, limit)`; `limit` is the cap for a
/// delta refused by it (raised as `EventTooLarge`), else None (a `DecodeError`).
fn error_tuple<'py>(
    py: Python<'py>,
    err: &AccumulateError,
    index: u64,
    event: &[u8],
    offset: u64,
    raw: &[u8],
) -> PyResult<Bound<'py, PyTuple>> {
    let name = if event.is_empty() {
        "message".into()
    } else {
        String::from_utf8_lossy(event)
    };
    PyTuple::new(
        py,
        [
            PyString::new(py, &err.to_string()).into_any(),
            index.into_pyobject(py)?.into_any(),
            PyString::new(py, &name).into_any(),
            offset.into_pyobject(py)?.into_any(),
            PyBytes::new(py, raw).into_any(),
            limit_of(py, err)?,
        ],
    )
}

fn limit_of<'py>(py: Python<'py>, err: &AccumulateError) -> PyResult<Bound<'py, PyAny>> {
    Ok(match err {
        AccumulateError::TextTooLarge { limit, .. } => limit.into_pyobject(py)?.into_any(),
        _ => py.None().into_bound(py),
    })
}

/// A payload the accumulator refused: the error, the event's index, its SSE name, its offset and
/// the payload.
type Refused = (AccumulateError, u64, Vec<u8>, u64, Vec<u8>);

/// Frames `data` and adds every payload; returns the rejected ones (None when all went in).
fn tap<'py, A: Accumulate + Send>(
    py: Python<'py>,
    framer: &mut Framer,
    acc: &mut A,
    data: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyList>>> {
    with_bytes(data, |bytes| {
        let mut rejected: Vec<Refused> = Vec::new();
        // Large chunks are worth letting other Python threads run meanwhile.
        let framed = if bytes.len() >= 64 * 1024 {
            py.detach(|| framer.feed(bytes, |e| add(acc, &mut rejected, &e)))
        } else {
            framer.feed(bytes, |e| add(acc, &mut rejected, &e))
        };
        let errors = if rejected.is_empty() {
            None
        } else {
            let list = PyList::empty(py);
            for (err, index, event, offset, raw) in &rejected {
                list.append(error_tuple(py, err, *index, event, *offset, raw)?)?;
            }
            Some(list)
        };
        match framed {
            Ok(()) => Ok(errors),
            Err(err) => Err(framing_error(
                py,
                err,
                PyList::empty(py).into_any().unbind(),
            )),
        }
    })
}

fn add<A: Accumulate>(acc: &mut A, rejected: &mut Vec<Refused>, e: &crate::framing::RawEvent<'_>) {
    if let Err(err) = acc.add_json(e.data) {
        rejected.push((err, e.index, e.event.to_vec(), e.offset, e.data.to_vec()));
    }
}

macro_rules! accumulator_core {
    ($name:ident, $inner:ty, $doc:literal $(, $extra:item)*) => {
        #[doc = $doc]
        #[pyclass(module = "rapidsse._rapidsse")]
        pub struct $name {
            acc: $inner,
            framer: Framer,
            text_classes: TextClasses,
        }

        #[pymethods]
        impl $name {
            #[new]
            #[pyo3(signature = (max_event_size = Some(16 * 1024 * 1024)))]
            fn new(max_event_size: Option<usize>) -> Self {
                $name {
                    acc: <$inner>::with_text_cap(max_event_size),
                    framer: Framer::new(max_event_size),
                    text_classes: TextClasses::default(),
                }
            }

            /// Raw SSE bytes: frames them and adds every event. Returns the rejected payloads
            /// as `(reason, index, event, offset, raw, limit)` tuples, or None.
            fn feed<'py>(
                &mut self,
                py: Python<'py>,
                data: &Bound<'py, PyAny>,
            ) -> PyResult<Option<Bound<'py, PyList>>> {
                tap(py, &mut self.framer, &mut self.acc, data)
            }

            /// One payload; returns `(reason, limit)` when it was rejected (see `feed`), or None.
            fn add_json<'py>(
                &mut self,
                payload: &Bound<'py, PyAny>,
            ) -> PyResult<Option<(String, Bound<'py, PyAny>)>> {
                let py = payload.py();
                with_bytes(payload, |bytes| match self.acc.add_json(bytes) {
                    Ok(()) => Ok(None),
                    Err(e) => Ok(Some((e.to_string(), limit_of(py, &e)?))),
                })
            }

            /// A typed event (from `iter_events` / `decode_realtime`).
            fn add(&mut self, event: &Bound<'_, PyAny>) -> PyResult<()> {
                self.acc.add_typed(&mut self.text_classes, event)
            }

            /// Ends the framed stream (an unfinished event is discarded).
            fn close(&mut self) {
                self.framer.close();
            }

            fn snapshot_json<'py>(&mut self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
                self.acc.snapshot_json().map(|json| PyBytes::new(py, &json))
            }

            fn warnings(&self) -> Vec<String> {
                self.acc.warnings().to_vec()
            }

            fn unknown_events(&self) -> u64 {
                self.acc.unknown_events()
            }

            fn events(&self) -> u64 {
                self.acc.events()
            }

            $($extra)*
        }
    };
}

accumulator_core!(
    ResponseCore,
    ResponseAccumulator,
    "Responses accumulator core.",
    /// All output_text of message items, concatenated in output order.
    fn output_text(&mut self) -> String {
        self.acc.output_text()
    }
);
accumulator_core!(
    ChatCore,
    ChatAccumulator,
    "Chat Completions accumulator core."
);
accumulator_core!(
    RealtimeCore,
    RealtimeAccumulator,
    "Realtime accumulator core."
);
