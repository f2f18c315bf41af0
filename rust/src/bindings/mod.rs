//! The PyO3 binding layer: converts types and raises exceptions; the work is done by the core.

/// The extension's Rust allocations go to mimalloc: a short stream's tap makes and frees many
/// small maps and strings (a choice, a tool call, the first chunk's top level), and glibc's
/// malloc and free were a seventh of its instructions. Python's own objects keep Python's
/// allocator; only what the Rust core allocates is mimalloc's.
#[global_allocator]
static ALLOCATOR: MiMalloc = MiMalloc;

/// mimalloc's plain entry points for what needs no more than word alignment (every block
/// mimalloc hands out is word-aligned), its aligned ones for the rest. The `mimalloc` crate calls
/// the aligned ones always; the plain ones took the Chat tap over the corpus from 8.96M to 8.80M
/// instructions per pass (the other taps, whose allocations are few, did not move).
struct MiMalloc;

/// The alignment every mimalloc block has.
const WORD: usize = std::mem::size_of::<usize>();

// SAFETY: each method forwards to mimalloc's matching function, which returns null on failure
// and otherwise a block of at least `size` bytes aligned to `align` (a block is word-aligned, so
// the plain functions serve alignments up to a word); `dealloc` and `realloc` get pointers this
// allocator returned.
unsafe impl std::alloc::GlobalAlloc for MiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        use libmimalloc_sys::{mi_malloc, mi_malloc_aligned};
        if layout.align() <= WORD {
            mi_malloc(layout.size()).cast()
        } else {
            mi_malloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        use libmimalloc_sys::{mi_zalloc, mi_zalloc_aligned};
        if layout.align() <= WORD {
            mi_zalloc(layout.size()).cast()
        } else {
            mi_zalloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: std::alloc::Layout) {
        libmimalloc_sys::mi_free(ptr.cast());
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        use libmimalloc_sys::{mi_realloc, mi_realloc_aligned};
        if layout.align() <= WORD {
            mi_realloc(ptr.cast(), new_size).cast()
        } else {
            mi_realloc_aligned(ptr.cast(), new_size, layout.align()).cast()
        }
    }
}

mod accumulate;
mod adrain;
mod decoding;
mod drain;
mod framing;
mod measure;
mod native;
mod net;
mod serve;
mod structs;
mod wire;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

/// A Python attribute imported once, on first use.
pub(crate) struct Imported {
    cell: PyOnceLock<Py<PyAny>>,
    module: &'static str,
    name: &'static str,
}

impl Imported {
    pub(crate) const fn new(module: &'static str, name: &'static str) -> Imported {
        Imported {
            cell: PyOnceLock::new(),
            module,
            name,
        }
    }

    pub(crate) fn get<'py>(&self, py: Python<'py>) -> PyResult<&Bound<'py, PyAny>> {
        self.cell.import(py, self.module, self.name)
    }
}

pub(crate) static SSE_ERROR: Imported = Imported::new("rapidsse.errors", "SSEError");
pub(crate) static EVENT_TOO_LARGE: Imported = Imported::new("rapidsse.errors", "EventTooLarge");

/// Builds `exc_type(message, **kwargs)` as a `PyErr`.
pub(crate) fn error_from(
    py: Python<'_>,
    exc_type: &Imported,
    message: String,
    kwargs: &[(&str, Py<PyAny>)],
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = exc_type.get(py)?;
        let kw = pyo3::types::PyDict::new(py);
        for (k, v) in kwargs {
            kw.set_item(k, v)?;
        }
        let exc = cls.call((message,), Some(&kw))?;
        Ok(PyErr::from_value(exc))
    };
    build().unwrap_or_else(|e| e)
}

/// A callable of one argument that a drain calls once per chunk (its `feed`). A builtin method of
/// one argument (`METH_O`: the accumulators' direct methods) or of the fast-call convention
/// (`METH_FASTCALL | METH_KEYWORDS`: PyO3's methods, such as a decoder's `feed`) is called through
/// its C function, as its own vectorcall calls it, with what it is bound to: a builtin method's
/// function, flags and object never change, so they are read once. Anything else is called by
/// `PyObject_CallFunctionObjArgs`. No argument tuple is made either way.
pub(crate) struct OneArg {
    f: Py<PyAny>,
    direct: Direct,
}

#[derive(Clone, Copy)]
enum Direct {
    None,
    /// The function (a `PyCFunction`) and the object it is bound to (borrowed from `f`).
    O(ffi::PyCFunction, usize),
    Fast(ffi::PyCFunctionFastWithKeywords, usize),
}

impl OneArg {
    pub(crate) fn new(_py: Python<'_>, f: Py<PyAny>) -> OneArg {
        let ptr = f.as_ptr();
        // SAFETY: attached (`_py`); `ptr` is a live object. The getters are called on a builtin
        // function only, and its function pointer is the one its flags say.
        let direct = unsafe {
            if ffi::PyCFunction_Check(ptr) == 0 {
                Direct::None
            } else {
                // `METH_COEXIST` says how a type's slots are filled, not how a call is made.
                let flags = ffi::PyCFunction_GetFlags(ptr) & !ffi::METH_COEXIST;
                let bound = ffi::PyCFunction_GetSelf(ptr) as usize;
                match ffi::PyCFunction_GetFunction(ptr) {
                    Some(function) if bound != 0 && flags == ffi::METH_O => {
                        Direct::O(function, bound)
                    }
                    Some(function)
                        if bound != 0 && flags == ffi::METH_FASTCALL | ffi::METH_KEYWORDS =>
                    {
                        Direct::Fast(
                            std::mem::transmute::<ffi::PyCFunction, ffi::PyCFunctionFastWithKeywords>(
                                function,
                            ),
                            bound,
                        )
                    }
                    _ => Direct::None,
                }
            }
        };
        OneArg { f, direct }
    }

    /// The callable itself (for the GC's traversal).
    pub(crate) fn callable(&self) -> &Py<PyAny> {
        &self.f
    }

    /// `f(arg)`: a new reference, or the error it raised.
    pub(crate) fn call<'py>(
        &self,
        py: Python<'py>,
        arg: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // SAFETY: attached; `bound` is the object `f` (alive, held here) is bound to; each
        // function is called with the arguments of its convention and returns a new reference,
        // or NULL with an exception set; the argument list is NULL-terminated.
        unsafe {
            let out = match self.direct {
                Direct::O(function, bound) => function(bound as *mut ffi::PyObject, arg.as_ptr()),
                Direct::Fast(function, bound) => {
                    let args = [arg.as_ptr()];
                    function(
                        bound as *mut ffi::PyObject,
                        args.as_ptr(),
                        1,
                        std::ptr::null_mut(),
                    )
                }
                Direct::None => ffi::PyObject_CallFunctionObjArgs(
                    self.f.as_ptr(),
                    arg.as_ptr(),
                    std::ptr::null_mut::<ffi::PyObject>(),
                ),
            };
            Bound::from_owned_ptr_or_err(py, out)
        }
    }
}

/// Reads a `bytes`, `bytearray` or `memoryview` (any buffer) argument.
pub(crate) fn with_bytes<R>(
    data: &Bound<'_, PyAny>,
    f: impl FnOnce(&[u8]) -> PyResult<R>,
) -> PyResult<R> {
    if let Ok(b) = data.cast::<pyo3::types::PyBytes>() {
        return f(b.as_bytes());
    }
    if let Ok(b) = data.cast::<pyo3::types::PyByteArray>() {
        return f(&b.to_vec());
    }
    if data.is_instance_of::<pyo3::types::PyString>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "expected bytes, bytearray or memoryview, got str (encode it as UTF-8 first)",
        ));
    }
    // Through a memoryview: only a bytes-like object (`bytes(5)` would make five NUL bytes).
    let view = pyo3::types::PyMemoryView::from(data)?;
    let bytes_type = py_bytes_type(data.py());
    let copied = bytes_type.call1((view,))?;
    let b = copied.cast::<pyo3::types::PyBytes>()?;
    f(b.as_bytes())
}

fn py_bytes_type(py: Python<'_>) -> Bound<'_, PyType> {
    py.get_type::<pyo3::types::PyBytes>()
}

/// mimalloc's `allow_thp` option (its position in v3's `mi_option_e`; the sys crate names no
/// constant for it).
const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

/// Has mimalloc map its memory in ordinary pages rather than ask for transparent huge pages, as
/// it does by default (`MADV_HUGEPAGE` on each region it maps): the first touch of a huge page
/// zero-fills 2 MiB at once, in whichever task touched it. On the benchmarks' VM, whose host backs
/// a page when it is first touched, that took up to 25 ms per huge page (a test program: 64 MiB
/// first touched in 659 ms, its slowest page 24.8 ms; in ordinary pages 27 ms, the slowest 0.25
/// ms), and a native server whose streams grew its heap stalled that long, every token due
/// meanwhile sent late. Only the default changes: `MIMALLOC_ALLOW_THP` in the environment still
/// decides. (Done first when the module loads, before the core's first allocation maps a
/// region; mimalloc's own start, already done, reads the option only then, so the process's
/// other memory keeps its transparent huge pages.)
fn ordinary_pages() {
    // SAFETY: sets the default of one of mimalloc's options, which it reads when it maps memory.
    unsafe { libmimalloc_sys::mi_option_set_enabled_default(MI_OPTION_ALLOW_THP, false) };
}

#[pymodule(gil_used = false)]
fn _rapidsse(m: &Bound<'_, PyModule>) -> PyResult<()> {
    ordinary_pages();
    m.add_class::<framing::SSEDecoder>()?;
    m.add_class::<decoding::EventDecoder>()?;
    m.add_class::<decoding::KnownTypes>()?;
    m.add_class::<drain::Drain>()?;
    m.add_function(wrap_pyfunction!(adrain::async_drain, m)?)?;
    adrain::register(m)?;
    m.add_class::<native::NativeSchema>()?;
    m.add_function(wrap_pyfunction!(wire::wire_setup, m)?)?;
    m.add_function(wrap_pyfunction!(structs::wire_encode, m)?)?;
    m.add_function(wrap_pyfunction!(wire::wire_compute, m)?)?;
    m.add_function(wrap_pyfunction!(wire::wire_compute_lines, m)?)?;
    m.add_class::<accumulate::ResponseCore>()?;
    m.add_class::<accumulate::ChatCore>()?;
    m.add_class::<accumulate::RealtimeCore>()?;
    m.add_class::<accumulate::GeminiCore>()?;
    m.add_class::<accumulate::CompletionsCore>()?;
    m.add_class::<accumulate::AnthropicCore>()?;
    m.add_class::<net::GatewayEngine>()?;
    m.add_class::<serve::ServeEngine>()?;
    m.add_class::<measure::MeasureEngine>()?;
    m.add_function(wrap_pyfunction!(structs::_struct_json, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
