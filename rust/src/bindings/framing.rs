//! `SSEDecoder` for Python over [`crate::framing::Framer`].

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};

use super::{error_from, with_bytes, Imported, EVENT_TOO_LARGE, SSE_ERROR};
use crate::framing::{Framer, FramingError, RawEvent, Retry};

static SERVER_SENT_EVENT: Imported = Imported::new("rapidsse.framing", "ServerSentEvent");

/// Event names repeat all stream long: keep their Python strings (bounded).
const NAME_CACHE_LIMIT: usize = 256;

/// Python objects reused across events: the event-name strings and the current id.
pub(crate) struct StringCache {
    /// The previous event's name: most streams repeat it, or alternate among a few.
    last_name: Option<(Vec<u8>, Py<PyString>)>,
    names: HashMap<Vec<u8>, Py<PyString>>,
    id: Option<(u64, Py<PyString>)>,
}

impl StringCache {
    pub(crate) fn new() -> StringCache {
        StringCache {
            last_name: None,
            names: HashMap::new(),
            id: None,
        }
    }

    pub(crate) fn event_name<'py>(
        &mut self,
        py: Python<'py>,
        name: &[u8],
    ) -> PyResult<Bound<'py, PyString>> {
        if name.is_empty() {
            // Interned once per process (`intern!`), not per decoder.
            return Ok(pyo3::intern!(py, "message").clone());
        }
        if let Some((last, s)) = &self.last_name {
            if last.as_slice() == name {
                return Ok(s.bind(py).clone());
            }
        }
        let s = match self.names.get(name) {
            Some(s) => s.bind(py).clone(),
            None => {
                let s = py_str(py, name)?;
                if self.names.len() >= NAME_CACHE_LIMIT {
                    self.names.clear();
                }
                self.names.insert(name.to_vec(), s.clone().unbind());
                s
            }
        };
        self.last_name = Some((name.to_vec(), s.clone().unbind()));
        Ok(s)
    }

    pub(crate) fn id<'py>(
        &mut self,
        py: Python<'py>,
        id: &[u8],
        generation: u64,
    ) -> PyResult<Bound<'py, PyString>> {
        match &self.id {
            Some((g, s)) if *g == generation => Ok(s.bind(py).clone()),
            _ => {
                let s = py_str(py, id)?;
                self.id = Some((generation, s.clone().unbind()));
                Ok(s)
            }
        }
    }
}

pub(crate) fn retry_to_py(py: Python<'_>, retry: Option<&Retry>) -> PyResult<Py<PyAny>> {
    Ok(match retry {
        None => py.None(),
        Some(Retry::Small(n)) => n.into_pyobject(py)?.into_any().unbind(),
        Some(Retry::Big(digits)) => py
            .get_type::<pyo3::types::PyInt>()
            .call1((digits.as_str(),))?
            .unbind(),
    })
}

/// Turns a framing error into the Python exception, carrying the events completed before it.
pub(crate) fn framing_error(py: Python<'_>, err: FramingError, events: Py<PyAny>) -> PyErr {
    match err {
        FramingError::TooLarge(e) => {
            let limit = e.limit.into_pyobject(py).unwrap().into_any().unbind();
            let offset = e
                .stream_offset
                .into_pyobject(py)
                .unwrap()
                .into_any()
                .unbind();
            error_from(
                py,
                &EVENT_TOO_LARGE,
                e.to_string(),
                &[("limit", limit), ("offset", offset), ("events", events)],
            )
        }
        FramingError::Poisoned => {
            error_from(py, &SSE_ERROR, err.to_string(), &[("events", events)])
        }
    }
}

/// Decodes UTF-8 with CPython's own decoder and `"replace"` handler: one pass, and exactly
/// what the pure-Python backend's `bytes.decode("utf-8", "replace")` gives.
#[inline]
pub(crate) fn py_str<'py>(py: Python<'py>, bytes: &[u8]) -> PyResult<Bound<'py, PyString>> {
    let len = pyo3::ffi::Py_ssize_t::try_from(bytes.len())
        .map_err(|_| pyo3::exceptions::PyOverflowError::new_err("data too large"))?;
    // SAFETY: the pointer and length describe `bytes`; the errors name is a C string; the
    // result is a new reference (or NULL with an exception set, turned into Err).
    unsafe {
        let ptr = pyo3::ffi::PyUnicode_DecodeUTF8(bytes.as_ptr().cast(), len, c"replace".as_ptr());
        Ok(Bound::from_owned_ptr_or_err(py, ptr)?.cast_into_unchecked())
    }
}

/// Push-style SSE decoder (the Rust backend of `rapidsse.SSEDecoder`).
#[pyclass(module = "rapidsse._rapidsse")]
pub struct SSEDecoder {
    framer: Framer,
    strings: StringCache,
}

impl SSEDecoder {
    fn build<'py>(
        py: Python<'py>,
        strings: &mut StringCache,
        cls: &Bound<'py, PyAny>,
        e: &RawEvent<'_>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let event = strings.event_name(py, e.event)?;
        let data = py_str(py, e.data)?;
        let id = strings.id(py, e.id, e.id_generation)?;
        let retry = retry_to_py(py, e.retry)?;
        cls.call1((event, data, id, retry))
    }
}

#[pymethods]
impl SSEDecoder {
    #[new]
    #[pyo3(signature = (max_event_size = Some(16 * 1024 * 1024)))]
    fn new(max_event_size: Option<usize>) -> SSEDecoder {
        SSEDecoder {
            framer: Framer::new(max_event_size),
            strings: StringCache::new(),
        }
    }

    /// Feeds one chunk of the stream; returns the events it completed.
    fn feed<'py>(
        &mut self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let cls = SERVER_SENT_EVENT.get(py)?;
        let out = PyList::empty(py);
        let strings = &mut self.strings;
        let framer = &mut self.framer;
        with_bytes(data, |bytes| {
            let mut failure: Option<PyErr> = None;
            let res = framer.feed(bytes, |e| {
                if failure.is_some() {
                    return;
                }
                match Self::build(py, strings, cls, &e).and_then(|ev| out.append(ev)) {
                    Ok(()) => {}
                    Err(err) => failure = Some(err),
                }
            });
            if let Some(err) = failure {
                return Err(err);
            }
            res.map_err(|err| framing_error(py, err, out.clone().into_any().unbind()))
        })?;
        Ok(out)
    }

    /// Ends the stream: an unfinished event is discarded (per spec). Returns `[]`.
    fn close<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyList> {
        self.framer.close();
        PyList::empty(py)
    }

    /// Starts a new stream (after an `EventTooLarge`, or to reuse the decoder).
    fn reset(&mut self) {
        self.framer.reset();
    }

    #[getter]
    fn last_event_id<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        let generation = self.framer.id_generation();
        self.strings.id(py, self.framer.last_event_id(), generation)
    }

    #[getter]
    fn retry(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        retry_to_py(py, self.framer.retry())
    }

    #[getter]
    fn max_event_size(&self) -> Option<usize> {
        self.framer.max_event_size()
    }
}
