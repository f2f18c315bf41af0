//! The native benchmark client for Python (`rapidsse measure --engine native`): hands
//! [`crate::net::measure::Client`] its run once and gives back what it measured as requests end,
//! the GIL released while it waits. `rapidsse.serving.measure` turns the samples into its
//! `RequestResult`s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

use crate::net::client::tls_config;
use crate::net::measure::{Client, Message, Slots, Target, Texts};
use crate::net::Protocol;

/// One request's sample: `(index, queued, status, error, latency, token_times, token_reads,
/// multi_token_reads, output_tokens, input_tokens, bytes)`: each token's time (a read that
/// completed several gives them all its time), how many reads completed tokens and how many of
/// those completed several. (Made here, without the GIL, rather than per token in Python.)
type SampleTuple = (
    u64,
    f64,
    Option<u16>,
    Option<String>,
    f64,
    Vec<f64>,
    usize,
    usize,
    Option<i64>,
    Option<i64>,
    u64,
);

#[pyclass(module = "rapidsse._rapidsse", frozen)]
pub struct MeasureEngine {
    client: Client,
}

fn protocol(name: &str) -> PyResult<Protocol> {
    Ok(match name {
        "responses" => Protocol::Responses,
        "chat" => Protocol::Chat,
        "completions" => Protocol::Completions,
        "anthropic" => Protocol::Anthropic,
        "gemini" => Protocol::Gemini,
        _ => {
            return Err(PyValueError::new_err(format!(
                "no native client for {name:?}"
            )))
        }
    })
}

#[pymethods]
impl MeasureEngine {
    /// A client of `host:port` (resolved here) sending `head` (request line and headers, up to
    /// content-length) and body `i % len(bodies)` for request `i`; `texts` are the failure
    /// reasons of a timeout and of a stop. `tls`: https, trusting the Mozilla roots and the
    /// certificates of the PEM `tls_ca` (if given).
    #[new]
    #[pyo3(signature = (host, port, head, protocol_name, bodies, timeout, kernel_timestamps, timeout_text, interrupted_text, tls=false, tls_ca=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        host: String,
        port: u16,
        head: Vec<u8>,
        protocol_name: &str,
        bodies: Vec<Vec<u8>>,
        timeout: f64,
        kernel_timestamps: bool,
        timeout_text: String,
        interrupted_text: String,
        tls: bool,
        tls_ca: Option<Vec<u8>>,
    ) -> PyResult<Self> {
        let tls = match tls {
            true => Some(Arc::new(
                tls_config(tls_ca.as_deref()).map_err(PyValueError::new_err)?,
            )),
            false => None,
        };
        let target = Target {
            host,
            port,
            head,
            protocol: protocol(protocol_name)?,
            kernel_timestamps: kernel_timestamps && tls.is_none(),
            tls,
        };
        let texts = Texts {
            timeout: timeout_text,
            interrupted: interrupted_text,
        };
        let timeout = Duration::try_from_secs_f64(timeout)
            .map_err(|_| PyValueError::new_err("timeout must be a positive number of seconds"))?;
        let client = py
            .detach(|| Client::new(target, bodies, timeout, texts))
            .map_err(PyOSError::new_err)?;
        Ok(MeasureEngine { client })
    }

    /// Whether reads are kernel-stamped on this machine (Linux).
    #[staticmethod]
    fn kernel_timestamps() -> bool {
        crate::net::measure::KERNEL_TIMESTAMPS
    }

    /// Runs `count` unmeasured requests, `cap` at most in flight; returns when they ended.
    #[pyo3(signature = (count, cap=None))]
    fn warmup(&self, py: Python<'_>, count: u64, cap: Option<usize>) {
        py.detach(|| self.client.warmup(count, cap));
    }

    /// Starts the run `start_in` seconds from now: `plan` is `(index, offset)` in arrival order;
    /// `slots`: None (no cap), a number (the cap), or -1 (granted from outside with `grant`).
    #[pyo3(signature = (plan, start_in, slots=None))]
    fn start(&self, plan: Vec<(u64, f64)>, start_in: f64, slots: Option<i64>) {
        let now = Instant::now();
        let start = if start_in >= 0.0 {
            now + Duration::from_secs_f64(start_in)
        } else {
            now.checked_sub(Duration::from_secs_f64(-start_in))
                .unwrap_or(now)
        };
        let slots = match slots {
            None => Slots::None,
            Some(-1) => Slots::External,
            Some(cap) => Slots::Local(cap.max(1) as usize),
        };
        self.client.start(plan, start, slots);
    }

    /// What came within `wait` seconds (all that is there once one came): `(samples, wants,
    /// duration)`, `duration` set once the run ended (then nothing more comes).
    fn drain(&self, py: Python<'_>, wait: f64) -> (Vec<SampleTuple>, Vec<u64>, Option<f64>) {
        let mut samples = Vec::new();
        let mut wants = Vec::new();
        let mut duration = None;
        let wait = Duration::from_secs_f64(wait.max(0.0));
        py.detach(|| {
            let mut next = self.client.next(wait);
            while let Some(message) = next {
                match message {
                    Message::Sample(sample) => {
                        let s = *sample;
                        let tokens = s.reads.iter().map(|&(_, n)| n as usize).sum();
                        let mut token_times = Vec::with_capacity(tokens);
                        for &(at, n) in &s.reads {
                            token_times.extend(std::iter::repeat_n(at, n as usize));
                        }
                        let multi = s.reads.iter().filter(|&&(_, n)| n > 1).count();
                        samples.push((
                            s.index,
                            s.queued,
                            s.status,
                            s.error,
                            s.latency,
                            token_times,
                            s.reads.len(),
                            multi,
                            s.output_tokens,
                            s.input_tokens,
                            s.bytes,
                        ));
                    }
                    Message::Want(index) => wants.push(index),
                    Message::Done(seconds) => {
                        duration = Some(seconds);
                        break;
                    }
                }
                next = self.client.next(Duration::ZERO);
            }
        });
        (samples, wants, duration)
    }

    /// Grants request `index` its slot (the run started with `slots=-1`).
    fn grant(&self, index: u64) {
        self.client.grant(index);
    }

    /// Stops the run: what is in flight fails as interrupted, what is not due is left out.
    fn stop(&self) {
        self.client.stop();
    }
}
