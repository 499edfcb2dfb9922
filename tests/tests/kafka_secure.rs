//! The secured test broker itself (TLS, SASL, mTLS and ACLs; `Kafka::start_secured`): the harness
//! the security suites stand on. The super user sets up and reads back; `cojoin` is refused what
//! no ACL allows, may produce once granted, by every way of logging in, and is refused again once
//! the grant is revoked.

use std::time::{Duration, Instant};

use cojoin_e2e::acl::{Acl, Operation};
use cojoin_e2e::broker::{toml_options, Auth, Kafka};
use cojoin_e2e::scenario::{run_dir, serial};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

/// A produce by `cojoin` over `how`: its delivery report.
fn produce_as(kafka: &Kafka, how: Auth, topic: &str) -> Result<(), KafkaError> {
    let (bootstrap, settings) = kafka.cojoin_kafka_settings(how);
    Kafka::try_produce(&bootstrap, &settings, topic)
}

fn assert_refused(kafka: &Kafka, how: Auth, topic: &str) {
    match produce_as(kafka, how, topic) {
        Err(KafkaError::MessageProduction(RDKafkaErrorCode::TopicAuthorizationFailed)) => {}
        other => panic!("cojoin over {how:?}: expected TopicAuthorizationFailed, got {other:?}"),
    }
}

#[test]
fn cojoin_produces_over_every_login_only_while_an_acl_allows_it() {
    let _serial = serial();
    let dir = run_dir("cojoin_produces_over_every_login_only_while_an_acl_allows_it");
    let started = Instant::now();
    let kafka = Kafka::start_secured(&dir);
    eprintln!("secured broker serving after {:?}", started.elapsed());
    let security = kafka.security.as_ref().unwrap();
    assert_eq!(kafka.bootstrap, security.sasl_ssl);
    assert!(security.cojoin.password.starts_with("cojoin-secret-"));

    let topic = format!("secured-{}", std::process::id());
    kafka.create_topic(&topic, 1);

    // No ACL: the broker knows cojoin (its login succeeds) but lets it do nothing.
    assert_refused(&kafka, Auth::Scram512, &topic);

    let may_write = [
        Acl::topic(&topic, Operation::Write, "User:cojoin"),
        Acl::topic(&topic, Operation::Describe, "User:cojoin"),
    ];
    let granting = Instant::now();
    kafka.grant(&may_write);
    eprintln!("grant applied after {:?}", granting.elapsed());
    // Each login is the same principal: SCRAM and PLAIN by user name, mTLS by the certificate's
    // CN, OAUTHBEARER by the token's subject.
    for how in Auth::ALL {
        produce_as(&kafka, how, &topic)
            .unwrap_or_else(|e| panic!("cojoin over {how:?}, granted Write: {e}"));
    }
    // With Write granted, a wrong password is still refused: the login, not an ACL, stops it.
    let (bootstrap, mut wrong) = kafka.cojoin_kafka_settings(Auth::Scram512);
    for (k, v) in &mut wrong {
        if k == "sasl.password" {
            v.push('x');
        }
    }
    match Kafka::try_produce(&bootstrap, &wrong, &topic) {
        Err(KafkaError::Global(RDKafkaErrorCode::Authentication)) => {}
        other => panic!("cojoin with a wrong password: expected Authentication, got {other:?}"),
    }
    // The super user's helpers read what cojoin wrote.
    assert_eq!(kafka.end_offsets(&topic, 1), vec![Auth::ALL.len() as i64]);
    let mut reader = kafka.reader(&topic, 1);
    reader.read_until("cojoin's records", Duration::from_secs(30), |r| {
        r.len() == Auth::ALL.len()
    });
    assert_eq!(
        kafka.committed("nobody", &topic, 1),
        vec![(-1, String::new())]
    );

    let revoking = Instant::now();
    kafka.revoke(&may_write);
    eprintln!("revoke applied after {:?}", revoking.elapsed());
    for how in Auth::ALL {
        assert_refused(&kafka, how, &topic);
    }

    // What a host config gets: the SASL_SSL listener and cojoin's password for SCRAM, the SSL
    // listener and cojoin's certificate for mTLS.
    let (bootstrap, scram) = kafka.cojoin_kafka_settings(Auth::Scram512);
    assert_eq!(bootstrap, security.sasl_ssl);
    let toml = toml_options(&scram);
    assert!(
        toml.contains("\"sasl.mechanism\" = \"SCRAM-SHA-512\""),
        "{toml}"
    );
    assert!(toml.contains(&security.cojoin.password), "{toml}");
    let (bootstrap, mtls) = kafka.cojoin_kafka_settings(Auth::Mtls);
    assert_eq!(bootstrap, security.ssl);
    assert!(mtls.contains(&(
        "ssl.certificate.location".to_owned(),
        security.cojoin.certificate.display().to_string()
    )));
    eprintln!("whole test: {:?}", started.elapsed());
}
