//! The native synthetic server for Python (`rapidsse serve --synthetic --engine native`):
//! starts [`crate::net::serve::Server`] on its own threads (no GIL on them), and hands its
//! address, its `/health` body and a way to stop it to the Python side.

use std::net::{IpAddr, SocketAddr};

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

use crate::net::serve::{Config, Server};
use crate::net::synthetic::Spec;

/// A running native synthetic server.
#[pyclass(module = "rapidsse._rapidsse")]
pub struct SyntheticEngine {
    server: Server,
}

#[pymethods]
impl SyntheticEngine {
    /// Binds `host:port` (`0`: a free port) and starts `workers` threads serving streams of
    /// `tokens` tokens, the first `ttft` seconds after the request, then `rate` per second.
    #[new]
    #[pyo3(signature = (*, host, port, tokens, rate, ttft, workers))]
    fn new(
        py: Python<'_>,
        host: &str,
        port: u16,
        tokens: usize,
        rate: f64,
        ttft: f64,
        workers: usize,
    ) -> PyResult<Self> {
        let ip: IpAddr = host.parse().map_err(|_| {
            PyValueError::new_err(format!("host must be an IP address, not {host:?}"))
        })?;
        if workers < 1 {
            return Err(PyValueError::new_err("workers must be at least 1"));
        }
        let spec = Spec::new(tokens, rate, ttft).map_err(PyValueError::new_err)?;
        let config = Config {
            listen: SocketAddr::new(ip, port),
            spec,
            workers,
        };
        let server = py
            .detach(|| Server::start(config))
            .map_err(PyOSError::new_err)?;
        Ok(SyntheticEngine { server })
    }

    /// `(host, port)` listened on.
    #[getter]
    fn address(&self) -> (String, u16) {
        let addr = self.server.local_addr();
        (addr.ip().to_string(), addr.port())
    }

    /// The body of `/health` as JSON text; `reset`: the tallies then start anew.
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
