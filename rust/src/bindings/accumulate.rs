//! The accumulator cores for Python: a tap (`feed(bytes)`: frame + accumulate, no Python object
//! per event) and `add_json(payload)` for payloads already split (typed events re-encoded, or
//! Realtime messages). The public classes in `rapidsse.accumulate` wrap these.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple, PyType};
use serde_json::Value;

use super::framing::framing_error;
use super::structs::{exact_str, optional_index, to_value_as_received, ClassSlots, Slot};
use super::{error_from, with_bytes, Imported, EVENT_TOO_LARGE};
use crate::accumulate::{
    text_field, Accumulate, AccumulateError, AnthropicAccumulator, ChatAccumulator,
    CompletionsAccumulator, GeminiAccumulator, RealtimeAccumulator, ResponseAccumulator,
    StreamEvent, Tap, TextEvent,
};
use crate::framing::Framer;

static UNKNOWN_EVENT: Imported = Imported::new("rapidsse._schema", "UnknownEvent");
static INVALID_EVENT: Imported = Imported::new("rapidsse.decoding", "InvalidEvent");
static STRUCT: Imported = Imported::new("msgspec", "Struct");
static ENCODE: Imported = Imported::new("rapidsse.accumulate", "_encode");
static DECODE_ERROR: Imported = Imported::new("rapidsse.errors", "DecodeError");

/// Adds a typed event by its JSON: `UnknownEvent` by its raw payload, any other schema Struct
/// by `added` when it can take it (`None`: it cannot), else re-encoded; `InvalidEvent` was
/// reported by the decoder already and is skipped.
fn add_encoded<A: Accumulate>(
    acc: &mut A,
    event: &Bound<'_, PyAny>,
    added: impl FnOnce(&mut A) -> Option<Result<(), AccumulateError>>,
) -> PyResult<()> {
    let py = event.py();
    let payload = if event.is_instance(UNKNOWN_EVENT.get(py)?)? {
        event.getattr(pyo3::intern!(py, "raw"))?
    } else if event.is_instance(INVALID_EVENT.get(py)?)? {
        return Ok(());
    } else if event.is_instance(STRUCT.get(py)?)? {
        if let Some(result) = added(acc) {
            return result.map_err(|err| text_too_large(py, &err));
        }
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
        add_encoded(self, event, |_| None)
    }
}

impl AddTyped for ChatAccumulator {}
impl AddTyped for RealtimeAccumulator {}
impl AddTyped for GeminiAccumulator {}
impl AddTyped for CompletionsAccumulator {}
impl AddTyped for AnthropicAccumulator {}

impl AddTyped for ResponseAccumulator {
    /// Text deltas, the bulk of a stream, and the `.done` events that end them are read field
    /// by field; other schema events are walked into the value their JSON would parse to. No
    /// JSON round trip either way, and the same result (the JSON way stays for what the walk
    /// declines: unknown and invalid events, odd values).
    fn add_typed(&mut self, classes: &mut TextClasses, event: &Bound<'_, PyAny>) -> PyResult<()> {
        let events = self.events();
        let TextClasses { table, memo } = classes;
        if let Some(class) = table.get(event).filter(|class| !class.has_extras(event)) {
            if let Some(result) = memo.continue_run(self, event, class, events) {
                return result.map_err(|err| text_too_large(event.py(), &err));
            }
            if let Some(text) = read_text(event, class) {
                let result = self.add_text_event(&text);
                if result.is_ok() && text.field == "delta" && self.run_is_open() {
                    memo.remember(event, class, self.events());
                }
                return result.map_err(|err| text_too_large(event.py(), &err));
            }
        }
        // Any other schema event as its JSON would parse, walked off the Struct (no encoding,
        // no parse).
        add_encoded(self, event, |acc| {
            let Some(Value::Object(map)) = to_value_as_received(event) else {
                return None;
            };
            Some(acc.add_event(&StreamEvent::from_value(map)?))
        })
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

/// A Responses text event class (see `text_field`): its wire type, the name and slot of its
/// text field, and the slots of each of [`TEXT_EVENT_FIELDS`] it has.
struct TextClass {
    kind: String,
    field: &'static str,
    text: Slot,
    fields: [Option<Slot>; 5],
    /// The hidden `_wire` slot (`rapidsse._schema.Model`): an event whose JSON had members
    /// the schema does not know goes the JSON way, where the core sees them as it would in
    /// the payload.
    wire: Option<Slot>,
}

impl TextClass {
    /// The class of `event` if it is a text event class whose fields can all be read directly.
    fn of(event: &Bound<'_, PyAny>) -> Option<TextClass> {
        let class = ClassSlots::of(event)?;
        let kind = class.tag()?.to_owned();
        let field = text_field(&kind)?;
        Some(TextClass {
            text: class.slot(field)?,
            fields: TEXT_EVENT_FIELDS.map(|name| class.slot(name)),
            wire: class.wire(),
            field,
            kind,
        })
    }

    /// Whether `event` (of this class) carries unknown members (`_wire.extra` is set).
    fn has_extras(&self, event: &Bound<'_, PyAny>) -> bool {
        let Some(slot) = &self.wire else {
            return false;
        };
        // SAFETY: the caller matched `event`'s exact class to the one the slots came from.
        match unsafe { slot.read(event) } {
            None => false, // unset: a Struct built by hand, nothing received
            Some(wire) if wire.is_none() => false,
            Some(wire) => !wire
                .getattr(pyo3::intern!(event.py(), "extra"))
                .is_ok_and(|extra| extra.is_none()),
        }
    }
}

/// Per event class, looked up once: is it a text event, and its shape. Keyed by the type
/// object's address; the classes are kept alive here, so an address is never reused.
#[derive(Default)]
struct TextClasses {
    table: ClassTable,
    memo: RunMemo,
}

#[derive(Default)]
struct ClassTable {
    seen: Vec<(Py<PyType>, Option<TextClass>)>,
    last: usize,
}

/// The last text delta that went into the open run, by identity: its class, the very objects
/// its item id and indices held (kept alive here, so no other object can take their address)
/// and the accumulator's event count after it. A next delta of that class holding the same
/// objects, with no event in between, continues the run: only its text and sequence number are
/// read, and none of its fields are decoded or compared by value. (The Struct builder hands out
/// the same objects for the fields that repeat, so this is the usual case.)
#[derive(Default)]
struct RunMemo {
    class: usize,
    /// The objects of [`TEXT_EVENT_FIELDS`] but the sequence number (None: no such slot).
    fields: [Option<Py<PyAny>>; 4],
    events: u64,
}

impl RunMemo {
    fn remember(&mut self, event: &Bound<'_, PyAny>, class: &TextClass, events: u64) {
        // SAFETY: `class` is the one of `event`'s exact class (from `TextClasses::get`).
        let read = |slot: &Option<Slot>| {
            slot.as_ref()
                .and_then(|slot| unsafe { slot.read(event) })
                .map(|value| value.to_owned().unbind())
        };
        self.class = unsafe { pyo3::ffi::Py_TYPE(event.as_ptr()) } as usize;
        for (kept, slot) in self.fields.iter_mut().zip(&class.fields) {
            *kept = read(slot);
        }
        self.events = events;
    }

    /// The run continued by `event`, if it is a delta like the remembered one, right after it
    /// (see [`RunMemo`]); None to add it the usual way.
    fn continue_run(
        &mut self,
        acc: &mut ResponseAccumulator,
        event: &Bound<'_, PyAny>,
        class: &TextClass,
        events: u64,
    ) -> Option<Result<(), AccumulateError>> {
        if events != self.events
            || unsafe { pyo3::ffi::Py_TYPE(event.as_ptr()) } as usize != self.class
        {
            return None;
        }
        // SAFETY: as in `remember`.
        let read = |slot: &Slot| unsafe { slot.read(event) };
        for (kept, slot) in self.fields.iter().zip(&class.fields) {
            let now = slot.as_ref().and_then(&read).map(|v| v.as_ptr());
            if now != kept.as_ref().map(|k| k.as_ptr()) {
                return None;
            }
        }
        let text = exact_str(read(&class.text)?)?;
        let sequence = match &class.fields[4] {
            Some(slot) => optional_index(read(slot)?)?,
            None => None,
        };
        let result = acc.continue_run(text, sequence)?;
        self.events = acc.events();
        Some(result)
    }
}

impl ClassTable {
    fn get(&mut self, event: &Bound<'_, PyAny>) -> Option<&TextClass> {
        let cls = unsafe { pyo3::ffi::Py_TYPE(event.as_ptr()) };
        let hit = |c: &Py<PyType>| c.as_ptr().cast() == cls;
        let position = match self.seen.get(self.last) {
            Some((c, _)) if hit(c) => self.last,
            _ => match self.seen.iter().position(|(c, _)| hit(c)) {
                Some(p) => p,
                None => {
                    let cls = event.get_type();
                    let class = TextClass::of(event);
                    self.seen.push((cls.unbind(), class));
                    self.seen.len() - 1
                }
            },
        };
        self.last = position;
        self.seen[position].1.as_ref()
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

/// Frames `data` and adds every payload; returns the rejected ones (None when all went in).
fn tap<'py, A: Accumulate + Send>(
    py: Python<'py>,
    framer: &mut Framer,
    acc: &mut A,
    data: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyList>>> {
    with_bytes(data, |bytes| {
        let mut sink = Tap::new(acc, framer);
        // Large chunks are worth letting other Python threads run meanwhile.
        let framed = if bytes.len() >= 64 * 1024 {
            py.detach(|| framer.feed_into(bytes, &mut sink))
        } else {
            framer.feed_into(bytes, &mut sink)
        };
        let errors = if sink.refused.is_empty() {
            None
        } else {
            let list = PyList::empty(py);
            for r in &sink.refused {
                list.append(error_tuple(
                    py, &r.error, r.index, &r.event, r.offset, &r.data,
                )?)?;
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

/// A method of one argument as CPython's `METH_O` builtins take it, bound to an object: a call
/// passes the argument straight through, where a `#[pymethods]` method of one argument parses
/// it as a keyword-capable call (≈ 7 ns a call here: it shows at one call per chunk or event).
/// `f` runs inside PyO3's own trampoline (attached, panics turned into exceptions).
struct DirectMethod(pyo3::ffi::PyMethodDef);

// SAFETY: the definition is immutable after construction; CPython only reads it.
unsafe impl Sync for DirectMethod {}

impl DirectMethod {
    const fn new(name: &'static std::ffi::CStr, f: pyo3::ffi::PyCFunction) -> Self {
        DirectMethod(pyo3::ffi::PyMethodDef {
            ml_name: name.as_ptr(),
            ml_meth: pyo3::ffi::PyMethodDefPointer { PyCFunction: f },
            ml_flags: pyo3::ffi::METH_O,
            ml_doc: std::ptr::null(),
        })
    }

    /// The builtin function of this definition bound to `obj` (it keeps `obj` alive).
    fn bind<'py>(&'static self, obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let def = std::ptr::from_ref(&self.0).cast_mut();
        // SAFETY: `def` is a `METH_O` definition that lives forever (a static); CPython only
        // reads it. `PyCFunction_NewEx` returns a new reference or NULL with an exception set.
        unsafe {
            Bound::from_owned_ptr_or_err(
                obj.py(),
                pyo3::ffi::PyCFunction_NewEx(def, obj.as_ptr(), std::ptr::null_mut()),
            )
        }
    }
}

/// The body of a [`DirectMethod`]: `slf` (the bound object) as a `T`, borrowed mutably, and the
/// argument; returns a new reference.
///
/// # Safety
/// Called by CPython through a `METH_O` definition: attached, with borrowed `slf` and `arg`.
unsafe fn direct_call<T: pyo3::PyClass<Frozen = pyo3::pyclass::boolean_struct::False>>(
    py: Python<'_>,
    slf: *mut pyo3::ffi::PyObject,
    arg: *mut pyo3::ffi::PyObject,
    f: impl FnOnce(&mut T, &Bound<'_, PyAny>) -> PyResult<Py<PyAny>>,
) -> PyResult<*mut pyo3::ffi::PyObject> {
    // SAFETY: the caller passes live borrowed references.
    let (slf, arg) = unsafe {
        (
            Bound::from_borrowed_ptr(py, slf),
            Bound::from_borrowed_ptr(py, arg),
        )
    };
    let slf = slf.cast::<T>()?;
    let mut this = slf.try_borrow_mut()?;
    Ok(f(&mut this, &arg)?.into_ptr())
}

macro_rules! accumulator_core {
    ($name:ident, $inner:ty, $doc:literal $(, $extra:item)*) => {
        #[doc = $doc]
        #[pyclass(module = "rapidsse._rapidsse")]
        pub struct $name {
            acc: $inner,
            framer: Framer,
            text_classes: TextClasses,
            /// Called with the rejected payloads of a `feed` (see `set_on_rejected`).
            on_rejected: Option<Py<PyAny>>,
        }

        impl $name {
            /// A core around an accumulator and framer fed elsewhere (the native gateway's tap).
            pub(crate) fn from_parts(acc: $inner, framer: Framer) -> Self {
                $name {
                    acc,
                    framer,
                    text_classes: TextClasses::default(),
                    on_rejected: None,
                }
            }
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
                    on_rejected: None,
                }
            }

            /// A callable that `feed` hands the rejected payloads to (then `feed` returns None,
            /// or raises what it raised), so that the Python wrapper can bind `feed` itself.
            #[pyo3(signature = (handler))]
            fn set_on_rejected(&mut self, handler: Option<Py<PyAny>>) {
                self.on_rejected = handler;
            }

            /// Raw SSE bytes: frames them and adds every event. Returns the rejected payloads
            /// as `(reason, index, event, offset, raw, limit)` tuples, or None.
            fn feed<'py>(
                &mut self,
                py: Python<'py>,
                data: &Bound<'py, PyAny>,
            ) -> PyResult<Option<Bound<'py, PyList>>> {
                let rejected = tap(py, &mut self.framer, &mut self.acc, data)?;
                match (rejected, &self.on_rejected) {
                    (Some(rejected), Some(handler)) => {
                        handler.call1(py, (rejected,))?;
                        Ok(None)
                    }
                    (rejected, _) => Ok(rejected),
                }
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

            /// `feed` and `add` as builtin functions bound to this core, taking their argument
            /// directly (see `DirectMethod`): what the Python wrapper binds.
            fn direct_methods<'py>(
                slf: &Bound<'py, Self>,
            ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
                /// `feed`, called by CPython (`METH_O`).
                ///
                /// # Safety
                /// Called by CPython with the thread attached, `slf` and `data` borrowed.
                unsafe fn feed_body(
                    py: Python<'_>,
                    slf: *mut pyo3::ffi::PyObject,
                    data: *mut pyo3::ffi::PyObject,
                ) -> PyResult<*mut pyo3::ffi::PyObject> {
                    // SAFETY: as this function's own contract.
                    unsafe {
                        direct_call(py, slf, data, |core: &mut $name, data| {
                            Ok(core.feed(py, data)?.map_or_else(|| py.None(), |l| l.into_any().unbind()))
                        })
                    }
                }
                /// `add`, called by CPython (`METH_O`).
                ///
                /// # Safety
                /// Called by CPython with the thread attached, `slf` and `event` borrowed.
                unsafe fn add_body(
                    py: Python<'_>,
                    slf: *mut pyo3::ffi::PyObject,
                    event: *mut pyo3::ffi::PyObject,
                ) -> PyResult<*mut pyo3::ffi::PyObject> {
                    // SAFETY: as this function's own contract.
                    unsafe {
                        direct_call(py, slf, event, |core: &mut $name, event| {
                            core.add(event)?;
                            Ok(py.None())
                        })
                    }
                }
                static FEED: DirectMethod = DirectMethod::new(
                    c"feed",
                    pyo3::impl_::trampoline::get_trampoline_function!(binaryfunc, feed_body),
                );
                static ADD: DirectMethod = DirectMethod::new(
                    c"add",
                    pyo3::impl_::trampoline::get_trampoline_function!(binaryfunc, add_body),
                );
                Ok((FEED.bind(slf.as_any())?, ADD.bind(slf.as_any())?))
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
    /// The snapshot with its texts of at least `min_len` bytes set aside (written as `""`):
    /// `(json, [(path, text), ...])`, each path a tuple of keys and indices; None before a
    /// snapshot exists. The wrapper decodes the JSON and puts each text back at its path: the
    /// texts are not escaped here nor unescaped by msgspec.
    fn snapshot_spliced<'py>(
        &mut self,
        py: Python<'py>,
        min_len: usize,
    ) -> PyResult<Option<(Bound<'py, PyBytes>, Bound<'py, PyList>)>> {
        spliced_to_py(py, self.acc.snapshot_spliced(min_len))
    },
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
accumulator_core!(GeminiCore, GeminiAccumulator, "Gemini accumulator core.");
accumulator_core!(
    CompletionsCore,
    CompletionsAccumulator,
    "Completions accumulator core."
);
accumulator_core!(
    AnthropicCore,
    AnthropicAccumulator,
    "Anthropic Messages accumulator core.",
    /// The snapshot with its texts of at least `min_len` bytes set aside, as
    /// `ResponseCore.snapshot_spliced` gives it.
    fn snapshot_spliced<'py>(
        &mut self,
        py: Python<'py>,
        min_len: usize,
    ) -> PyResult<Option<(Bound<'py, PyBytes>, Bound<'py, PyList>)>> {
        spliced_to_py(py, self.acc.snapshot_spliced(min_len))
    }
);

/// A spliced snapshot (see `json::Splice`) as `(json, [(path, text), ...])`, each path a tuple
/// of keys and indices.
fn spliced_to_py<'py>(
    py: Python<'py>,
    spliced: Option<(Vec<u8>, Vec<(Vec<crate::accumulate::Step<'_>>, &str)>)>,
) -> PyResult<Option<(Bound<'py, PyBytes>, Bound<'py, PyList>)>> {
    let Some((json, texts)) = spliced else {
        return Ok(None);
    };
    let list = PyList::empty(py);
    for (path, text) in texts {
        let steps = path.iter().map(|step| match *step {
            crate::accumulate::Step::Key(key) => PyString::new(py, key).into_any(),
            crate::accumulate::Step::Index(i) => i
                .into_pyobject(py)
                .map_or_else(|never| match never {}, |i| i.into_any()),
        });
        list.append((PyTuple::new(py, steps)?, PyString::new(py, text)))?;
    }
    Ok(Some((PyBytes::new(py, &json), list)))
}
