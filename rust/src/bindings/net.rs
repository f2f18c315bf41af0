//! The native gateway engine for Python (`rapidsse.gateway.native`): starts and stops
//! [`crate::net::Gateway`], hands its finished exchanges to Python one at a time (the caller's
//! drain thread, the GIL released while it waits), and calls `on_request` and the metrics
//! exposition back when the engine asks (on tokio's blocking pool, never on the data path).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use super::accumulate::{
    AnthropicCore, ChatCore, CompletionsCore, GeminiCore, RealtimeCore, ResponseCore,
};
use crate::net::gateway::error_body;
use crate::net::tap::Accumulator;
use crate::net::{Config, Decision, ErrorText, Gateway, Hooks, Record, RequestHead, StreamTap};

/// The Python callables the engine calls per exchange.
struct PyHooks {
    /// `on_request(method, path, query, protocol, model, headers, body)` -> `(upstream, headers,
    /// caller, reject)`, reject being None or `(status, body, error)`.
    on_request: Option<Py<PyAny>>,
    /// `metrics()` -> `(body, content_type)`.
    metrics: Option<Py<PyAny>>,
}

impl Hooks for PyHooks {
    fn has_on_request(&self) -> bool {
        self.on_request.is_some()
    }

    fn on_request(&self, head: RequestHead) -> Decision {
        let Some(hook) = &self.on_request else {
            return Decision::default();
        };
        let protocol = head.protocol;
        Python::attach(|py| {
            let call = || -> PyResult<Decision> {
                let headers = PyList::new(
                    py,
                    head.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())),
                )?;
                let result = hook.call1(
                    py,
                    (
                        head.method,
                        head.path,
                        head.query,
                        head.protocol.map(|p| p.name()),
                        head.model,
                        headers,
                        PyBytes::new(py, &head.body),
                    ),
                )?;
                let (upstream, headers, caller, reject): (
                    Option<String>,
                    Option<Vec<(String, String)>>,
                    Option<String>,
                    Option<(u16, Vec<u8>, String)>,
                ) = result.extract(py)?;
                Ok(Decision {
                    upstream,
                    headers,
                    caller,
                    reject,
                })
            };
            call().unwrap_or_else(|err| {
                let message = format!("on_request failed: {err}");
                Decision {
                    reject: Some((
                        500,
                        error_body(protocol, "the gateway's on_request hook failed", 500),
                        message,
                    )),
                    ..Decision::default()
                }
            })
        })
    }

    fn metrics(&self) -> (Vec<u8>, String) {
        let Some(metrics) = &self.metrics else {
            return (Vec::new(), "text/plain".to_owned());
        };
        Python::attach(|py| {
            metrics
                .call0(py)
                .and_then(|r| r.extract::<(Vec<u8>, String)>(py))
                .unwrap_or_else(|err| {
                    (
                        format!("metrics failed: {err}").into_bytes(),
                        "text/plain".to_owned(),
                    )
                })
        })
    }
}

/// A running native gateway.
#[pyclass(module = "rapidsse._rapidsse")]
pub struct GatewayEngine {
    gateway: Gateway,
}

fn seconds(value: Option<f64>) -> PyResult<Option<Duration>> {
    match value {
        None => Ok(None),
        Some(s) if s.is_finite() && s > 0.0 => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "a timeout must be a positive number of seconds, not {s}"
        ))),
    }
}

#[pymethods]
impl GatewayEngine {
    #[new]
    #[pyo3(signature = (*, host, port, upstreams, tap, read_timeout, connect_timeout, header_timeout,
                        max_header_bytes, max_body_bytes, max_json_reply, threads, upstream_ca,
                        metrics_path, record_queue, max_idle, on_request, metrics))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        host: &str,
        port: u16,
        upstreams: Vec<(String, String)>,
        tap: bool,
        read_timeout: Option<f64>,
        connect_timeout: f64,
        header_timeout: f64,
        max_header_bytes: usize,
        max_body_bytes: usize,
        max_json_reply: usize,
        threads: usize,
        upstream_ca: Option<Vec<u8>>,
        metrics_path: bool,
        record_queue: usize,
        max_idle: usize,
        on_request: Option<Py<PyAny>>,
        metrics: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let ip: IpAddr = host.parse().map_err(|_| {
            pyo3::exceptions::PyValueError::new_err(format!(
                "host must be an IP address, not {host:?}"
            ))
        })?;
        let config = Config {
            listen: SocketAddr::new(ip, port),
            upstreams,
            tap,
            read_timeout: seconds(read_timeout)?,
            connect_timeout: seconds(Some(connect_timeout))?.unwrap_or(Duration::from_secs(10)),
            header_timeout: seconds(Some(header_timeout))?.unwrap_or(Duration::from_secs(30)),
            max_header_bytes,
            max_body_bytes,
            max_json_reply,
            threads,
            upstream_ca,
            metrics_path,
            record_queue,
            max_idle,
        };
        let hooks = Arc::new(PyHooks {
            on_request,
            metrics,
        });
        let gateway = py
            .detach(|| Gateway::start(config, hooks))
            .map_err(pyo3::exceptions::PyOSError::new_err)?;
        Ok(GatewayEngine { gateway })
    }

    /// `(host, port)` listened on.
    #[getter]
    fn address(&self) -> (String, u16) {
        let addr = self.gateway.local_addr();
        (addr.ip().to_string(), addr.port())
    }

    /// Finished exchanges dropped because the queue to Python was full.
    fn dropped(&self) -> u64 {
        self.gateway.dropped()
    }

    /// The finished exchanges waiting (at most `limit`), as a list of tuples (see
    /// `rapidsse.gateway.native`), after waiting up to `timeout` seconds for the first (an empty
    /// list: none came); False once the gateway stopped and all were taken.
    #[pyo3(signature = (timeout, limit = 1024))]
    fn next_records<'py>(
        &self,
        py: Python<'py>,
        timeout: f64,
        limit: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let wait = Duration::from_secs_f64(timeout.max(0.0));
        let Some(records) = py.detach(|| self.gateway.next_records(wait, limit)) else {
            return Ok(false.into_pyobject(py)?.to_owned().into_any());
        };
        let items = records
            .into_iter()
            .map(|record| record_tuple(py, record))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(PyList::new(py, items)?.into_any())
    }

    /// Stops accepting; exchanges in flight get `grace` seconds to finish. Blocks meanwhile
    /// (the GIL released).
    fn stop(&self, py: Python<'_>, grace: f64) {
        let grace = Duration::from_secs_f64(grace.max(0.0));
        py.detach(|| self.gateway.stop(grace));
    }

    /// Whether `stop` ran.
    #[getter]
    fn stopped(&self) -> bool {
        self.gateway.is_stopped()
    }
}

fn record_tuple(py: Python<'_>, record: Record) -> PyResult<Bound<'_, PyAny>> {
    let error: Py<PyAny> = match record.error {
        None => py.None(),
        Some(ErrorText::Text(text)) => text.into_pyobject(py)?.into_any().unbind(),
        Some(ErrorText::Tap(r)) => (
            "tap",
            r.reason,
            r.index,
            String::from_utf8_lossy(&r.event).into_owned(),
            r.offset,
            PyBytes::new(py, &r.raw),
            r.limit,
        )
            .into_pyobject(py)?
            .into_any()
            .unbind(),
    };
    let core: Py<PyAny> = match record.tap {
        None => py.None(),
        Some(tap) => core_of(py, *tap)?,
    };
    let json = record.json_reply.map(|j| PyBytes::new(py, &j));
    let items: [Py<PyAny>; 15] = [
        record
            .protocol
            .map(|p| p.name())
            .into_pyobject(py)?
            .into_any()
            .unbind(),
        record.method.into_pyobject(py)?.into_any().unbind(),
        record.path.into_pyobject(py)?.into_any().unbind(),
        record.model.into_pyobject(py)?.into_any().unbind(),
        record.caller.into_pyobject(py)?.into_any().unbind(),
        record.status.into_pyobject(py)?.into_any().unbind(),
        record.outcome.into_pyobject(py)?.into_any().unbind(),
        record.ttfb.into_pyobject(py)?.into_any().unbind(),
        record.ttft.into_pyobject(py)?.into_any().unbind(),
        record.duration.into_pyobject(py)?.into_any().unbind(),
        record.chunks.into_pyobject(py)?.into_any().unbind(),
        record.bytes.into_pyobject(py)?.into_any().unbind(),
        error,
        core,
        json.into_pyobject(py)?.into_any().unbind(),
    ];
    Ok(PyTuple::new(py, items)?.into_any())
}

/// The tap's accumulator as the core class the Python accumulators wrap.
fn core_of(py: Python<'_>, tap: StreamTap) -> PyResult<Py<PyAny>> {
    let StreamTap { framer, acc, .. } = tap;
    Ok(match acc {
        Accumulator::Responses(a) => Py::new(py, ResponseCore::from_parts(a, framer))?.into_any(),
        Accumulator::Chat(a) => Py::new(py, ChatCore::from_parts(a, framer))?.into_any(),
        Accumulator::Completions(a) => {
            Py::new(py, CompletionsCore::from_parts(a, framer))?.into_any()
        }
        Accumulator::Anthropic(a) => Py::new(py, AnthropicCore::from_parts(a, framer))?.into_any(),
        Accumulator::Gemini(a) => Py::new(py, GeminiCore::from_parts(a, framer))?.into_any(),
        Accumulator::Realtime(a) => Py::new(py, RealtimeCore::from_parts(a, framer))?.into_any(),
    })
}
