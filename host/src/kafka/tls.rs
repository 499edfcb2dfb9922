//! What `cojoin check` says it connected with: the security protocol, the SASL mechanism and
//! user, and for TLS the version and cipher a handshake with the first bootstrap broker
//! negotiates, with the same CA, client certificate and key as the Kafka clients (librdkafka
//! does not tell which TLS version it negotiated). Secrets are read, never printed.

use std::net::{TcpStream, ToSocketAddrs};

use anyhow::{Context, Result};
use openssl::pkey::PKey;
use openssl::ssl::{SslConnector, SslFiletype, SslMethod, SslVerifyMode};
use openssl::x509::X509;

use crate::secret::Options;

use super::timeouts::REQUEST as TIMEOUT;

/// One line: "connected with SASL_SSL, mechanism SCRAM-SHA-512 as user cojoin; TLSv1.3 (…)".
pub fn connection_report(bootstrap: &str, options: &Options) -> String {
    let protocol = options
        .get("security.protocol")
        .map_or("PLAINTEXT".to_owned(), |p| p.to_ascii_uppercase());
    let mut line = format!("connected with security.protocol {protocol}");
    if protocol.starts_with("SASL") {
        let mechanism = options
            .get("sasl.mechanism")
            .or_else(|| options.get("sasl.mechanisms"))
            .map_or("GSSAPI".to_owned(), |m| m.to_ascii_uppercase());
        line.push_str(&format!(", SASL mechanism {mechanism}"));
        match (mechanism.as_str(), options.get("sasl.username")) {
            ("PLAIN" | "SCRAM-SHA-256" | "SCRAM-SHA-512", Some(user)) => {
                line.push_str(&format!(", principal User:{user}"))
            }
            ("OAUTHBEARER", _) => line.push_str(", principal: the token's subject"),
            _ => {}
        }
    }
    if protocol.ends_with("SSL") {
        match handshake(bootstrap, options) {
            Ok(tls) => line.push_str(&format!("; {tls}")),
            Err(e) => line.push_str(&format!("; TLS version not read ({e:#})")),
        }
    }
    line
}

/// A TLS handshake as librdkafka's: its version and cipher, and the client certificate's subject
/// (from which the broker maps the principal under mTLS).
fn handshake(bootstrap: &str, options: &Options) -> Result<String> {
    let first = bootstrap.split(',').next().unwrap_or_default().trim();
    let address = first.rsplit_once("://").map_or(first, |(_, a)| a);
    let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
    let mut builder = SslConnector::builder(SslMethod::tls_client())?;
    if let Some(ca) = options.get("ssl.ca.location") {
        builder
            .set_ca_file(ca)
            .with_context(|| format!("reading ssl.ca.location {ca:?}"))?;
    }
    if let Some(pem) = options.get("ssl.ca.pem") {
        builder
            .cert_store_mut()
            .add_cert(X509::from_pem(pem.as_bytes()).context("parsing ssl.ca.pem")?)?;
    }
    let mut subject = None;
    if let Some(cert) = options.get("ssl.certificate.location") {
        builder
            .set_certificate_chain_file(cert)
            .with_context(|| format!("reading ssl.certificate.location {cert:?}"))?;
        let pem = std::fs::read(cert)?;
        subject = Some(
            X509::from_pem(&pem)?
                .subject_name()
                .entries()
                .map(|e| {
                    format!(
                        "{}={}",
                        e.object().nid().short_name().unwrap_or("?"),
                        String::from_utf8_lossy(e.data().as_slice())
                    )
                })
                .collect::<Vec<_>>()
                .join(","),
        );
    }
    if let Some(key) = options.get("ssl.key.location") {
        let pem =
            std::fs::read(key).with_context(|| format!("reading ssl.key.location {key:?}"))?;
        let pkey = match options.get("ssl.key.password") {
            Some(pass) => PKey::private_key_from_pem_passphrase(&pem, pass.as_bytes()),
            None => PKey::private_key_from_pem(&pem),
        }
        .context("reading the private key of ssl.key.location")?;
        builder.set_private_key(&pkey)?;
    } else if options.get("ssl.certificate.location").is_some() {
        builder.set_private_key_file(
            options["ssl.certificate.location"].as_str(),
            SslFiletype::PEM,
        )?;
    }
    let verify = options
        .get("enable.ssl.certificate.verification")
        .is_none_or(|v| v != "false");
    if !verify {
        builder.set_verify(SslVerifyMode::NONE);
    }
    let connector = builder.build();
    let mut config = connector.configure()?;
    if !verify
        || options
            .get("ssl.endpoint.identification.algorithm")
            .is_some_and(|a| a == "none")
    {
        config.set_verify_hostname(false);
    }
    let socket = address
        .to_socket_addrs()?
        .next()
        .with_context(|| format!("{address:?} resolves to no address"))?;
    let stream = TcpStream::connect_timeout(&socket, TIMEOUT)?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    let tls = config
        .connect(host, stream)
        .map_err(|e| anyhow::anyhow!("TLS handshake with {address}: {e}"))?;
    let ssl = tls.ssl();
    let mut out = format!(
        "{}, cipher {}, broker certificate {}",
        ssl.version_str(),
        ssl.current_cipher().map_or("?", |c| c.name()),
        if verify {
            "verified"
        } else {
            "NOT verified (enable.ssl.certificate.verification = false)"
        }
    );
    if let Some(subject) = subject {
        out.push_str(&format!(", client certificate {subject}"));
    }
    Ok(out)
}
