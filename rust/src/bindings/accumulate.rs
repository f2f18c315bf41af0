//! The accumulator cores for Python: a tap (`feed(bytes)`: frame + accumulate, no Python object
//! per event) and `add_json(payload)` for payloads already split (typed events re-encoded, or
//! Realtime messages). The public classes in `rapidsse.accumulate` wrap these.

use std::borrow::Cow;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple, PyType};

use super::framing::framing_error;
use super::{error_from, with_bytes, Imported, EVENT_TOO_LARGE};
use crate::accumulate::{
    is_text_delta, Accumulate, AccumulateError, ChatAccumulator, RealtimeAccumulator,
    ResponseAccumulator, Str, StreamEvent,
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
    fn add_typed(&mut self, _classes: &mut DeltaClasses, event: &Bound<'_, PyAny>) -> PyResult<()> {
        add_encoded(self, event)
    }
}

impl AddTyped for ChatAccumulator {}
impl AddTyped for RealtimeAccumulator {}

impl AddTyped for ResponseAccumulator {
    /// Text deltas, the bulk of a stream, are read field by field (no JSON round trip);
    /// other events go by their JSON. Both give the same result.
    fn add_typed(&mut self, classes: &mut DeltaClasses, event: &Bound<'_, PyAny>) -> PyResult<()> {
        if let Some(class) = classes.get(&event.get_type()) {
            if let Some(fields) = DeltaFields::read(event, class) {
                if let Some(ev) = fields.event(&class.kind) {
                    return match self.add_event(&ev) {
                        Ok(()) => Ok(()),
                        Err(err) => Err(text_too_large(event.py(), &err)),
                    };
                }
            }
        }
        add_encoded(self, event)
    }
}

/// The fields a text delta may have, in the order of [`DeltaClass::fields`].
const DELTA_FIELDS: [&str; 5] = [
    "item_id",
    "output_index",
    "content_index",
    "summary_index",
    "sequence_number",
];

/// One field of a Struct class, read through its slot descriptor's own `__get__` (what
/// `getattr` ends up calling, without the attribute lookup on the way).
struct Slot {
    descr: Py<PyAny>,
    get: pyo3::ffi::descrgetfunc,
}

impl Slot {
    /// The descriptor of `name` in `cls`, if it is a plain slot (msgspec Struct fields are).
    fn of(cls: &Bound<'_, PyType>, name: &str) -> Option<Slot> {
        let descr = cls.getattr(name).ok()?;
        if descr.get_type().name().ok()?.to_str().ok()? != "member_descriptor" {
            return None;
        }
        // SAFETY: `descr` is alive; `PyType_GetSlot` on its (static, since 3.10 allowed) type
        // returns its `tp_descr_get`, or NULL.
        let get = unsafe {
            let f = pyo3::ffi::PyType_GetSlot(
                pyo3::ffi::Py_TYPE(descr.as_ptr()),
                pyo3::ffi::Py_tp_descr_get,
            );
            if f.is_null() {
                return None;
            }
            std::mem::transmute::<*mut std::os::raw::c_void, pyo3::ffi::descrgetfunc>(f)
        };
        Some(Slot {
            descr: descr.unbind(),
            get,
        })
    }

    /// The field's value on `obj`, an instance of exactly the class the slot came from.
    #[inline]
    fn read<'py>(&self, obj: &Bound<'py, PyAny>) -> Option<Bound<'py, PyAny>> {
        let py = obj.py();
        // SAFETY: the descriptor's own getter, called as `getattr` would call it: on an
        // instance of its class (the caller matched the exact type) with that type; it
        // returns a new reference or NULL with an exception set (cleared here).
        unsafe {
            let value = (self.get)(
                self.descr.as_ptr(),
                obj.as_ptr(),
                pyo3::ffi::Py_TYPE(obj.as_ptr()).cast(),
            );
            match Bound::from_owned_ptr_or_opt(py, value) {
                Some(v) => Some(v),
                None => {
                    let _ = PyErr::take(py);
                    None
                }
            }
        }
    }
}

/// A Responses text delta class: its wire type and the slots of `delta` and of each of
/// [`DELTA_FIELDS`] it has.
struct DeltaClass {
    kind: String,
    delta: Slot,
    fields: [Option<Slot>; 5],
}

/// Per event class, looked up once: is it a text delta, and its shape.
#[derive(Default)]
struct DeltaClasses {
    seen: Vec<(Py<PyType>, Option<DeltaClass>)>,
}

impl DeltaClasses {
    fn get(&mut self, cls: &Bound<'_, PyType>) -> Option<&DeltaClass> {
        let position = match self.seen.iter().position(|(c, _)| c.is(cls)) {
            Some(p) => p,
            None => {
                let py = cls.py();
                let tag = cls
                    .getattr(pyo3::intern!(py, "__struct_config__"))
                    .and_then(|c| c.getattr(pyo3::intern!(py, "tag")))
                    .and_then(|t| t.extract::<String>())
                    .ok()
                    .filter(|tag| is_text_delta(tag));
                let fields: Vec<String> = cls
                    .getattr(pyo3::intern!(py, "__struct_fields__"))
                    .and_then(|f| f.extract())
                    .unwrap_or_default();
                let has = |name: &str| fields.iter().any(|f| f == name);
                let class = (|| {
                    let kind = tag?;
                    let delta = Slot::of(cls, "delta").filter(|_| has("delta"))?;
                    let mut slots = [None, None, None, None, None];
                    for (slot, name) in slots.iter_mut().zip(DELTA_FIELDS) {
                        if has(name) {
                            // A field that is not a plain slot: this class goes by its JSON.
                            *slot = Some(Slot::of(cls, name)?);
                        }
                    }
                    Some(DeltaClass {
                        kind,
                        delta,
                        fields: slots,
                    })
                })();
                self.seen.push((cls.clone().unbind(), class));
                self.seen.len() - 1
            }
        };
        self.seen[position].1.as_ref()
    }
}

/// A text delta's fields, read straight off the typed event and borrowed from it.
struct DeltaFields<'py> {
    delta: Bound<'py, PyString>,
    item_id: Option<Bound<'py, PyString>>,
    indices: [Option<u64>; 4],
}

impl<'py> DeltaFields<'py> {
    /// `None` when a field is not of the plain shape its JSON would have (then the event goes
    /// the re-encoding way).
    fn read(event: &Bound<'py, PyAny>, class: &DeltaClass) -> Option<DeltaFields<'py>> {
        let delta = class.delta.read(event)?.cast_into::<PyString>().ok()?;
        let [item_id, output, content, summary, sequence] = &class.fields;
        let item_id = match item_id {
            Some(slot) => {
                let value = slot.read(event)?;
                if value.is_none() {
                    None
                } else {
                    Some(value.cast_into::<PyString>().ok()?)
                }
            }
            None => None,
        };
        let index = |slot: &Option<Slot>| -> Option<Option<u64>> {
            let Some(slot) = slot else {
                return Some(None);
            };
            let value = slot.read(event)?;
            if value.is_none() {
                return Some(None);
            }
            value.extract::<u64>().ok().map(Some)
        };
        let indices = [
            index(output)?,
            index(content)?,
            index(summary)?,
            index(sequence)?,
        ];
        Some(DeltaFields {
            delta,
            item_id,
            indices,
        })
    }

    /// The event as `add_json` would have read it from its JSON.
    fn event<'s>(&'s self, kind: &'s str) -> Option<StreamEvent<'s>> {
        let [output_index, content_index, summary_index, sequence_number] = self.indices;
        Some(StreamEvent {
            kind: Some(Str(Cow::Borrowed(kind))),
            delta: Some(Str(Cow::Borrowed(self.delta.to_str().ok()?))),
            item_id: match &self.item_id {
                Some(s) => Some(Str(Cow::Borrowed(s.to_str().ok()?))),
                None => None,
            },
            output_index,
            content_index,
            summary_index,
            sequence_number,
            ..StreamEvent::default()
        })
    }
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

/// Frames `data` and adds every payload; returns the rejected ones (None when all went in).
fn tap<'py, A: Accumulate + Send>(
    py: Python<'py>,
    framer: &mut Framer,
    acc: &mut A,
    data: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyList>>> {
    with_bytes(data, |bytes| {
        let mut rejected: Vec<(AccumulateError, u64, Vec<u8>, u64, Vec<u8>)> = Vec::new();
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

fn add<A: Accumulate>(
    acc: &mut A,
    rejected: &mut Vec<(AccumulateError, u64, Vec<u8>, u64, Vec<u8>)>,
    e: &crate::framing::RawEvent<'_>,
) {
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
            delta_classes: DeltaClasses,
        }

        #[pymethods]
        impl $name {
            #[new]
            #[pyo3(signature = (max_event_size = Some(16 * 1024 * 1024)))]
            fn new(max_event_size: Option<usize>) -> Self {
                $name {
                    acc: <$inner>::with_text_cap(max_event_size),
                    framer: Framer::new(max_event_size),
                    delta_classes: DeltaClasses::default(),
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
                self.acc.add_typed(&mut self.delta_classes, event)
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
