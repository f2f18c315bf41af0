//! The pooled upstream client: hyper-util's client over rustls (HTTP/2 by ALPN where an https
//! upstream offers it, HTTP/1.1 otherwise), and the TLS configuration the Realtime WebSocket
//! client shares.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls::ClientConfig;

/// The client every exchange of a gateway shares.
pub type Upstream = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The roots an https upstream's certificate may chain to: the Mozilla roots (webpki-roots) and
/// the certificates of `extra_ca_pem` (a private CA), if any.
pub fn tls_config(extra_ca_pem: Option<&[u8]>) -> Result<ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(pem) = extra_ca_pem {
        let mut reader = pem;
        let mut added = 0;
        for cert in rustls_pemfile::certs(&mut reader) {
            let cert = cert.map_err(|e| format!("the upstream CA file cannot be read: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("the upstream CA file holds a bad certificate: {e}"))?;
            added += 1;
        }
        if added == 0 {
            return Err("the upstream CA file holds no PEM certificate".to_owned());
        }
    }
    // ring, not aws-lc-rs (rustls's default, with post-quantum key exchange): ring builds with a
    // plain C compiler on every platform the wheels are made for, zig's cross-linking included.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

/// The pooled client: `max_idle` idle connections kept per upstream host, `connect_timeout` to
/// open one.
pub fn upstream_client(tls: ClientConfig, connect_timeout: Duration, max_idle: usize) -> Upstream {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_all_versions()
        .wrap_connector(http);
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(max_idle)
        .build(https)
}
