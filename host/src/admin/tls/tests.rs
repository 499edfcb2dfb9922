//! The admin server over TLS, in-process on 127.0.0.1:0, with certificates made per test (rcgen)
//! and a rustls client; and the config errors of files that cannot serve.

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use super::server_config;
use crate::admin::server::{self, Limits};
use crate::admin::{Reply, Request};
use crate::config::AdminConfig;

/// A server certificate for `localhost`, and a client CA with a client certificate it signed.
struct Pki {
    dir: tempfile::TempDir,
    server_cert: CertificateDer<'static>,
    ca: CertifiedIssuer<'static, KeyPair>,
}

/// A client's certificate and key.
type ClientId = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let server = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        std::fs::write(dir.path().join("server.pem"), server.cert.pem()).unwrap();
        std::fs::write(
            dir.path().join("server.key"),
            server.signing_key.serialize_pem(),
        )
        .unwrap();
        let ca = client_ca();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        Pki {
            dir,
            server_cert: server.cert.der().clone(),
            ca,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn config(&self, client_ca: bool) -> AdminConfig {
        AdminConfig {
            tls_cert: Some(self.path("server.pem")),
            tls_key: Some(self.path("server.key")),
            tls_client_ca: client_ca.then(|| self.path("ca.pem")),
            ..AdminConfig::default()
        }
    }
}

fn client_ca() -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

/// A client certificate signed by `ca`.
fn client_id(ca: &CertifiedIssuer<'static, KeyPair>) -> ClientId {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["admin-client".to_owned()]).unwrap();
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &**ca).unwrap();
    (
        vec![cert.der().clone()],
        PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
    )
}

/// The admin server's plumbing over TLS: PUT answers the length of the body it read, GET "ok",
/// `/healthz` "healthy".
fn serve(config: &AdminConfig, limits: Limits) -> (String, Arc<AtomicBool>) {
    let tls = server_config(config).unwrap().expect("TLS is configured");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (addr, _thread) = server::start(
        listener,
        limits,
        Some(tls),
        stop.clone(),
        |r: Request<'_>| match r.method {
            "PUT" => match r.body {
                Ok(b) => Reply::text(200, format!("{} bytes", b.len())),
                Err((status, why)) => Reply::text(status, why),
            },
            _ => Reply::text(200, "ok"),
        },
        || Reply::text(200, "healthy"),
    )
    .unwrap();
    (addr.to_string(), stop)
}

/// One request over TLS, trusting only `server_cert`; the answer, or why there is none.
fn https(
    addr: &str,
    server_cert: &CertificateDer<'static>,
    client: Option<ClientId>,
    request: &[u8],
) -> std::io::Result<String> {
    let provider = super::provider();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(server_cert.clone()).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match client {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key).unwrap(),
        None => builder.with_no_client_auth(),
    };
    let name = ServerName::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let tcp = std::net::TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
    tcp.set_write_timeout(Some(Duration::from_secs(10)))?;
    let mut tls = rustls::StreamOwned::new(connection, tcp);
    tls.write_all(request)?;
    let mut answer = String::new();
    tls.read_to_string(&mut answer)?;
    Ok(answer)
}

/// One request in plain TCP; whatever comes back.
fn plain(addr: &str, request: &[u8]) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// `Connection: close`: the helpers read an answer to its end.
const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";

#[test]
fn https_is_served_and_plain_http_on_its_port_is_not() {
    let pki = Pki::new();
    let (addr, stop) = serve(&pki.config(false), Limits::default());
    let health = https(&addr, &pki.server_cert, None, HEALTHZ).unwrap();
    assert!(
        health.starts_with("HTTP/1.1 200") && health.ends_with("healthy"),
        "{health}"
    );
    // An upload: its body is read through the TLS stream.
    let upload = https(
        &addr,
        &pki.server_cert,
        None,
        b"PUT /plugins HTTP/1.1\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
    )
    .unwrap();
    assert!(upload.ends_with("5 bytes"), "{upload}");

    let cleartext = plain(&addr, HEALTHZ);
    assert!(cleartext.starts_with("HTTP/1.1 400"), "{cleartext}");
    assert!(
        cleartext.contains("HTTPS only") && !cleartext.contains("healthy"),
        "{cleartext}"
    );
    // A handshake that is garbage fails; the server goes on.
    let garbage = plain(&addr, b"\x16\x03\x01\x00\x05hello");
    assert!(!garbage.contains("HTTP/1.1"), "{garbage:?}");
    let health = https(&addr, &pki.server_cert, None, HEALTHZ).unwrap();
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    stop.store(true, Ordering::Relaxed);
}

#[test]
fn with_a_client_ca_only_a_client_with_a_certificate_it_signed_is_served() {
    let pki = Pki::new();
    let (addr, stop) = serve(&pki.config(true), Limits::default());
    let anonymous = https(&addr, &pki.server_cert, None, HEALTHZ);
    assert!(
        anonymous.is_err(),
        "served without a certificate: {anonymous:?}"
    );
    let stranger = https(
        &addr,
        &pki.server_cert,
        Some(client_id(&client_ca())),
        HEALTHZ,
    );
    assert!(
        stranger.is_err(),
        "served a certificate of another CA: {stranger:?}"
    );
    let member = https(&addr, &pki.server_cert, Some(client_id(&pki.ca)), HEALTHZ).unwrap();
    assert!(
        member.starts_with("HTTP/1.1 200") && member.ends_with("healthy"),
        "{member}"
    );
    stop.store(true, Ordering::Relaxed);
}

#[test]
fn a_handshake_not_done_by_the_head_deadline_is_dropped_and_others_are_served() {
    let pki = Pki::new();
    let limits = Limits {
        head_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let (addr, stop) = serve(&pki.config(false), limits);
    let mut stalled = std::net::TcpStream::connect(&addr).unwrap();
    // The first byte of a handshake record, then nothing.
    stalled.write_all(&[0x16]).unwrap();
    stalled
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let started = Instant::now();
    let mut out = Vec::new();
    let _ = stalled.read_to_end(&mut out);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(3),
        "closed after {took:?}"
    );
    let health = https(&addr, &pki.server_cert, None, HEALTHZ).unwrap();
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    stop.store(true, Ordering::Relaxed);
}

#[test]
fn tls_files_that_cannot_serve_are_config_errors_naming_the_field_and_the_fix() {
    let pki = Pki::new();
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    std::fs::write(pki.path("other.key"), other.signing_key.serialize_pem()).unwrap();
    std::fs::write(pki.path("notes.txt"), "not a certificate\n").unwrap();
    std::fs::write(
        pki.path("broken.pem"),
        "-----BEGIN CERTIFICATE-----\nMIIB\n",
    )
    .unwrap();
    let err = |config: AdminConfig| server_config(&config).unwrap_err().to_string();
    let with = |field: &str, file: &str| {
        let mut c = pki.config(true);
        let file = Some(pki.path(file));
        match field {
            "cert" => c.tls_cert = file,
            "key" => c.tls_key = file,
            _ => c.tls_client_ca = file,
        }
        err(c)
    };
    let cases = [
        (with("cert", "missing.pem"), "admin.tls_cert", "cannot read"),
        (
            with("cert", "notes.txt"),
            "admin.tls_cert",
            "no certificate",
        ),
        (
            with("cert", "broken.pem"),
            "admin.tls_cert",
            "not valid PEM",
        ),
        (with("key", "missing.key"), "admin.tls_key", "cannot read"),
        (
            with("key", "server.pem"),
            "admin.tls_key",
            "no unencrypted private key",
        ),
        (
            with("key", "other.key"),
            "admin.tls_key",
            "is not the key of the certificate",
        ),
        (
            with("ca", "notes.txt"),
            "admin.tls_client_ca",
            "no certificate",
        ),
    ];
    for (error, field, problem) in cases {
        assert!(
            error.contains(&format!("`{field}`")) && error.contains(problem),
            "{error}"
        );
        assert!(error.contains("; give "), "no fix: {error}");
    }
    server_config(&pki.config(true)).unwrap().unwrap();
    assert!(server_config(&AdminConfig::default()).unwrap().is_none());
}
