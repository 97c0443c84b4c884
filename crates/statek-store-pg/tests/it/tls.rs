//! TLS against a real PostgreSQL with `ssl=on`: the servers `cargo xtask
//! test` and `cargo xtask pg start` run have a CA, a server certificate
//! for `localhost` and `127.0.0.1` and a client certificate for
//! `statek_tls_cert`, made at start (rcgen, `crates/devpg/src/pg/tls.rs`), and
//! admit the role `statek_tls_only` over TLS only, `statek_tls_cert` with
//! its client certificate only and `statek_password` with a password only.
//! The CA's path comes in `STATEK_TEST_TLS_CA` (the client files lie next
//! to it); without it these tests fail, they never skip.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_store_pg::ConnectionError;
use std::path::PathBuf;

use statek_policy::WeightedFairnessPolicy;
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::{PgStore, SslMode, StoreConfig, StoreError, TlsFailure};

const TLS_CA_ENV: &str = "STATEK_TEST_TLS_CA";
const TLS_ONLY_ROLE: &str = "statek_tls_only";
const CLIENT_CERT_ROLE: &str = "statek_tls_cert";
const PASSWORD_ROLE: &str = "statek_password";
/// Resolves nowhere; `hostaddr` says where to connect, `host` is what the
/// certificate is checked against.
const WRONG_HOST: &str = "statek-wrong-host.test";

fn ca_file() -> String {
    let path = std::env::var(TLS_CA_ENV).unwrap_or_else(|_| {
        panic!(
            "{TLS_CA_ENV} is not set: the TLS tests need the CA of a server with ssl=on. \
             Run `cargo xtask test`, or `cargo xtask pg start --version 17` and export the \
             {TLS_CA_ENV} it prints"
        )
    });
    assert!(
        PathBuf::from(&path).is_file(),
        "{TLS_CA_ENV}={path} is not a file"
    );
    path
}

/// `host=... port=... user=... dbname=...` of the test database, with
/// `host` replaced when given, plus `extra`.
fn conninfo(db: &TestDatabase, host: Option<&str>, extra: &str) -> String {
    let base = db.connection_string();
    let base = match host {
        Some(host) => base
            .split(' ')
            .map(|pair| {
                if pair.starts_with("host=") {
                    format!("host={host} hostaddr=127.0.0.1")
                } else {
                    pair.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join(" "),
        None => base,
    };
    format!("{base} {extra}")
}

/// Whether the session of a fresh unpooled connection is encrypted.
async fn encrypted(config: &StoreConfig) -> Result<bool, StoreError> {
    let client = config.connect_client().await?;
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

fn policy() -> WeightedFairnessPolicy {
    statek_store_pg::testing::policy("primary-v1", &[("tenant-a", 1)])
}

fn tls_failure(err: &StoreError) -> TlsFailure {
    assert!(!err.is_retryable(), "{err}");
    assert!(err.is_configuration(), "{err}");
    match err {
        StoreError::Connection(ConnectionError::Tls { failure, .. }) => *failure,
        other => panic!("expected StoreError::Connection(ConnectionError::Tls), got {other:?}"),
    }
}

/// The whole printed chain, as the CLI prints it.
fn chain(err: &StoreError) -> String {
    let mut text = err.to_string();
    let mut next = std::error::Error::source(err);
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
}

#[tokio::test]
async fn verify_full_connects_encrypted_through_the_pool_and_alone() {
    let ca = ca_file();
    let db = TestDatabase::create_empty().await;
    for host in [None, Some("localhost")] {
        let config = StoreConfig::from_url(&conninfo(
            &db,
            host,
            &format!("sslmode=verify-full sslrootcert={ca}"),
        ))
        .unwrap();
        assert_eq!(config.ssl_mode(), SslMode::VerifyFull);
        assert!(encrypted(&config).await.unwrap(), "{host:?}");
        // The test server is fast, not durable.
        let store = PgStore::new(
            config.durability_policy(statek_store_pg::DurabilityPolicy::AllowNoDurability),
        )
        .unwrap();
        store.migrate().await.unwrap();
        store.register(&policy()).await.unwrap();
    }
    // The URL form says the same.
    let url = format!(
        "postgres://{}@127.0.0.1:{}/{}?sslmode=verify-full&sslrootcert={ca}",
        db.pg_config().get_user().unwrap(),
        db.pg_config().get_ports()[0],
        db.name()
    );
    assert!(encrypted(&StoreConfig::from_url(&url).unwrap())
        .await
        .unwrap());
}

#[tokio::test]
async fn verify_full_refuses_a_certificate_for_another_host() {
    let ca = ca_file();
    let db = TestDatabase::create_empty().await;
    let config = StoreConfig::from_url(&conninfo(
        &db,
        Some(WRONG_HOST),
        &format!("sslmode=verify-full sslrootcert={ca}"),
    ))
    .unwrap();
    let err = encrypted(&config).await.unwrap_err();
    assert_eq!(tls_failure(&err), TlsFailure::HostNameMismatch);
    assert_eq!(
        err.to_string(),
        "tls connection to PostgreSQL failed: the server's certificate does not name the host \
         connected to (sslmode=verify-full)"
    );
    assert!(
        chain(&err).contains("certificate not valid for name \"statek-wrong-host.test\""),
        "{}",
        chain(&err)
    );
    // The pool classifies it the same way.
    let store = PgStore::new(config).unwrap();
    let pooled = store.register(&policy()).await.unwrap_err();
    assert_eq!(tls_failure(&pooled), TlsFailure::HostNameMismatch);

    // verify-ca checks the chain only: the same host name is accepted.
    let config = StoreConfig::from_url(&conninfo(
        &db,
        Some(WRONG_HOST),
        &format!("sslmode=verify-ca sslrootcert={ca}"),
    ))
    .unwrap();
    assert!(encrypted(&config).await.unwrap());
}

#[tokio::test]
async fn verify_ca_and_verify_full_refuse_an_untrusted_ca() {
    let db = TestDatabase::create_empty().await;
    // A CA that did not sign the server's certificate.
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let other_ca = params.self_signed(&key).unwrap();
    let file = std::env::temp_dir().join(format!("statek-other-ca-{}.crt", db.name()));
    std::fs::write(&file, other_ca.pem()).unwrap();
    for mode in ["verify-ca", "verify-full"] {
        let config = StoreConfig::from_url(&conninfo(
            &db,
            None,
            &format!("sslmode={mode} sslrootcert={}", file.display()),
        ))
        .unwrap();
        let err = encrypted(&config).await.unwrap_err();
        assert_eq!(
            tls_failure(&err),
            TlsFailure::UntrustedCertificate,
            "{mode}"
        );
        assert_eq!(
            err.to_string(),
            "tls connection to PostgreSQL failed: the server's certificate is not signed by a \
             trusted root certificate (sslrootcert)"
        );
        assert!(
            chain(&err).ends_with("invalid peer certificate: UnknownIssuer"),
            "{}",
            chain(&err)
        );
    }
    let _ = std::fs::remove_file(&file);
}

#[tokio::test]
async fn require_encrypts_without_checking_the_certificate() {
    let db = TestDatabase::create_empty().await;
    // libpq's default root file would turn require into verify-ca.
    if let Some(home) = std::env::var_os("HOME") {
        let default = PathBuf::from(home).join(".postgresql/root.crt");
        assert!(
            !default.exists(),
            "{} exists: this test needs require without a root file",
            default.display()
        );
    }
    // Wrong host name and no CA at all: require does not look.
    let require =
        StoreConfig::from_url(&conninfo(&db, Some(WRONG_HOST), "sslmode=require")).unwrap();
    assert!(encrypted(&require).await.unwrap());
    // libpq's default, prefer, also encrypts when the server offers TLS.
    let prefer = StoreConfig::from_url(&conninfo(&db, None, "")).unwrap();
    assert_eq!(prefer.ssl_mode(), SslMode::Prefer);
    assert!(encrypted(&prefer).await.unwrap());
    // The check can fail: disable is plaintext.
    let disable = StoreConfig::from_url(&conninfo(&db, None, "sslmode=disable")).unwrap();
    assert!(!encrypted(&disable).await.unwrap());
}

/// Creates a login role (cluster-wide, so other tests may have made it).
async fn create_role(db: &TestDatabase, role: &str, password: Option<&str>) {
    let password = password.map_or_else(String::new, |p| format!(" PASSWORD '{p}'"));
    db.client()
        .await
        .batch_execute(&format!(
            "DO $$ BEGIN CREATE ROLE {role} LOGIN{password}; \
             EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
        ))
        .await
        .unwrap();
}

/// The test database's connection string as `role`, plus `extra`.
fn as_role(db: &TestDatabase, role: &str, extra: &str) -> String {
    conninfo(db, None, extra).replace(
        &format!("user={}", db.pg_config().get_user().unwrap()),
        &format!("user={role}"),
    )
}

#[tokio::test]
async fn a_tls_only_role_is_refused_without_tls() {
    let ca = ca_file();
    let db = TestDatabase::create_empty().await;
    create_role(&db, TLS_ONLY_ROLE, None).await;
    let as_role = |extra: &str| StoreConfig::from_url(&as_role(&db, TLS_ONLY_ROLE, extra)).unwrap();
    let err = encrypted(&as_role("sslmode=disable")).await.unwrap_err();
    assert!(!err.is_retryable() && err.is_configuration(), "{err}");
    assert_eq!(err.sqlstate(), Some("28000"));
    assert_eq!(
        err.to_string(),
        format!(
            "PostgreSQL refused the connection (28000): pg_hba.conf rejects connection for host \
             \"127.0.0.1\", user \"{TLS_ONLY_ROLE}\", database \"{}\", no encryption",
            db.name()
        )
    );
    // Over TLS the same role gets in.
    assert!(
        encrypted(&as_role(&format!("sslmode=verify-full sslrootcert={ca}")))
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn a_missing_database_and_a_refused_role_are_not_retryable() {
    let db = TestDatabase::create_empty().await;
    let missing = StoreConfig::from_url(&conninfo(&db, None, "sslmode=disable").replace(
        &format!("dbname={}", db.name()),
        "dbname=statek_no_such_database",
    ))
    .unwrap();
    let err = PgStore::new(missing)
        .unwrap()
        .register(&policy())
        .await
        .unwrap_err();
    assert!(!err.is_retryable() && err.is_configuration(), "{err}");
    assert_eq!(
        err.to_string(),
        "PostgreSQL refused the connection (3D000): database \"statek_no_such_database\" does \
         not exist"
    );
    let no_role = StoreConfig::from_url(&conninfo(&db, None, "sslmode=disable").replace(
        &format!("user={}", db.pg_config().get_user().unwrap()),
        "user=statek_no_such_role",
    ))
    .unwrap();
    let err = no_role.connect_client().await.unwrap_err();
    assert!(!err.is_retryable() && err.is_configuration(), "{err}");
    assert_eq!(
        err.to_string(),
        "PostgreSQL refused the connection (28000): role \"statek_no_such_role\" does not exist"
    );
}

#[tokio::test]
async fn a_refused_port_is_retryable_and_says_why() {
    // A port nothing listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = StoreConfig::from_url(&format!(
        "host=127.0.0.1 port={port} user=statek connect_timeout=5"
    ))
    .unwrap();
    let err = config.connect_client().await.unwrap_err();
    assert!(err.is_retryable() && !err.is_configuration(), "{err}");
    assert!(
        matches!(err, StoreError::Connection(ConnectionError::Lost(_))),
        "{err:?}"
    );
    assert_eq!(
        chain(&err),
        "connection to PostgreSQL failed: error connecting to server: Connection refused (os \
         error 111)"
    );
}

#[tokio::test]
async fn a_client_certificate_logs_in_where_the_server_demands_one() {
    let ca = ca_file();
    let dir = PathBuf::from(&ca).parent().unwrap().to_path_buf();
    let (cert, key) = (dir.join("client.crt"), dir.join("client.key"));
    let db = TestDatabase::create_empty().await;
    create_role(&db, CLIENT_CERT_ROLE, None).await;
    let with_cert = as_role(
        &db,
        CLIENT_CERT_ROLE,
        &format!(
            "sslmode=verify-full sslrootcert={ca} sslcert={} sslkey={}",
            cert.display(),
            key.display()
        ),
    );
    assert!(encrypted(&StoreConfig::from_url(&with_cert).unwrap())
        .await
        .unwrap());
    // Without it the server refuses (the check can fail). HOME must not
    // hold libpq's default client certificate for this to hold.
    if let Some(home) = std::env::var_os("HOME") {
        assert!(!PathBuf::from(home)
            .join(".postgresql/postgresql.crt")
            .exists());
    }
    let without = as_role(
        &db,
        CLIENT_CERT_ROLE,
        &format!("sslmode=verify-full sslrootcert={ca}"),
    );
    let err = encrypted(&StoreConfig::from_url(&without).unwrap())
        .await
        .unwrap_err();
    assert!(err.is_configuration() && !err.is_retryable(), "{err}");
    assert_eq!(
        err.to_string(),
        "PostgreSQL refused the connection (28000): connection requires a valid client certificate"
    );
    // A key that does not belong to the certificate fails before connecting.
    let other_key = std::env::temp_dir().join(format!("statek-other-key-{}.pem", db.name()));
    std::fs::write(
        &other_key,
        rcgen::KeyPair::generate().unwrap().serialize_pem(),
    )
    .unwrap();
    let mismatched = StoreConfig::from_url(&as_role(
        &db,
        CLIENT_CERT_ROLE,
        &format!(
            "sslmode=verify-full sslrootcert={ca} sslcert={} sslkey={}",
            cert.display(),
            other_key.display()
        ),
    ))
    .unwrap_err();
    let _ = std::fs::remove_file(&other_key);
    assert!(
        matches!(
            mismatched,
            StoreError::Connection(ConnectionError::TlsConfiguration { .. })
        ),
        "{mismatched:?}"
    );
    assert_eq!(
        mismatched.to_string(),
        "tls configuration: the client certificate (sslcert) and key (sslkey) cannot be used together"
    );
}

#[tokio::test]
async fn a_wrong_password_is_an_authentication_failure_not_a_retry() {
    let db = TestDatabase::create_empty().await;
    create_role(&db, PASSWORD_ROLE, Some("right-password")).await;
    let good = as_role(&db, PASSWORD_ROLE, "password=right-password");
    assert!(StoreConfig::from_url(&good)
        .unwrap()
        .connect_client()
        .await
        .is_ok());
    let bad = as_role(&db, PASSWORD_ROLE, "password=wrong-password");
    let err = StoreConfig::from_url(&bad)
        .unwrap()
        .connect_client()
        .await
        .unwrap_err();
    assert!(err.is_configuration() && !err.is_retryable(), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "PostgreSQL refused the connection (28P01): password authentication failed for user \"{PASSWORD_ROLE}\""
        )
    );
    assert!(!chain(&err).contains("wrong-password"), "{}", chain(&err));
    // No password at all: the driver refuses before the server answers.
    let none = as_role(&db, PASSWORD_ROLE, "");
    let err = StoreConfig::from_url(&none)
        .unwrap()
        .connect_client()
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Connection(ConnectionError::Settings { .. })
        ),
        "{err:?}"
    );
    assert!(err.is_configuration() && !err.is_retryable(), "{err}");
    assert_eq!(
        chain(&err),
        "cannot connect to PostgreSQL with these settings: invalid configuration: password missing"
    );
}

#[tokio::test]
async fn require_against_a_server_without_tls_is_a_settings_error() {
    // A stand-in server that answers the SSLRequest with "N" (no TLS), as
    // PostgreSQL with ssl=off does.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = [0; 8];
        socket.read_exact(&mut request).await.unwrap();
        assert_eq!(request, [0, 0, 0, 8, 4, 210, 22, 47], "an SSLRequest");
        socket.write_all(b"N").await.unwrap();
        socket
    });
    let config = StoreConfig::from_url(&format!(
        "host=127.0.0.1 port={port} user=statek sslmode=require"
    ))
    .unwrap();
    let err = config.connect_client().await.unwrap_err();
    drop(server.await.unwrap());
    assert!(
        matches!(
            err,
            StoreError::Connection(ConnectionError::Settings { .. })
        ),
        "{err:?}"
    );
    assert!(err.is_configuration() && !err.is_retryable(), "{err}");
    assert_eq!(
        chain(&err),
        "cannot connect to PostgreSQL with these settings: error performing TLS handshake: \
         server does not support TLS"
    );
}

#[tokio::test]
async fn sslrootcert_system_means_verify_full_against_the_system_roots() {
    let db = TestDatabase::create_empty().await;
    // The test CA is in no system store: the system's roots refuse it.
    let config = StoreConfig::from_url(&conninfo(&db, None, "sslrootcert=system")).unwrap();
    assert_eq!(config.ssl_mode(), SslMode::VerifyFull);
    let err = encrypted(&config).await.unwrap_err();
    assert_eq!(tls_failure(&err), TlsFailure::UntrustedCertificate);
}
