//! The admin server's TLS: the certificate, key and client CA that `admin.tls_cert`,
//! `admin.tls_key` and `admin.tls_client_ca` name, read and checked when the server starts (a
//! problem is a [`ConfigError`] naming the field and the fix), and each connection's handshake.
//! rustls with the ring provider; it knows nothing of HTTP (server.rs answers).

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::{InconsistentKeys, RootCertStore, ServerConfig};
use tokio::net::TcpStream;
use tokio::time::{timeout_at, Instant};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::config::{AdminConfig, AdminTlsFiles, ConfigError};

/// The first byte of every TLS connection: a handshake record.
const HANDSHAKE_RECORD: u8 = 0x16;

const FIX_CERT: &str = "give a PEM file holding the server's certificate (-----BEGIN CERTIFICATE-----), its chain after it";
const FIX_KEY: &str = "give the PEM private key the certificate was issued for (BEGIN PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY), without a passphrase";
const FIX_CA: &str =
    "give a PEM file holding the certificate of the CA that signs the clients' certificates";

/// The server's TLS configuration, or `None` when `admin.tls_cert` and `admin.tls_key` are not
/// set (plain HTTP).
pub fn server_config(config: &AdminConfig) -> Result<Option<Arc<ServerConfig>>, ConfigError> {
    let Some(files) = config.tls_files()? else {
        return Ok(None);
    };
    load(files).map(|c| Some(Arc::new(c)))
}

/// rustls 0.23.48 deprecates ring's provider for lacking post-quantum key exchange (which only
/// aws-lc-rs has); ring is kept for a build without aws-lc's C and CMake, and TLS 1.2/1.3 with
/// X25519 and ECDHE remain sound for an admin API.
#[allow(deprecated)]
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn load(files: AdminTlsFiles<'_>) -> Result<ServerConfig, ConfigError> {
    let provider = provider();
    let key = certified_key(&files, &provider)?;
    let clients = match files.client_ca {
        None => WebPkiClientVerifier::no_client_auth(),
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for ca in certificates("admin.tls_client_ca", path, FIX_CA)? {
                roots.add(ca).map_err(|e| {
                    invalid(
                        "admin.tls_client_ca",
                        format!("{path:?} holds a certificate that cannot be a CA: {e}"),
                        FIX_CA,
                    )
                })?;
            }
            // Without `allow_unauthenticated`: a client that presents no certificate is refused.
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| invalid("admin.tls_client_ca", format!("{path:?}: {e}"), FIX_CA))?
        }
    };
    let mut server = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("admin.tls_cert", e.to_string(), FIX_CERT))?
        .with_client_cert_verifier(clients)
        .with_cert_resolver(Arc::new(SingleCertAndKey::from(key)));
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(server)
}

/// The certificate chain with its key, checked to belong together.
fn certified_key(
    files: &AdminTlsFiles<'_>,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, ConfigError> {
    let chain = certificates("admin.tls_cert", files.cert, FIX_CERT)?;
    let pem = read("admin.tls_key", files.key)?;
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        let problem = match e {
            rustls::pki_types::pem::Error::NoItemsFound => {
                format!("{:?} holds no unencrypted private key", files.key)
            }
            e => format!("{:?} is not valid PEM: {e}", files.key),
        };
        invalid("admin.tls_key", problem, FIX_KEY)
    })?;
    let signer = provider.key_provider.load_private_key(key).map_err(|e| {
        invalid(
            "admin.tls_key",
            format!("{:?} holds a key rustls cannot use: {e}", files.key),
            "use an RSA (2048 bits or more), ECDSA P-256 or P-384, or Ed25519 key",
        )
    })?;
    let certified = CertifiedKey::new(chain, signer);
    match certified.keys_match() {
        // Unknown: the key cannot tell its public half; the handshake will fail if it is wrong.
        Ok(()) | Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => Ok(certified),
        Err(rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => Err(invalid(
            "admin.tls_key",
            format!(
                "{:?} is not the key of the certificate in {:?} (admin.tls_cert)",
                files.key, files.cert
            ),
            FIX_KEY,
        )),
        Err(e) => Err(invalid(
            "admin.tls_cert",
            format!(
                "the first certificate in {:?} cannot be read: {e}",
                files.cert
            ),
            FIX_CERT,
        )),
    }
}

/// Every certificate in a PEM file; at least one.
fn certificates(
    field: &'static str,
    path: &Path,
    fix: &'static str,
) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let pem = read(field, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(field, format!("{path:?} is not valid PEM: {e}"), fix))?;
    if certs.is_empty() {
        return Err(invalid(
            field,
            format!("{path:?} holds no certificate (-----BEGIN CERTIFICATE-----)"),
            fix,
        ));
    }
    Ok(certs)
}

fn read(field: &'static str, path: &Path) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|e| {
        invalid(
            field,
            format!("cannot read {path:?}: {e}"),
            "give the path of a PEM file the host may read (a relative path starts from the working directory)",
        )
    })
}

fn invalid(field: &'static str, problem: String, fix: &'static str) -> ConfigError {
    ConfigError::Invalid {
        field,
        problem,
        fix,
    }
}

/// Why a connection to the HTTPS port goes no further.
pub(super) enum Refused {
    /// It does not open with a TLS handshake: most likely plain HTTP, which deserves a word.
    NotTls(TcpStream),
    /// Closed, silent past the deadline, or a failed handshake (logged at debug).
    Dropped,
}

/// The handshake, done by `deadline` (the one the request head has: a client that connects and
/// says nothing holds a slot no longer over TLS than without).
pub(super) async fn accept(
    acceptor: &TlsAcceptor,
    stream: TcpStream,
    deadline: Instant,
) -> Result<TlsStream<TcpStream>, Refused> {
    let peer = stream.peer_addr().ok();
    let mut first = [0u8; 1];
    match timeout_at(deadline, stream.peek(&mut first)).await {
        Ok(Ok(1)) if first[0] == HANDSHAKE_RECORD => {}
        Ok(Ok(1)) => {
            tracing::debug!(
                ?peer,
                "admin server: a connection to the HTTPS port is not TLS"
            );
            return Err(Refused::NotTls(stream));
        }
        // Closed or silent: an idle client, as on the plain port.
        _ => return Err(Refused::Dropped),
    }
    match timeout_at(deadline, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => {
            tracing::debug!(?peer, "admin server: TLS handshake failed: {e}");
            Err(Refused::Dropped)
        }
        Err(_) => {
            tracing::debug!(
                ?peer,
                "admin server: TLS handshake not done by the head deadline"
            );
            Err(Refused::Dropped)
        }
    }
}

#[cfg(test)]
mod tests;
