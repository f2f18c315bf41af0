//! The native server for Python (`rapidsse serve --engine native`): starts
//! [`crate::net::serve::Server`] on its own threads (no GIL on them) with synthetic streams
//! or recordings ([`ServeEngine`]), and hands its address, its `/health`
//! body and a way to stop it to the Python side.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

use crate::net::replay::{Library, Pacing, Recorded};
use crate::net::serve::{Config, Server, Streams};
use crate::net::synthetic::Spec;

fn start(
    py: Python<'_>,
    host: &str,
    port: u16,
    streams: Streams,
    workers: usize,
) -> PyResult<Server> {
    let ip: IpAddr = host
        .parse()
        .map_err(|_| PyValueError::new_err(format!("host must be an IP address, not {host:?}")))?;
    if workers < 1 {
        return Err(PyValueError::new_err("workers must be at least 1"));
    }
    let config = Config {
        listen: SocketAddr::new(ip, port),
        streams,
        workers,
    };
    py.detach(|| Server::start(config))
        .map_err(PyOSError::new_err)
}

/// A recording as Python hands it over: protocol, pieces, final object's JSON.
type Handed = (String, Vec<Vec<u8>>, Option<Vec<u8>>);

/// A running native server: synthetic streams ([`ServeEngine::synthetic`]) or recordings
/// ([`ServeEngine::replay`]).
#[pyclass(module = "rapidsse._rapidsse")]
pub struct ServeEngine {
    server: Server,
}

#[pymethods]
impl ServeEngine {
    /// Binds `host:port` (`0`: a free port) and starts `workers` threads serving streams of
    /// `tokens` tokens, the first `ttft` seconds after the request, then `rate` per second.
    #[staticmethod]
    #[pyo3(signature = (*, host, port, tokens, rate, ttft, workers = 1))]
    fn synthetic(
        py: Python<'_>,
        host: &str,
        port: u16,
        tokens: usize,
        rate: f64,
        ttft: f64,
        workers: usize,
    ) -> PyResult<Self> {
        let spec = Spec::new(tokens, rate, ttft).map_err(PyValueError::new_err)?;
        let server = start(py, host, port, Streams::Synthetic(spec), workers)?;
        Ok(ServeEngine { server })
    }

    /// Binds `host:port` (`0`: a free port) and starts `workers` threads replaying
    /// `recordings`, each `(protocol, pieces, final_json)`: the protocol's name, the pieces sent
    /// one at a time, and the JSON answered to a request without `"stream": true` (None: such a
    /// request is refused). Pieces are due `ttft + i / rate` seconds after the request.
    #[staticmethod]
    #[pyo3(signature = (*, host, port, recordings, ttft, rate, workers = 1))]
    fn replay(
        py: Python<'_>,
        host: &str,
        port: u16,
        recordings: Vec<Handed>,
        ttft: f64,
        rate: f64,
        workers: usize,
    ) -> PyResult<Self> {
        let pacing = Pacing::new(ttft, rate).map_err(PyValueError::new_err)?;
        let recordings = recordings.into_iter().map(|(protocol, pieces, whole)| {
            let events = pieces.into_iter().map(bytes::Bytes::from).collect();
            let whole = whole.map(bytes::Bytes::from);
            (protocol, Recorded { events, whole })
        });
        let library = Library::new(pacing, recordings).map_err(PyValueError::new_err)?;
        let server = start(py, host, port, Streams::Replay(Arc::new(library)), workers)?;
        Ok(ServeEngine { server })
    }

    /// `(host, port)` listened on.
    #[getter]
    fn address(&self) -> (String, u16) {
        let addr = self.server.local_addr();
        (addr.ip().to_string(), addr.port())
    }

    /// The body of `/health` as JSON text; `reset`: the tallies then start anew (a replay
    /// server keeps none, and ignores it).
    #[pyo3(signature = (reset = false))]
    fn health(&self, reset: bool) -> String {
        self.server.health(reset).to_string()
    }

    /// Stops serving (the streams in flight are cut) and waits for the threads, the GIL
    /// released. A second call does nothing.
    fn stop(&self, py: Python<'_>) {
        py.detach(|| self.server.stop());
    }
}
