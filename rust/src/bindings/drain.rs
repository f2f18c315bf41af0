//! `Drain` and `AsyncDrain`: the loops behind every iterator of the package (`iter_sse`,
//! `iter_events`, `stream_responses` and their async twins), as native iterators: one call of
//! `feed` per chunk, and per event only the iterator protocol (a generator would resume two
//! Python frames per event; an async generator also raises a `StopIteration` per event).

use pyo3::exceptions::{PyRuntimeError, PyStopAsyncIteration, PyStopIteration};
use pyo3::prelude::*;
use pyo3::types::{PyIterator, PyList, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use super::SSE_ERROR;

/// What both drains share: the chunk's events handed out one by one, then its error.
struct Batch {
    feed: Option<Py<PyAny>>,
    finished: Option<Py<PyAny>>,
    /// Called once, when the events of the last chunk read are all out.
    at_end: Option<Py<PyAny>>,
    /// The current chunk's events and the index of the next one to hand out.
    events: Option<Py<PyList>>,
    next: usize,
    /// The error to raise once its events are out.
    pending: Option<PyErr>,
}

impl Batch {
    fn new(feed: Py<PyAny>, finished: Option<Py<PyAny>>, at_end: Option<Py<PyAny>>) -> Batch {
        Batch {
            feed: Some(feed),
            finished,
            at_end,
            events: None,
            next: 0,
            pending: None,
        }
    }

    /// The next event of the current chunk; once they are out, the chunk's error (and the
    /// drain is over); None when a chunk is to be read.
    #[inline]
    fn take(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
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
        Ok(None)
    }

    /// Feeds one chunk; true when `finished()` says no further chunk is to be read. An
    /// `SSEError` is held until the events it carries are out; any other error ends the drain.
    fn feed(&mut self, py: Python<'_>, chunk: Bound<'_, PyAny>) -> PyResult<bool> {
        let Some(feed) = &self.feed else {
            return Ok(true);
        };
        match feed.call1(py, (chunk,)) {
            Ok(events) => {
                self.events = Some(events.into_bound(py).cast_into::<PyList>()?.unbind());
                self.next = 0;
                match &self.finished {
                    Some(finished) => finished.call0(py)?.is_truthy(py),
                    None => Ok(false),
                }
            }
            Err(err) if err.is_instance(py, SSE_ERROR.get(py)?) => {
                let events = err.value(py).getattr(pyo3::intern!(py, "events"))?;
                self.events = Some(
                    PyList::new(py, events.try_iter()?.collect::<PyResult<Vec<_>>>()?)?.unbind(),
                );
                self.next = 0;
                self.pending = Some(err);
                Ok(false)
            }
            Err(err) => {
                self.stop();
                Err(err)
            }
        }
    }

    /// The source is over and its last chunk's events are out: `at_end()`, once.
    fn end(&mut self, py: Python<'_>) -> PyResult<()> {
        if let Some(at_end) = self.at_end.take() {
            self.feed = None;
            at_end.call0(py)?;
        }
        Ok(())
    }

    /// Over (after an error, or closed): nothing more is handed out or fed, and `at_end` is
    /// not called.
    fn stop(&mut self) {
        self.feed = None;
        self.at_end = None;
        self.events = None;
    }

    fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        for object in [&self.feed, &self.finished, &self.at_end]
            .into_iter()
            .flatten()
        {
            visit.call(object)?;
        }
        if let Some(events) = &self.events {
            visit.call(events)?;
        }
        Ok(())
    }

    fn clear(&mut self) {
        self.stop();
        self.finished = None;
        self.events = None;
        self.pending = None;
    }
}

/// What `feed` makes of each chunk of `chunks`, event by event, until `finished()` says so
/// (None: to the end of `chunks`); then `at_end()` (None: nothing). When `feed` raises an
/// `SSEError`, the events it had completed (`err.events`) come first, then the error: nothing
/// is lost. After an error, or once finished, no further chunk is read and the iterator is over.
#[pyclass(module = "rapidsse._rapidsse")]
pub struct Drain {
    batch: Batch,
    /// The source iterator; None once nothing more is to be read.
    chunks: Option<Py<PyIterator>>,
}

#[pymethods]
impl Drain {
    #[new]
    #[pyo3(signature = (feed, chunks, finished = None, at_end = None))]
    fn new(
        feed: Py<PyAny>,
        chunks: &Bound<'_, PyAny>,
        finished: Option<Py<PyAny>>,
        at_end: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        Ok(Drain {
            batch: Batch::new(feed, finished, at_end),
            chunks: Some(chunks.try_iter()?.unbind()),
        })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        loop {
            match self.batch.take(py) {
                Ok(Some(event)) => return Ok(Some(event)),
                Ok(None) => {}
                Err(err) => {
                    self.chunks = None;
                    return Err(err);
                }
            }
            let Some(chunks) = &self.chunks else {
                self.batch.end(py)?;
                return Ok(None);
            };
            let chunk = match chunks.bind(py).clone().next() {
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
            match self.batch.feed(py, chunk) {
                Ok(true) => self.chunks = None,
                Ok(false) => {}
                Err(err) => {
                    self.chunks = None;
                    return Err(err);
                }
            }
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.batch.traverse(&visit)?;
        if let Some(chunks) = &self.chunks {
            visit.call(chunks)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.batch.clear();
        self.chunks = None;
    }
}

impl Drain {
    fn stop(&mut self) {
        self.chunks = None;
        self.batch.stop();
    }
}

/// The async twin of [`Drain`] over an async iterable of chunks: `async for` hands out the
/// events of the chunk read last without suspending (the awaitable `__anext__` returns
/// completes at once), and awaits the source only for the next chunk. `aclose()` ends it and
/// closes the source (its `aclose()`, when it has one).
#[pyclass(module = "rapidsse._rapidsse")]
pub struct AsyncDrain {
    /// The one awaitable every `__anext__` returns (it holds the state).
    step: Py<AsyncDrainStep>,
    /// `__anext__` was called: `aclose()` closes the source from then on (as an async
    /// generator closed before it starts runs nothing).
    started: bool,
}

#[pymethods]
impl AsyncDrain {
    #[new]
    #[pyo3(signature = (feed, chunks, finished = None, at_end = None))]
    fn new(
        py: Python<'_>,
        feed: Py<PyAny>,
        chunks: &Bound<'_, PyAny>,
        finished: Option<Py<PyAny>>,
        at_end: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let chunks = chunks.call_method0(pyo3::intern!(py, "__aiter__"))?;
        let step = AsyncDrainStep {
            batch: Batch::new(feed, finished, at_end),
            anext: Some(chunks.getattr(pyo3::intern!(py, "__anext__"))?.unbind()),
            source: Some(chunks.unbind()),
            awaiting: None,
            awaits_itself: None,
        };
        Ok(AsyncDrain {
            step: Py::new(py, step)?,
            started: false,
        })
    }

    fn __aiter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __anext__(&mut self, py: Python<'_>) -> PyResult<Py<AsyncDrainStep>> {
        self.started = true;
        if self.step.borrow(py).awaiting.is_some() {
            return Err(PyRuntimeError::new_err(
                "anext(): the stream is already awaiting its next chunk",
            ));
        }
        Ok(self.step.clone_ref(py))
    }

    /// Ends the iteration (nothing more is read, `at_end` is not called) and closes the
    /// source: returns the source's `aclose()` awaitable, or one that does nothing.
    fn aclose(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let source = {
            let mut step = self.step.borrow_mut(py);
            if step.awaiting.is_some() {
                return Err(PyRuntimeError::new_err(
                    "aclose(): the stream is awaiting its next chunk",
                ));
            }
            step.stop();
            step.source.take().filter(|_| self.started)
        };
        if let Some(source) = source {
            let source = source.bind(py);
            if let Ok(aclose) = source.getattr(pyo3::intern!(py, "aclose")) {
                return Ok(aclose.call0()?.unbind());
            }
        }
        Ok(Py::new(py, Ready { value: Some(py.None()) })?.into_any())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.step)
    }
}

/// How the awaitable is resumed (the generator protocol `await` drives it with).
enum Resume<'py> {
    Send(Bound<'py, PyAny>),
    Throw(Bound<'py, PyAny>, Option<Bound<'py, PyAny>>, Option<Bound<'py, PyAny>>),
}

/// The awaitable of [`AsyncDrain::__anext__`]: completes with the next event (a
/// `StopIteration` carrying it), delegating to the source's awaitable while a chunk is awaited.
#[pyclass(module = "rapidsse._rapidsse")]
pub struct AsyncDrainStep {
    batch: Batch,
    /// The source async iterator's `__anext__` (looked up once); None once nothing more is
    /// to be read.
    anext: Option<Py<PyAny>>,
    /// The source async iterator, kept for `aclose()`.
    source: Option<Py<PyAny>>,
    /// The iterator of the source's `__anext__()` awaitable while a chunk is awaited.
    awaiting: Option<Py<PyAny>>,
    /// The type of the source's awaitables when their `__await__()` is themselves (an async
    /// generator's): then it is not called per chunk.
    awaits_itself: Option<Py<pyo3::types::PyType>>,
}

#[pymethods]
impl AsyncDrainStep {
    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.resume(py, Resume::Send(py.None().into_bound(py)))
    }

    fn send(&mut self, py: Python<'_>, value: Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.resume(py, Resume::Send(value))
    }

    #[pyo3(signature = (typ, value = None, traceback = None))]
    fn throw<'py>(
        &mut self,
        py: Python<'py>,
        typ: Bound<'py, PyAny>,
        value: Option<Bound<'py, PyAny>>,
        traceback: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        self.resume(py, Resume::Throw(typ, value, traceback))
    }

    /// The awaiting coroutine is closed: so is the awaited source step, and the drain is over.
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        self.stop();
        if let Some(awaiting) = self.awaiting.take() {
            let awaiting = awaiting.bind(py);
            if let Ok(close) = awaiting.getattr(pyo3::intern!(py, "close")) {
                close.call0()?;
            }
        }
        Ok(())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.batch.traverse(&visit)?;
        for object in [&self.anext, &self.source, &self.awaiting]
            .into_iter()
            .flatten()
        {
            visit.call(object)?;
        }
        if let Some(kind) = &self.awaits_itself {
            visit.call(kind)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.batch.clear();
        self.anext = None;
        self.source = None;
        self.awaiting = None;
        self.awaits_itself = None;
    }
}

/// What the source's awaitable did when resumed.
enum Step<'py> {
    /// Suspended: the value goes up to the event loop.
    Yielded(Bound<'py, PyAny>),
    /// Finished with this chunk.
    Chunk(Bound<'py, PyAny>),
}

impl AsyncDrainStep {
    fn resume<'py>(&mut self, py: Python<'py>, mut how: Resume<'py>) -> PyResult<Py<PyAny>> {
        loop {
            if let Some(awaiting) = self.awaiting.take() {
                let step = match std::mem::replace(&mut how, Resume::Send(py.None().into_bound(py))) {
                    Resume::Send(value) => send(awaiting.bind(py), &value),
                    Resume::Throw(typ, value, tb) => throw(awaiting.bind(py), typ, value, tb),
                };
                match step {
                    Ok(Step::Yielded(value)) => {
                        self.awaiting = Some(awaiting);
                        return Ok(value.unbind());
                    }
                    Ok(Step::Chunk(chunk)) => match self.batch.feed(py, chunk) {
                        Ok(true) => self.anext = None,
                        Ok(false) => {}
                        Err(err) => {
                            self.stop();
                            return Err(err);
                        }
                    },
                    Err(err) if err.is_instance_of::<PyStopAsyncIteration>(py) => {
                        self.anext = None;
                        self.source = None;
                    }
                    Err(err) => {
                        self.stop();
                        return Err(err);
                    }
                }
            } else if let Resume::Throw(typ, value, tb) = how {
                // Nothing awaited: raised here, as into a generator that is not suspended.
                return Err(thrown(py, typ, value, tb));
            }
            match self.batch.take(py) {
                Ok(Some(event)) => return Err(completed(py, event)),
                Ok(None) => {}
                Err(err) => {
                    self.anext = None;
                    return Err(err);
                }
            }
            let Some(anext) = &self.anext else {
                self.batch.end(py)?;
                return Err(PyStopAsyncIteration::new_err(()));
            };
            let next = match anext
                .bind(py)
                .call0()
                .and_then(|awaitable| self.awaitable_iter(awaitable))
            {
                Ok(next) => next,
                Err(err) => {
                    self.stop();
                    return Err(err);
                }
            };
            self.awaiting = Some(next.unbind());
            how = Resume::Send(py.None().into_bound(py));
        }
    }

    fn stop(&mut self) {
        self.anext = None;
        self.batch.stop();
    }

    /// The iterator that `await awaitable` drives: its `__await__()`, not called again for
    /// awaitables of a type whose `__await__()` was themselves.
    fn awaitable_iter<'py>(&mut self, awaitable: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = awaitable.py();
        if let Some(kind) = &self.awaits_itself {
            if awaitable.get_type().is(kind.bind(py)) {
                return Ok(awaitable);
            }
        }
        let iter = awaitable.call_method0(pyo3::intern!(py, "__await__"))?;
        if iter.is(&awaitable) && self.awaits_itself.is_none() {
            self.awaits_itself = Some(awaitable.get_type().unbind());
        }
        Ok(iter)
    }
}

/// The await completes with `value`: `StopIteration(value)` (a tuple is wrapped, or it would
/// be taken for the exception's arguments).
#[inline]
fn completed(py: Python<'_>, value: Py<PyAny>) -> PyErr {
    if value.bind(py).is_instance_of::<PyTuple>() {
        PyStopIteration::new_err((value,))
    } else {
        PyStopIteration::new_err(value)
    }
}


/// One `send` into the source's awaitable (`PyIter_Send`: no `StopIteration` object when it
/// finishes).
fn send<'py>(awaiting: &Bound<'py, PyAny>, value: &Bound<'py, PyAny>) -> PyResult<Step<'py>> {
    let py = awaiting.py();
    let mut result: *mut pyo3::ffi::PyObject = std::ptr::null_mut();
    // SAFETY: both pointers are live references held for the call; `result` receives a new
    // reference (or NULL on error, with the exception set).
    let status = unsafe { pyo3::ffi::PyIter_Send(awaiting.as_ptr(), value.as_ptr(), &mut result) };
    match status {
        pyo3::ffi::PySendResult::PYGEN_NEXT => {
            // SAFETY: a new reference, non-NULL on PYGEN_NEXT.
            Ok(Step::Yielded(unsafe { Bound::from_owned_ptr(py, result) }))
        }
        pyo3::ffi::PySendResult::PYGEN_RETURN => {
            // SAFETY: a new reference, non-NULL on PYGEN_RETURN.
            Ok(Step::Chunk(unsafe { Bound::from_owned_ptr(py, result) }))
        }
        pyo3::ffi::PySendResult::PYGEN_ERROR => Err(PyErr::fetch(py)),
    }
}

/// `awaiting.throw(...)`, or the exception raised here when it has no `throw`.
fn throw<'py>(
    awaiting: &Bound<'py, PyAny>,
    typ: Bound<'py, PyAny>,
    value: Option<Bound<'py, PyAny>>,
    tb: Option<Bound<'py, PyAny>>,
) -> PyResult<Step<'py>> {
    let py = awaiting.py();
    let Ok(method) = awaiting.getattr(pyo3::intern!(py, "throw")) else {
        return Err(thrown(py, typ, value, tb));
    };
    let args = match (value, tb) {
        (None, _) => PyTuple::new(py, [typ])?,
        (Some(value), None) => PyTuple::new(py, [typ, value])?,
        (Some(value), Some(tb)) => PyTuple::new(py, [typ, value, tb])?,
    };
    match method.call1(args) {
        Ok(value) => Ok(Step::Yielded(value)),
        Err(err) if err.is_instance_of::<PyStopIteration>(py) => {
            Ok(Step::Chunk(err.value(py).getattr(pyo3::intern!(py, "value"))?))
        }
        Err(err) => Err(err),
    }
}

/// The exception `throw(typ, value, tb)` names, to raise.
fn thrown<'py>(
    py: Python<'py>,
    typ: Bound<'py, PyAny>,
    value: Option<Bound<'py, PyAny>>,
    tb: Option<Bound<'py, PyAny>>,
) -> PyErr {
    let err = if typ.is_instance_of::<pyo3::exceptions::PyBaseException>() {
        PyErr::from_value(typ)
    } else {
        let exc = match value {
            Some(v) if v.is_instance(&typ).unwrap_or(false) => Ok(v),
            Some(v) if !v.is_none() => typ.call1((v,)),
            _ => typ.call0(),
        };
        match exc {
            Ok(exc) => PyErr::from_value(exc),
            Err(err) => err,
        }
    };
    if let Some(tb) = tb.and_then(|tb| tb.cast_into::<pyo3::types::PyTraceback>().ok()) {
        err.set_traceback(py, Some(tb));
    }
    err
}

/// An awaitable that completes at once with its value (what `aclose()` returns when the
/// source has nothing to close).
#[pyclass(module = "rapidsse._rapidsse")]
pub struct Ready {
    value: Option<Py<PyAny>>,
}

#[pymethods]
impl Ready {
    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self.value.take() {
            Some(value) => Err(completed(py, value)),
            None => Err(PyRuntimeError::new_err("cannot reuse already awaited aclose()")),
        }
    }
}
