//! `EventDecoder`: framing plus one msgspec call per chunk for the typed events.
//!
//! With a [`NativeSchema`], each one-line payload is first offered to the Struct builder
//! (`native.rs`); only what it declines goes into the batch.
//!
//! A stream starts optimistic: every one-line payload of a chunk goes into the batch without a
//! look at its type. If msgspec refuses the batch (an unknown type, bad JSON), the chunk is
//! routed by type ([`Router`]) and decoded again, and the rest of the stream is routed from the
//! start: a clean stream pays no routing, a stream with unknown types pays it once per event.

use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyList};

use std::sync::Arc;

use super::framing::{framing_error, StringCache};
use super::native::{self, NativeSchema};
use super::with_bytes;
use crate::batch::{Batch, Route, Router};
use crate::framing::Framer;

/// Where one event of the current chunk went.
enum Planned {
    /// In the batch at `span` of the batch buffer.
    Batched {
        span: (usize, usize),
        name: (usize, usize),
        index: u64,
        offset: u64,
    },
    /// Built by Rust itself (see `native.rs`).
    Native(Py<PyAny>),
    /// Decoded alone by the careful path.
    Careful {
        raw: Vec<u8>,
        name: (usize, usize),
        index: u64,
        offset: u64,
    },
}

/// The `type` tags of a tagged protocol, as its decoders route by them: built once per protocol
/// (`rapidsse.decoding` keeps one) and shared by every decoder made with it, so that a stream's
/// decoder does not build a set of its own (for the Responses API's 63 types that was two
/// thirds of making a decoder).
#[pyclass(module = "rapidsse._rapidsse", frozen)]
pub struct KnownTypes {
    router: Router,
}

#[pymethods]
impl KnownTypes {
    #[new]
    fn new(tags: Vec<String>) -> KnownTypes {
        KnownTypes {
            router: Router::tagged(tags),
        }
    }
}

/// Push-style typed-event decoder (the Rust core of `rapidsse.EventDecoder`).
///
/// `batch_decode(lines: bytes, count: int) -> list` decodes `count` JSON lines, one event a line
/// (`rapidsse._wire.wrap_lines`, which raises on any other count);
/// `careful(raw: bytes, event: str, index: int, offset: int) -> event | None` decodes one payload
/// the batch could not take, applying the `on_error` policy (it may raise `DecodeError`).
#[pyclass(module = "rapidsse._rapidsse")]
pub struct EventDecoder {
    framer: Framer,
    router: Router,
    done_marker: Option<Vec<u8>>,
    batch_decode: Py<PyAny>,
    careful: Py<PyAny>,
    strings: StringCache,
    batch: Batch,
    names: Vec<u8>,
    plan: Vec<Planned>,
    done: bool,
    /// Batch every one-line payload without looking at its type: msgspec's decode fails on an
    /// unknown type, and then the chunk is routed (and so is the rest of the stream).
    optimistic: bool,
    /// Whether the current chunk was batched that way.
    unrouted: bool,
    /// The batch as msgspec reads it, reused from chunk to chunk: no bytes object is made per
    /// chunk.
    lines: Py<PyByteArray>,
    /// The classes Rust builds itself, and this stream's state for them.
    native: Option<(Arc<native::Schema>, native::State)>,
}

impl EventDecoder {
    fn decode_batch<'py>(&mut self, py: Python<'py>) -> Option<Bound<'py, PyList>> {
        let lines = self.batch.as_bytes()?;
        let buffer = self.lines.bind(py);
        // One reference is ours (the field); more, or a failed resize (a live buffer export),
        // mean something kept it: then a fresh one takes over.
        // SAFETY: `buffer` is a live object.
        let shared = unsafe { pyo3::ffi::Py_REFCNT(buffer.as_ptr()) } > 1;
        if !shared && buffer.resize(lines.len()).is_ok() {
            // SAFETY: no Python code runs while the bytes are written, and the length was just
            // set to `lines.len()`.
            unsafe { buffer.as_bytes_mut().copy_from_slice(lines) };
        } else {
            let fresh = PyByteArray::new(py, lines);
            self.lines = fresh.unbind();
        }
        let decoded = self
            .batch_decode
            .bind(py)
            .call1((self.lines.bind(py), self.batch.len()))
            .ok()?;
        let list = decoded.cast_into::<PyList>().ok()?;
        // One event a line, or the call failed; a count mismatch (a batch decoder that broke that
        // promise) sends the payloads the careful way too.
        (list.len() == self.batch.len()).then_some(list)
    }

    fn careful_one<'py>(
        &mut self,
        py: Python<'py>,
        raw: &[u8],
        name: (usize, usize),
        index: u64,
        offset: u64,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let name = self.strings.event_name(py, &self.names[name.0..name.1])?;
        let result = self
            .careful
            .bind(py)
            .call1((PyBytes::new(py, raw), name, index, offset))?;
        Ok((!result.is_none()).then_some(result))
    }

    /// Turns this chunk's plan into the list of events, in stream order. On an error, `out`
    /// holds the events before it.
    fn build<'py>(
        &mut self,
        py: Python<'py>,
        out: &mut Option<Bound<'py, PyList>>,
    ) -> PyResult<()> {
        if self.plan.is_empty() {
            return Ok(());
        }
        if self.batch.is_empty()
            && self
                .plan
                .iter()
                .all(|entry| matches!(entry, Planned::Native(_)))
        {
            // Every event was built natively (the usual case for a clean stream): the list
            // takes them over from the plan.
            let natives = self.plan.drain(..).map(|entry| match entry {
                Planned::Native(obj) => obj,
                _ => unreachable!("checked above"),
            });
            *out = Some(PyList::new(py, natives)?);
            return Ok(());
        }
        let mut decoded = self.decode_batch(py);
        if decoded.is_none() && self.unrouted && !self.batch.is_empty() {
            // Something in the batch did not decode (an unknown type, most likely): route
            // this chunk's payloads as usual, and the stream's from now on.
            self.optimistic = false;
            self.reroute();
            decoded = self.decode_batch(py);
        }
        if let Some(list) = &decoded {
            if self.plan.len() == self.batch.len() {
                // The usual case: msgspec's list is the answer.
                *out = Some(list.clone());
                return Ok(());
            }
        }
        let out = out.insert(PyList::empty(py));
        let plan = std::mem::take(&mut self.plan);
        let mut next = 0usize;
        let mut result = Ok(());
        for entry in &plan {
            let item = match entry {
                Planned::Batched {
                    span,
                    name,
                    index,
                    offset,
                } => match &decoded {
                    Some(list) => {
                        next += 1;
                        Ok(Some(list.get_item(next - 1)?))
                    }
                    None => {
                        let raw = self.batch_raw(*span);
                        self.careful_one(py, &raw, *name, *index, *offset)
                    }
                },
                Planned::Native(obj) => Ok(Some(obj.bind(py).clone())),
                Planned::Careful {
                    raw,
                    name,
                    index,
                    offset,
                } => self.careful_one(py, raw, *name, *index, *offset),
            };
            match item {
                Ok(Some(event)) => out.append(event)?,
                Ok(None) => {}
                Err(err) => {
                    result = Err(err);
                    break;
                }
            }
        }
        self.plan = plan;
        result
    }

    /// Routes the payloads batched without a look at their type.
    fn reroute(&mut self) {
        let unrouted = std::mem::take(&mut self.batch);
        let plan = std::mem::take(&mut self.plan);
        let bytes = unrouted.as_bytes().unwrap_or_default();
        for entry in plan {
            self.plan.push(match entry {
                Planned::Batched {
                    span,
                    name,
                    index,
                    offset,
                } => {
                    let raw = &bytes[span.0..span.1];
                    match self.router.route(raw, false) {
                        Route::Batch => {
                            let start = self.batch.as_bytes().map_or(0, |b| b.len() + 1);
                            self.batch.push(raw);
                            Planned::Batched {
                                span: (start, start + raw.len()),
                                name,
                                index,
                                offset,
                            }
                        }
                        Route::Careful => Planned::Careful {
                            raw: raw.to_vec(),
                            name,
                            index,
                            offset,
                        },
                    }
                }
                careful => careful,
            });
        }
        self.unrouted = false;
    }

    fn batch_raw(&self, span: (usize, usize)) -> Vec<u8> {
        self.batch
            .as_bytes()
            .map(|b| b[span.0..span.1].to_vec())
            .unwrap_or_default()
    }
}

#[pymethods]
impl EventDecoder {
    #[new]
    #[pyo3(signature = (max_event_size, known_types, batch_decode, careful, done_marker = None, native = None))]
    fn new(
        py: Python<'_>,
        max_event_size: Option<usize>,
        known_types: Option<PyRef<'_, KnownTypes>>,
        batch_decode: Py<PyAny>,
        careful: Py<PyAny>,
        done_marker: Option<Vec<u8>>,
        native: Option<PyRef<'_, NativeSchema>>,
    ) -> EventDecoder {
        let lines = PyByteArray::new(py, b"");
        EventDecoder {
            framer: Framer::new(max_event_size),
            router: match known_types {
                Some(known) => known.router.clone(),
                None => Router::untagged(),
            },
            done_marker,
            batch_decode,
            careful,
            strings: StringCache::new(),
            batch: Batch::new(),
            names: Vec::new(),
            plan: Vec::new(),
            done: false,
            optimistic: true,
            unrouted: false,
            lines: lines.clone().unbind(),
            native: native.map(|n| (n.schema.clone(), n.schema.state())),
        }
    }

    /// Feeds one chunk; returns the typed events it completed, in order.
    fn feed<'py>(
        &mut self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        if self.done {
            return Ok(PyList::empty(py));
        }
        self.batch.clear();
        self.names.clear();
        self.plan.clear();
        self.unrouted = self.optimistic;
        let framed = with_bytes(data, |bytes| {
            let Self {
                framer,
                router,
                done_marker,
                batch,
                names,
                plan,
                done,
                unrouted,
                native,
                ..
            } = self;
            let unrouted = *unrouted;
            Ok(framer.feed(bytes, |e| {
                if *done {
                    return;
                }
                if done_marker.as_deref() == Some(e.data) {
                    *done = true;
                    return;
                }
                if let Some((schema, state)) = native {
                    if !e.multiline {
                        if let Some(obj) = schema.decode(py, state, e.data) {
                            plan.push(Planned::Native(obj.unbind()));
                            return;
                        }
                    }
                }
                let name = (names.len(), names.len() + e.event.len());
                names.extend_from_slice(e.event);
                let route = if unrouted {
                    Router::untagged_route(e.data, e.multiline)
                } else {
                    router.route(e.data, e.multiline)
                };
                match route {
                    Route::Batch => {
                        let start = batch.as_bytes().map_or(0, |b| b.len() + 1);
                        batch.push(e.data);
                        let span = (start, start + e.data.len());
                        plan.push(Planned::Batched {
                            span,
                            name,
                            index: e.index,
                            offset: e.offset,
                        });
                    }
                    Route::Careful => plan.push(Planned::Careful {
                        raw: e.data.to_vec(),
                        name,
                        index: e.index,
                        offset: e.offset,
                    }),
                }
            }))
        })?;
        let mut out = None;
        let built = self.build(py, &mut out);
        let out = out.unwrap_or_else(|| PyList::empty(py));
        match (built, framed) {
            (Err(err), _) => {
                err.value(py).setattr("events", &out)?;
                Err(err)
            }
            // Input after `[DONE]` is ignored, an oversized tail included.
            (Ok(()), Err(_)) if self.done => Ok(out),
            (Ok(()), Err(err)) => Err(framing_error(py, err, out.into_any().unbind())),
            (Ok(()), Ok(())) => Ok(out),
        }
    }

    /// Ends the stream (an unfinished event is discarded). Returns `[]`.
    fn close<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyList> {
        self.framer.close();
        self.done = false;
        PyList::empty(py)
    }

    /// Starts a new stream (after an `EventTooLarge`, or to reuse the decoder).
    fn reset(&mut self) {
        self.framer.reset();
        self.done = false;
    }

    /// Whether the end-of-stream marker (`data: [DONE]`) was seen.
    #[getter]
    fn done(&self) -> bool {
        self.done
    }

    /// Whether the end-of-stream marker was seen: what iterators ask after every chunk (a
    /// method call costs less than a lambda reading `done`).
    fn finished(&self) -> bool {
        self.done
    }

    #[getter]
    fn last_event_id<'py>(
        &mut self,
        py: Python<'py>,
    ) -> PyResult<Bound<'py, pyo3::types::PyString>> {
        let generation = self.framer.id_generation();
        self.strings.id(py, self.framer.last_event_id(), generation)
    }
}
