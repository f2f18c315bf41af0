//! The accumulator cores for Python: a tap (`feed(bytes)`: frame + accumulate, no Python object
//! per event) and `add_json(payload)` for payloads already split (typed events re-encoded, or
//! Realtime messages). The public classes in `rapidsse.accumulate` wrap these.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use super::framing::framing_error;
use super::with_bytes;
use crate::accumulate::{
    Accumulate, AccumulateError, ChatAccumulator, RealtimeAccumulator, ResponseAccumulator,
};
use crate::framing::Framer;

/// One rejected payload, for the Python side to raise or keep:
/// `(reason, index, event name, byte offset, raw payload)`.
fn error_tuple<'py>(
    py: Python<'py>,
    err: &AccumulateError,
    index: u64,
    event: &[u8],
    offset: u64,
    raw: &[u8],
) -> PyResult<Bound<'py, PyTuple>> {
    let name = if event.is_empty() { "message".into() } else { String::from_utf8_lossy(event) };
    PyTuple::new(py, [
        PyString::new(py, &err.to_string()).into_any(),
        index.into_pyobject(py)?.into_any(),
        PyString::new(py, &name).into_any(),
        offset.into_pyobject(py)?.into_any(),
        PyBytes::new(py, raw).into_any(),
    ])
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
            Err(err) => Err(framing_error(py, err, PyList::empty(py).into_any().unbind())),
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
        }

        #[pymethods]
        impl $name {
            #[new]
            #[pyo3(signature = (max_event_size = Some(16 * 1024 * 1024)))]
            fn new(max_event_size: Option<usize>) -> Self {
                $name { acc: <$inner>::new(), framer: Framer::new(max_event_size) }
            }

            /// Raw SSE bytes: frames them and adds every event. Returns the rejected payloads
            /// as `(reason, index, event, offset, raw)` tuples, or None.
            fn feed<'py>(
                &mut self,
                py: Python<'py>,
                data: &Bound<'py, PyAny>,
            ) -> PyResult<Option<Bound<'py, PyList>>> {
                tap(py, &mut self.framer, &mut self.acc, data)
            }

            /// One payload; returns the reason it was rejected, or None.
            fn add_json(&mut self, payload: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
                with_bytes(payload, |bytes| Ok(self.acc.add_json(bytes).err().map(|e| e.to_string())))
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
accumulator_core!(ChatCore, ChatAccumulator, "Chat Completions accumulator core.");
accumulator_core!(RealtimeCore, RealtimeAccumulator, "Realtime accumulator core.");
