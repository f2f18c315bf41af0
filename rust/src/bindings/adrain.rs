//! `AsyncDrain`: the async twin of `Drain` (`aiter_sse`, `aiter_events`, `astream_*`), as a
//! native object that is its own async iterator and its own awaitable.
//!
//! Why raw `pyo3::ffi` and not `#[pyclass]`: the point is the `am_send` slot, which PyO3 cannot
//! define. `async for` awaits `__anext__()` with CPython's SEND opcode; on 3.10 and 3.11 SEND
//! calls `PyIter_Send`, which calls `am_send`, and an `am_send` that returns `PYGEN_RETURN` hands
//! the event over with no `StopIteration` at all. From 3.12 SEND calls `tp_iternext` (when `None`
//! is sent; the method `send` otherwise), so there the event leaves as a `StopIteration` set with
//! a bare `PyErr_SetObject` (what CPython's own async generators do), never through PyO3's `PyErr`,
//! which on an abi3 build for < 3.12 normalises every error (the first native attempt, slower
//! than an async generator for that: docs/internals.md).
//!
//! While the current chunk's events last, each step returns the next one at once. When they run
//! out, the step reads the next chunk by delegating to the source's awaitable
//! (`source.__anext__()`, then its `__await__()` iterator, as `async for` does): the values it
//! yields (the futures an event loop waits on) are passed up, and `throw` / `close` are passed
//! down, so an asyncio cancellation reaches the source where it awaits.

use std::ffi::{c_int, c_void};
use std::ptr;

use pyo3::exceptions::{
    PyRuntimeError, PyStopAsyncIteration, PyStopIteration, PyTypeError, PyValueError,
};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyList, PyType};
use pyo3::{intern, PyTypeInfo};

use super::{Imported, OneArg, SSE_ERROR};

static COROUTINE_TYPE: Imported = Imported::new("types", "CoroutineType");
static GENERATOR_TYPE: Imported = Imported::new("types", "GeneratorType");
static ASYNC_DRAIN_TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

#[repr(C)]
struct AsyncDrain {
    ob_base: ffi::PyObject,
    state: State,
}

struct State {
    feed: Option<OneArg>,
    /// The async iterable, until the first step takes its async iterator (`source`): as in an
    /// async generator, nothing of the source is touched before the iteration starts.
    chunks: Option<Py<PyAny>>,
    source: Option<Py<PyAny>>,
    finished: Option<Py<PyAny>>,
    at_end: Option<Py<PyAny>>,
    /// The events of the chunk read last (the list `feed` returned) and the index of the next
    /// one to hand out, read live as the sync `Drain` reads it.
    events: Option<Py<PyList>>,
    next: usize,
    /// The error (an `SSEError`) to raise once its events are out.
    pending: Option<Py<PyAny>>,
    /// The iterator of the awaitable a step delegates to: the source's `__anext__()` while a chunk
    /// is read, or (for an `aclose()` awaitable) the source's `aclose()`.
    awaiting: Option<Py<PyAny>>,
    started: bool,
    /// No further chunk is to be read (the source is exhausted, or `finished()` said so).
    reading_done: bool,
    /// This object is an `aclose()` awaitable: it returns what `awaiting` returns, then is over.
    closer: bool,
    /// A step is running (Python code it calls must not re-enter it).
    running: bool,
    /// What reading a chunk found out once (see [`Reads`]).
    reads: Reads,
}

/// What reading a chunk found out once about static types (a heap type's slots change when its
/// class attributes do; a static type's never): the source type and its `am_anext`, and a type
/// of the awaitables `__anext__()` returns whose `am_await` is `PyObject_SelfIter` and that is an
/// iterator (an async generator's `asend` object): such an awaitable is the iterator `await`
/// runs, found with no slot looked up and no `__await__` called. Types are compared by address:
/// a static type is never freed.
#[derive(Default)]
struct Reads {
    source_type: usize,
    anext: Option<ffi::unaryfunc>,
    own_iter_type: usize,
}

/// Whether `tp` is a static type (not a heap type).
///
/// # Safety
/// Attached, `tp` a live type.
unsafe fn is_static(tp: *mut ffi::PyTypeObject) -> bool {
    ffi::PyType_GetFlags(tp) & ffi::Py_TPFLAGS_HEAPTYPE == 0
}

impl State {
    /// The next event of the chunk in hand as a new reference, or NULL when they are all out.
    /// Drops nothing (the hot paths call it with no PyO3 attach count).
    fn next_event(&mut self) -> *mut ffi::PyObject {
        let Some(events) = &self.events else {
            return ptr::null_mut();
        };
        // SAFETY: the thread is attached (CPython called the slot); `events` is a list, so
        // PyList_Size cannot fail and PyList_GetItem in bounds returns a borrowed item.
        unsafe {
            if (self.next as ffi::Py_ssize_t) < ffi::PyList_Size(events.as_ptr()) {
                let event = ffi::PyList_GetItem(events.as_ptr(), self.next as ffi::Py_ssize_t);
                self.next += 1;
                ffi::Py_IncRef(event);
                return event;
            }
        }
        ptr::null_mut()
    }

    /// Over: nothing more is read or handed out, and `at_end` is not called.
    fn stop(&mut self) {
        self.feed = None;
        self.chunks = None;
        self.source = None;
        self.finished = None;
        self.at_end = None;
        self.events = None;
        self.next = 0;
        self.pending = None;
        self.awaiting = None;
        self.started = true;
        self.reading_done = true;
    }
}

/// What a step makes: a value the awaitable yields (`PYGEN_NEXT`, a future from the source) or
/// the value it returns (`PYGEN_RETURN`: the next event, or `None` for an `aclose()`).
enum Sent {
    Next(Py<PyAny>),
    Return(Py<PyAny>),
}

enum Input<'py> {
    Send(Bound<'py, PyAny>),
    Throw(PyErr),
    Close,
}

/// How the delegated-to iterator answered.
enum Delegated {
    Next(Py<PyAny>),
    Return(Py<PyAny>),
    Err(PyErr),
}

fn send_into(py: Python<'_>, iter: &Py<PyAny>, value: &Bound<'_, PyAny>) -> Delegated {
    let mut out: *mut ffi::PyObject = ptr::null_mut();
    // SAFETY: attached; both pointers are live references; `out` receives a new reference.
    let status = unsafe { ffi::PyIter_Send(iter.as_ptr(), value.as_ptr(), &mut out) };
    match status {
        ffi::PySendResult::PYGEN_NEXT => {
            Delegated::Next(unsafe { Bound::from_owned_ptr(py, out).unbind() })
        }
        ffi::PySendResult::PYGEN_RETURN => {
            Delegated::Return(unsafe { Bound::from_owned_ptr(py, out).unbind() })
        }
        ffi::PySendResult::PYGEN_ERROR => Delegated::Err(
            PyErr::take(py).unwrap_or_else(|| PyRuntimeError::new_err("PyIter_Send failed")),
        ),
    }
}

/// `iter.throw(err)` (or `iter.close()` for `None`), answered as `PyIter_Send` would: a
/// `StopIteration` is the iterator returning its value.
fn throw_into(py: Python<'_>, iter: &Py<PyAny>, err: Option<PyErr>) -> Delegated {
    let iter = iter.bind(py);
    let result = match err {
        Some(err) => match iter.getattr(intern!(py, "throw")) {
            Ok(throw) => throw.call1((err.into_value(py),)),
            // Nothing to pass it to: it is raised here (as `yield from` does).
            Err(_) => return Delegated::Err(err),
        },
        None => match iter.getattr(intern!(py, "close")) {
            Ok(close) => close.call0(),
            Err(_) => return Delegated::Return(py.None()),
        },
    };
    match result {
        Ok(value) => Delegated::Next(value.unbind()),
        Err(err) if err.is_instance_of::<PyStopIteration>(py) => {
            match err.value(py).getattr(intern!(py, "value")) {
                Ok(value) => Delegated::Return(value.unbind()),
                Err(err) => Delegated::Err(err),
            }
        }
        Err(err) => Delegated::Err(err),
    }
}

/// What the unary slot `slot` (`Py_am_anext`, `Py_am_await`) of `object`'s type returns (a new
/// reference), or a `TypeError` made by `missing` from the type's name when it has none.
fn call_slot<'py>(
    py: Python<'py>,
    object: &Bound<'py, PyAny>,
    slot: c_int,
    missing: fn(&str) -> String,
) -> PyResult<Bound<'py, PyAny>> {
    let tp = object.get_type();
    // SAFETY: attached; PyType_GetSlot takes static types since 3.10.
    let f = unsafe { ffi::PyType_GetSlot(tp.as_type_ptr(), slot) };
    if f.is_null() {
        return Err(PyTypeError::new_err(missing(&tp.name()?.to_string())));
    }
    // SAFETY: both slots are unaryfuncs returning a new reference or NULL with an error set.
    unsafe {
        let f: ffi::unaryfunc = std::mem::transmute(f);
        Bound::from_owned_ptr_or_err(py, f(object.as_ptr()))
    }
}

/// The iterator `await awaitable` runs, as CPython finds it (`_PyCoro_GetAwaitableIter`): a
/// coroutine (or a generator-based one) itself, else what its `__await__` returns.
fn await_iter<'py>(py: Python<'py>, awaitable: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let tp = awaitable.get_type();
    if tp.is(COROUTINE_TYPE.get(py)?) || tp.is(GENERATOR_TYPE.get(py)?) {
        return Ok(awaitable);
    }
    let iter = call_slot(py, &awaitable, ffi::Py_am_await, |name| {
        format!("'async for' received an invalid object from __anext__: {name}")
    })?;
    if unsafe { ffi::PyIter_Check(iter.as_ptr()) } == 0 {
        return Err(PyTypeError::new_err(format!(
            "__await__() returned non-iterator of type '{}'",
            iter.get_type().name()?
        )));
    }
    Ok(iter)
}

/// `source.__anext__()`'s awaitable iterator, with what `reads` knows (and learns) of static types.
fn anext_iter<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    reads: &mut Reads,
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: attached; `source` is live, so is its type; a cached `anext` is the `am_anext` of
    // the static type at `source_type`, a unaryfunc returning a new reference or NULL with an
    // error set.
    let awaitable = unsafe {
        let tp = ffi::Py_TYPE(source.as_ptr());
        match reads.anext {
            Some(anext) if reads.source_type == tp as usize => {
                Bound::from_owned_ptr_or_err(py, anext(source.as_ptr()))?
            }
            _ => {
                let awaitable = call_slot(py, source, ffi::Py_am_anext, |name| {
                    format!("'async for' requires an iterator with __anext__ method, got {name}")
                })?;
                if is_static(tp) {
                    let anext = ffi::PyType_GetSlot(tp, ffi::Py_am_anext);
                    reads.source_type = tp as usize;
                    reads.anext = Some(std::mem::transmute::<*mut c_void, ffi::unaryfunc>(anext));
                }
                awaitable
            }
        }
    };
    // SAFETY: attached; `awaitable` is live, so is its type. `PyObject_SelfIter` returns its
    // argument (a new reference): what `await` would run is the awaitable itself, and
    // `_PyCoro_GetAwaitableIter` would find it an iterator (checked, once per static type).
    unsafe {
        let tp = ffi::Py_TYPE(awaitable.as_ptr());
        if reads.own_iter_type == tp as usize {
            return Ok(awaitable);
        }
        let own = ffi::PyObject_SelfIter as unsafe extern "C" fn(_) -> _ as *mut c_void;
        if is_static(tp)
            && ffi::PyType_GetSlot(tp, ffi::Py_am_await) == own
            && ffi::PyIter_Check(awaitable.as_ptr()) != 0
        {
            reads.own_iter_type = tp as usize;
            return Ok(awaitable);
        }
    }
    await_iter(py, awaitable)
}

impl State {
    /// One step of the awaitable: `send(value)`, `throw(err)` or `close()`.
    fn step<'py>(&mut self, py: Python<'py>, mut input: Input<'py>) -> PyResult<Sent> {
        loop {
            if let Some(iter) = self.awaiting.take() {
                let answer = match input {
                    Input::Send(value) => send_into(py, &iter, &value),
                    Input::Throw(err) => throw_into(py, &iter, Some(err)),
                    Input::Close => {
                        // The read is abandoned: the source's awaitable is closed, and so is this
                        // iterator (what the source would have handed next is unknown).
                        let answer = throw_into(py, &iter, None);
                        self.stop();
                        return match answer {
                            Delegated::Err(err) => Err(err),
                            _ => Ok(Sent::Return(py.None())),
                        };
                    }
                };
                input = Input::Send(py.None().into_bound(py));
                match answer {
                    Delegated::Next(value) => {
                        self.awaiting = Some(iter);
                        return Ok(Sent::Next(value));
                    }
                    Delegated::Return(value) => {
                        drop(iter);
                        if self.closer {
                            self.stop();
                            return Ok(Sent::Return(value));
                        }
                        self.take_chunk(py, value)?;
                    }
                    Delegated::Err(err) => {
                        drop(iter);
                        if !self.closer && err.is_instance_of::<PyStopAsyncIteration>(py) {
                            self.reading_done = true;
                        } else {
                            self.stop();
                            return Err(err);
                        }
                    }
                }
                continue;
            }
            match input {
                Input::Throw(err) => {
                    self.stop();
                    return Err(err);
                }
                // Not suspended in a read: nothing to close.
                Input::Close => return Ok(Sent::Return(py.None())),
                Input::Send(_) => {}
            }
            if self.closer {
                self.stop();
                return Ok(Sent::Return(py.None()));
            }
            let event = self.next_event();
            if !event.is_null() {
                // SAFETY: a new reference.
                return Ok(Sent::Return(unsafe {
                    Bound::from_owned_ptr(py, event).unbind()
                }));
            }
            if let Some(err) = self.pending.take() {
                self.stop();
                return Err(PyErr::from_value(err.into_bound(py)));
            }
            if !self.started {
                self.started = true;
                if let Some(chunks) = self.chunks.take() {
                    // SAFETY: attached; a new reference or NULL with an error set.
                    match unsafe {
                        Bound::from_owned_ptr_or_err(py, ffi::PyObject_GetAIter(chunks.as_ptr()))
                    } {
                        Ok(source) => self.source = Some(source.unbind()),
                        Err(err) => {
                            self.stop();
                            return Err(err);
                        }
                    }
                }
            }
            let source = match &self.source {
                Some(source) if !self.reading_done => source.bind(py),
                _ => {
                    // Over: the last chunk's events are out.
                    let at_end = self.at_end.take();
                    self.stop();
                    if let Some(at_end) = at_end {
                        at_end.call0(py)?;
                    }
                    return Err(PyStopAsyncIteration::new_err(()));
                }
            };
            match anext_iter(py, source, &mut self.reads) {
                Ok(iter) => self.awaiting = Some(iter.unbind()),
                Err(err) => {
                    self.stop();
                    return Err(err);
                }
            }
        }
    }

    /// Feeds the chunk just read; its events (or the error's) are handed out next.
    fn take_chunk(&mut self, py: Python<'_>, chunk: Py<PyAny>) -> PyResult<()> {
        let Some(feed) = &self.feed else {
            self.stop();
            return Ok(());
        };
        match feed.call(py, chunk.bind(py)) {
            Ok(events) => {
                let events = match events.cast_into::<PyList>() {
                    Ok(events) => events,
                    Err(err) => {
                        self.stop();
                        return Err(err.into());
                    }
                };
                self.events = Some(events.unbind());
                self.next = 0;
                if let Some(finished) = &self.finished {
                    let done = finished.call0(py).and_then(|f| f.is_truthy(py));
                    match done {
                        Ok(true) => self.reading_done = true,
                        Ok(false) => {}
                        Err(err) => {
                            self.stop();
                            return Err(err);
                        }
                    }
                }
                Ok(())
            }
            Err(err) if err.is_instance(py, SSE_ERROR.get(py)?) => {
                let value = err.into_value(py).into_any();
                let events = value
                    .bind(py)
                    .getattr(intern!(py, "events"))
                    .and_then(|events| {
                        PyList::new(py, events.try_iter()?.collect::<PyResult<Vec<_>>>()?)
                    });
                match events {
                    Ok(events) => {
                        self.events = Some(events.unbind());
                        self.next = 0;
                        self.pending = Some(value);
                        self.reading_done = true;
                        Ok(())
                    }
                    Err(err) => {
                        self.stop();
                        Err(err)
                    }
                }
            }
            Err(err) => {
                self.stop();
                Err(err)
            }
        }
    }
}

/// The state of `slf`, which is an `AsyncDrain`.
unsafe fn state<'a>(slf: *mut ffi::PyObject) -> &'a mut State {
    &mut (*(slf as *mut AsyncDrain)).state
}

/// Runs a step unless one is running already (Python code a step calls re-entering it).
unsafe fn run<'py>(slf: *mut ffi::PyObject, py: Python<'py>, input: Input<'py>) -> PyResult<Sent> {
    let state = state(slf);
    if state.running {
        return Err(PyValueError::new_err("AsyncDrain is already running"));
    }
    state.running = true;
    let result = state.step(py, input);
    state.running = false;
    result
}

/// `return value` as the iterator protocol says it: `StopIteration(value)`, set unnormalised as
/// CPython's generators do (a tuple or an exception would be taken for the arguments or the
/// instance, so those are wrapped first). `value` is borrowed.
unsafe fn set_stop_iteration(value: *mut ffi::PyObject) {
    if ffi::PyTuple_Check(value) != 0 || ffi::PyExceptionInstance_Check(value) != 0 {
        Python::attach_unchecked(|py| {
            let value = Bound::from_borrowed_ptr(py, value);
            match PyStopIteration::type_object(py).call1((value,)) {
                Ok(exc) => ffi::PyErr_SetObject(ffi::PyExc_StopIteration, exc.as_ptr()),
                Err(err) => err.restore(py),
            }
        })
    } else {
        ffi::PyErr_SetObject(ffi::PyExc_StopIteration, value);
    }
}

/// A step's result as `tp_iternext` / `send` / `throw` return it.
unsafe fn as_iternext(py: Python<'_>, result: PyResult<Sent>) -> *mut ffi::PyObject {
    match result {
        Ok(Sent::Next(value)) => value.into_ptr(),
        Ok(Sent::Return(value)) => {
            set_stop_iteration(value.as_ptr());
            ptr::null_mut()
        }
        Err(err) => {
            err.restore(py);
            ptr::null_mut()
        }
    }
}

unsafe extern "C" fn am_send(
    slf: *mut ffi::PyObject,
    arg: *mut ffi::PyObject,
    result: *mut *mut ffi::PyObject,
) -> ffi::PySendResult {
    // The hot path: the next event of the chunk in hand, returned with no exception at all.
    let st = state(slf);
    if !st.running && st.awaiting.is_none() && arg == ffi::Py_None() {
        let event = st.next_event();
        if !event.is_null() {
            *result = event;
            return ffi::PySendResult::PYGEN_RETURN;
        }
    }
    // Python::attach_unchecked (not assume_attached) wherever a `Py` may be dropped: PyO3 defers
    // the decref of a `Py` dropped without its attach count raised, and the deferred objects
    // would live (and be traversed by every GC pass) until PyO3 is next entered. (`unchecked`:
    // the thread is attached, CPython called it; `attach` would panic, an abort here, while the
    // interpreter finalises from 3.13.)
    Python::attach_unchecked(|py| {
        let arg = Bound::from_borrowed_ptr(py, arg);
        match run(slf, py, Input::Send(arg)) {
            Ok(Sent::Next(value)) => {
                *result = value.into_ptr();
                ffi::PySendResult::PYGEN_NEXT
            }
            Ok(Sent::Return(value)) => {
                *result = value.into_ptr();
                ffi::PySendResult::PYGEN_RETURN
            }
            Err(err) => {
                err.restore(py);
                *result = ptr::null_mut();
                ffi::PySendResult::PYGEN_ERROR
            }
        }
    })
}

unsafe extern "C" fn tp_iternext(slf: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // The hot path from 3.12 (SEND calls tp_iternext): a bare StopIteration(event).
    let st = state(slf);
    if !st.running && st.awaiting.is_none() {
        let event = st.next_event();
        if !event.is_null() {
            set_stop_iteration(event);
            ffi::Py_DecRef(event);
            return ptr::null_mut();
        }
    }
    Python::attach_unchecked(|py| {
        let none = py.None().into_bound(py);
        as_iternext(py, run(slf, py, Input::Send(none)))
    })
}

unsafe extern "C" fn meth_send(
    slf: *mut ffi::PyObject,
    arg: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    Python::attach_unchecked(|py| {
        let arg = Bound::from_borrowed_ptr(py, arg);
        as_iternext(py, run(slf, py, Input::Send(arg)))
    })
}

/// `throw(value)` or the older `throw(type[, value[, traceback]])`.
unsafe extern "C" fn meth_throw(
    slf: *mut ffi::PyObject,
    args: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    Python::attach_unchecked(|py| throw(py, slf, args))
}

unsafe fn throw(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    args: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    let args = Bound::from_borrowed_ptr(py, args);
    let err = (|| -> PyResult<PyErr> {
        let n = args.len()?;
        if !(1..=3).contains(&n) {
            return Err(PyTypeError::new_err(format!(
                "throw expected 1 to 3 arguments, got {n}"
            )));
        }
        let typ = args.get_item(0)?;
        let val = if n > 1 { Some(args.get_item(1)?) } else { None };
        let tb = if n > 2 { Some(args.get_item(2)?) } else { None };
        let exc = if typ.is_instance_of::<pyo3::exceptions::PyBaseException>() {
            typ
        } else if let Ok(cls) = typ.cast::<PyType>() {
            match val {
                Some(val) if val.is_instance(cls)? => val,
                Some(val) if val.is_none() => cls.call0()?,
                Some(val) if val.is_instance_of::<pyo3::types::PyTuple>() => {
                    cls.call1(val.cast_into::<pyo3::types::PyTuple>()?)?
                }
                Some(val) => cls.call1((val,))?,
                None => cls.call0()?,
            }
        } else {
            return Err(PyTypeError::new_err(
                "exceptions must be classes or instances deriving from BaseException",
            ));
        };
        if !exc.is_instance_of::<pyo3::exceptions::PyBaseException>() {
            return Err(PyTypeError::new_err(
                "exceptions must be classes or instances deriving from BaseException",
            ));
        }
        if let Some(tb) = tb.filter(|tb| !tb.is_none()) {
            exc.setattr(intern!(py, "__traceback__"), tb)?;
        }
        Ok(PyErr::from_value(exc))
    })();
    match err {
        Ok(err) => as_iternext(py, run(slf, py, Input::Throw(err))),
        Err(err) => {
            err.restore(py);
            ptr::null_mut()
        }
    }
}

unsafe extern "C" fn meth_close(
    slf: *mut ffi::PyObject,
    _: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    Python::attach_unchecked(|py| match run(slf, py, Input::Close) {
        Ok(_) => py.None().into_ptr(),
        Err(err) => {
            err.restore(py);
            ptr::null_mut()
        }
    })
}

/// `aclose()`: an awaitable that closes the source (`source.aclose()`, if it has one) when the
/// iteration has started and is not over, as closing an async generator suspended at a yield
/// does; the events not handed out yet are dropped, and `at_end` is not called.
unsafe extern "C" fn meth_aclose(
    slf: *mut ffi::PyObject,
    _: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    Python::attach_unchecked(|py| aclose(py, slf))
}

unsafe fn aclose(py: Python<'_>, slf: *mut ffi::PyObject) -> *mut ffi::PyObject {
    let result = (|| -> PyResult<Py<PyAny>> {
        let st = state(slf);
        if st.running || st.awaiting.is_some() {
            return Err(PyRuntimeError::new_err(
                "aclose(): asynchronous generator is already running",
            ));
        }
        let source = st.source.take();
        st.stop();
        let mut awaiting = None;
        if let Some(source) = source {
            if let Ok(aclose) = source.bind(py).getattr(intern!(py, "aclose")) {
                awaiting = Some(await_iter(py, aclose.call0()?)?.unbind());
            }
        }
        let closer = new_object(
            py,
            State {
                awaiting,
                closer: true,
                started: true,
                ..State::empty()
            },
        )?;
        Ok(closer)
    })();
    match result {
        Ok(closer) => closer.into_ptr(),
        Err(err) => {
            err.restore(py);
            ptr::null_mut()
        }
    }
}

unsafe extern "C" fn return_self(slf: *mut ffi::PyObject) -> *mut ffi::PyObject {
    ffi::Py_IncRef(slf);
    slf
}

unsafe extern "C" fn tp_traverse(
    slf: *mut ffi::PyObject,
    visit: ffi::visitproc,
    arg: *mut c_void,
) -> c_int {
    // A heap type's instances keep it alive: visited since CPython 3.9.
    let r = visit(ffi::Py_TYPE(slf) as *mut ffi::PyObject, arg);
    if r != 0 {
        return r;
    }
    let st = state(slf);
    for object in [
        st.feed.as_ref().map(OneArg::callable),
        st.chunks.as_ref(),
        st.source.as_ref(),
        st.finished.as_ref(),
        st.at_end.as_ref(),
        st.pending.as_ref(),
        st.awaiting.as_ref(),
    ]
    .into_iter()
    .flatten()
    {
        let r = visit(object.as_ptr(), arg);
        if r != 0 {
            return r;
        }
    }
    if let Some(events) = &st.events {
        let r = visit(events.as_ptr(), arg);
        if r != 0 {
            return r;
        }
    }
    0
}

unsafe extern "C" fn tp_clear(slf: *mut ffi::PyObject) -> c_int {
    // Moved out first, then dropped: a finaliser the drops run sees a consistent (empty) state.
    Python::attach_unchecked(|_| {
        let old = std::mem::replace(state(slf), State::empty());
        drop(old);
    });
    0
}

unsafe extern "C" fn tp_dealloc(slf: *mut ffi::PyObject) {
    ffi::PyObject_GC_UnTrack(slf as *mut c_void);
    Python::attach_unchecked(|_| ptr::drop_in_place(state(slf)));
    let tp = ffi::Py_TYPE(slf);
    let free = ffi::PyType_GetSlot(tp, ffi::Py_tp_free);
    let free: ffi::freefunc = std::mem::transmute(free);
    free(slf as *mut c_void);
    ffi::Py_DecRef(tp as *mut ffi::PyObject);
}

impl State {
    fn empty() -> State {
        State {
            feed: None,
            chunks: None,
            source: None,
            finished: None,
            at_end: None,
            events: None,
            next: 0,
            pending: None,
            awaiting: None,
            started: false,
            reading_done: false,
            closer: false,
            running: false,
            reads: Reads::default(),
        }
    }
}

const DOC: &std::ffi::CStr = c"AsyncDrain(feed, chunks, finished=None, at_end=None)\n--\n\n\
What `feed` makes of each chunk of the async iterable `chunks`, event by event, as an async \
iterator (the async twin of Drain): `finished()` (None: never) stops the reading, `at_end()` \
runs once the last events are out; an SSEError's events come before it. `aclose()` closes the \
source. Its own awaitable: `__anext__()` returns the iterator itself.";

fn async_drain_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    ASYNC_DRAIN_TYPE
        .get_or_try_init(py, || {
            // The method table and slots must outlive the type: leaked once per process.
            let methods: &'static mut [ffi::PyMethodDef] = Box::leak(Box::new([
                ffi::PyMethodDef {
                    ml_name: c"send".as_ptr(),
                    ml_meth: ffi::PyMethodDefPointer { PyCFunction: meth_send },
                    ml_flags: ffi::METH_O,
                    ml_doc: c"send(value): the next step of the awaitable.".as_ptr(),
                },
                ffi::PyMethodDef {
                    ml_name: c"throw".as_ptr(),
                    ml_meth: ffi::PyMethodDefPointer { PyCFunction: meth_throw },
                    ml_flags: ffi::METH_VARARGS,
                    ml_doc: c"throw(exc): raises exc where the awaitable is suspended (in the source's read)."
                        .as_ptr(),
                },
                ffi::PyMethodDef {
                    ml_name: c"close".as_ptr(),
                    ml_meth: ffi::PyMethodDefPointer { PyCFunction: meth_close },
                    ml_flags: ffi::METH_NOARGS,
                    ml_doc: c"close(): closes the read in progress, if any, and ends the iteration."
                        .as_ptr(),
                },
                ffi::PyMethodDef {
                    ml_name: c"aclose".as_ptr(),
                    ml_meth: ffi::PyMethodDefPointer { PyCFunction: meth_aclose },
                    ml_flags: ffi::METH_NOARGS,
                    ml_doc: c"aclose(): an awaitable that ends the iteration and closes the source."
                        .as_ptr(),
                },
                ffi::PyMethodDef::zeroed(),
            ]));
            let slot = |slot: c_int, pfunc: *mut c_void| ffi::PyType_Slot { slot, pfunc };
            let slots: &'static mut [ffi::PyType_Slot] = Box::leak(Box::new([
                slot(ffi::Py_tp_doc, DOC.as_ptr() as *mut c_void),
                slot(ffi::Py_tp_dealloc, tp_dealloc as *mut c_void),
                slot(ffi::Py_tp_traverse, tp_traverse as *mut c_void),
                slot(ffi::Py_tp_clear, tp_clear as *mut c_void),
                slot(ffi::Py_tp_iter, return_self as *mut c_void),
                slot(ffi::Py_tp_iternext, tp_iternext as *mut c_void),
                slot(ffi::Py_tp_methods, methods.as_mut_ptr() as *mut c_void),
                slot(ffi::Py_am_aiter, return_self as *mut c_void),
                slot(ffi::Py_am_anext, return_self as *mut c_void),
                slot(ffi::Py_am_await, return_self as *mut c_void),
                slot(ffi::Py_am_send, am_send as *mut c_void),
                ffi::PyType_Slot::default(),
            ]));
            let spec: &'static mut ffi::PyType_Spec = Box::leak(Box::new(ffi::PyType_Spec {
                name: c"rapidsse._rapidsse.AsyncDrain".as_ptr(),
                basicsize: std::mem::size_of::<AsyncDrain>() as c_int,
                itemsize: 0,
                flags: (ffi::Py_TPFLAGS_DEFAULT | ffi::Py_TPFLAGS_HAVE_GC) as _,
                slots: slots.as_mut_ptr(),
            }));
            // SAFETY: attached; the spec and its tables are 'static.
            let tp = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyType_FromSpec(spec))? };
            Ok::<_, PyErr>(tp.cast_into::<PyType>()?.unbind())
        })
        .map(|tp| tp.bind(py))
}

fn new_object(py: Python<'_>, state: State) -> PyResult<Py<PyAny>> {
    let tp = async_drain_type(py)?;
    // SAFETY: attached; tp_alloc returns a zeroed, GC-tracked object of basicsize (or NULL with an
    // error set), whose state is written before any Python code can see it.
    unsafe {
        let tp_ptr = tp.as_type_ptr();
        let alloc = ffi::PyType_GetSlot(tp_ptr, ffi::Py_tp_alloc);
        let alloc: ffi::allocfunc = std::mem::transmute(alloc);
        let obj = alloc(tp_ptr, 0);
        if obj.is_null() {
            return Err(PyErr::take(py)
                .unwrap_or_else(|| PyRuntimeError::new_err("AsyncDrain allocation failed")));
        }
        ptr::write(state_ptr(obj), state);
        Ok(Bound::from_owned_ptr(py, obj).unbind())
    }
}

unsafe fn state_ptr(obj: *mut ffi::PyObject) -> *mut State {
    ptr::addr_of_mut!((*(obj as *mut AsyncDrain)).state)
}

/// `AsyncDrain(feed, chunks, finished=None, at_end=None)`: see the type's doc.
#[pyfunction]
#[pyo3(name = "AsyncDrain", signature = (feed, chunks, finished = None, at_end = None))]
pub fn async_drain(
    py: Python<'_>,
    feed: Py<PyAny>,
    chunks: Py<PyAny>,
    finished: Option<Py<PyAny>>,
    at_end: Option<Py<PyAny>>,
) -> PyResult<Py<PyAny>> {
    new_object(
        py,
        State {
            feed: Some(OneArg::new(py, feed)),
            chunks: Some(chunks),
            finished,
            at_end,
            ..State::empty()
        },
    )
}

/// Adds the type (for isinstance checks and its doc) to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("AsyncDrainType", async_drain_type(py)?)?;
    Ok(())
}
