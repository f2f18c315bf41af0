//! `Drain`: the loop behind every iterator of the package (`iter_sse`, `iter_events`,
//! `stream_responses`), as a native iterator: one call of `feed` per chunk, and per event only
//! the iterator protocol (a generator would resume two Python frames per event).

use pyo3::prelude::*;
use pyo3::types::{PyIterator, PyList};
use pyo3::{PyTraverseError, PyVisit};

use super::{OneArg, SSE_ERROR};

/// What `feed` makes of each chunk of `chunks`, event by event, until `finished()` says so
/// (None: to the end of `chunks`); then `at_end()` (None: nothing). When `feed` raises an
/// `SSEError`, the events it had completed (`err.events`) come first, then the error: nothing
/// is lost. After an error, or once finished, no further chunk is read and the iterator is over.
#[pyclass(module = "rapidsse._rapidsse")]
pub struct Drain {
    feed: Option<OneArg>,
    /// The source iterator; None once nothing more is to be read.
    chunks: Option<Py<PyIterator>>,
    finished: Option<Py<PyAny>>,
    /// Called once, when the events of the last chunk read are all out.
    at_end: Option<Py<PyAny>>,
    /// The current chunk's events and the index of the next one to hand out.
    events: Option<Py<PyList>>,
    next: usize,
    /// The error to raise once its events are out.
    pending: Option<PyErr>,
}

#[pymethods]
impl Drain {
    #[new]
    #[pyo3(signature = (feed, chunks, finished = None, at_end = None))]
    fn new(
        py: Python<'_>,
        feed: Py<PyAny>,
        chunks: &Bound<'_, PyAny>,
        finished: Option<Py<PyAny>>,
        at_end: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        Ok(Drain {
            feed: Some(OneArg::new(py, feed)),
            chunks: Some(chunks.try_iter()?.unbind()),
            finished,
            at_end,
            events: None,
            next: 0,
            pending: None,
        })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        loop {
            if let Some(events) = &self.events {
                let events = events.bind(py);
                if self.next < events.len() {
                    let event = events.get_item(self.next)?;
                    self.next += 1;
                    return Ok(Some(event.unbind()));
                }
                self.events = None;
            }
            if let Some(err) = self.pending.take() {
                self.stop();
                return Err(err);
            }
            let Some(chunks) = &self.chunks else {
                // Over: the last chunk's events are out.
                if let Some(at_end) = self.at_end.take() {
                    self.feed = None;
                    at_end.call0(py)?;
                }
                return Ok(None);
            };
            let chunk = match chunks
                .bind(py)
                .cast::<pyo3::types::PyIterator>()?
                .clone()
                .next()
            {
                None => {
                    self.chunks = None;
                    continue;
                }
                Some(Err(err)) => {
                    self.stop();
                    return Err(err);
                }
                Some(Ok(chunk)) => chunk,
            };
            let Some(feed) = &self.feed else {
                return Ok(None);
            };
            match feed.call(py, &chunk) {
                Ok(events) => {
                    self.events = Some(events.cast_into::<PyList>()?.unbind());
                    self.next = 0;
                    if let Some(finished) = &self.finished {
                        if finished.call0(py)?.is_truthy(py)? {
                            self.chunks = None;
                        }
                    }
                }
                Err(err) if err.is_instance(py, SSE_ERROR.get(py)?) => {
                    let events = err.value(py).getattr(pyo3::intern!(py, "events"))?;
                    self.events = Some(
                        PyList::new(py, events.try_iter()?.collect::<PyResult<Vec<_>>>()?)?
                            .unbind(),
                    );
                    self.next = 0;
                    self.pending = Some(err);
                }
                Err(err) => {
                    self.stop();
                    return Err(err);
                }
            }
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        let feed = self.feed.as_ref().map(OneArg::callable);
        for object in [feed, self.finished.as_ref(), self.at_end.as_ref()]
            .into_iter()
            .flatten()
        {
            visit.call(object)?;
        }
        if let Some(chunks) = &self.chunks {
            visit.call(chunks)?;
        }
        if let Some(events) = &self.events {
            visit.call(events)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.stop();
        self.finished = None;
        self.events = None;
        self.pending = None;
    }
}

impl Drain {
    /// Over after an error: nothing more is read, and `at_end` is not called.
    fn stop(&mut self) {
        self.chunks = None;
        self.feed = None;
        self.at_end = None;
    }
}
