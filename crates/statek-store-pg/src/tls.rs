//! TLS for every connection a [`crate::PgStore`] opens: rustls (ring
//! provider) through tokio-postgres-rustls, configured from libpq's
//! `sslmode`, `sslrootcert`, `sslcert` and `sslkey` as libpq reads them.
//!
//! | sslmode | encrypted | chain checked | host name checked |
//! |---|---|---|---|
//! | disable | no | - | - |
//! | prefer (default) | if the server offers TLS | no | no |
//! | require | yes | no (yes when a root certificate file exists, as libpq) | no |
//! | verify-ca | yes | yes | no |
//! | verify-full | yes | yes | yes |
//!
//! Root certificates: `sslrootcert=FILE` (PEM), `sslrootcert=system` (the
//! operating system's store; implies verify-full, a weaker explicit mode is
//! refused, as libpq 16+), else libpq's default `~/.postgresql/root.crt`
//! when it exists. Client certificate: `sslcert`/`sslkey` (PEM), else
//! `~/.postgresql/postgresql.crt`/`postgresql.key` when the certificate
//! exists. The `PGSSL*` environment variables are not read.

use crate::ConnectionError;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use statek_policy::EchoedValue;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::conninfo::{SslMode, TlsParams};
use crate::StoreError;

/// How a store's connections use TLS: the effective `sslmode` and what the
/// connection string's files gave. The rustls configuration is assembled
/// from it by [`TlsSettings::connector`].
#[derive(Clone)]
pub(crate) struct TlsSettings {
    mode: SslMode,
    verification: Verification,
    client_auth: Option<Arc<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>>,
    sni: bool,
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSettings")
            .field("mode", &self.mode)
            .field("client_certificate", &self.client_auth.is_some())
            .finish_non_exhaustive()
    }
}

/// What the server's certificate is checked against.
#[derive(Clone)]
enum Verification {
    /// Nothing (prefer, require without a root file).
    None,
    /// The chain, not the host name.
    Chain(Arc<RootCertStore>),
    /// The chain and the host name.
    Full(Arc<RootCertStore>),
}

fn config_error(detail: String) -> StoreError {
    StoreError::Connection(ConnectionError::TlsConfiguration {
        detail,
        source: None,
    })
}

fn config_error_with(
    detail: String,
    source: impl std::error::Error + Send + Sync + 'static,
) -> StoreError {
    StoreError::Connection(ConnectionError::TlsConfiguration {
        detail,
        source: Some(Box::new(source)),
    })
}

fn shown(path: &Path) -> EchoedValue<'_> {
    EchoedValue(path.to_str().unwrap_or("(a path that is not UTF-8)"))
}

/// `~/.postgresql/<name>`, libpq's default location, when `HOME` is set.
fn default_file(name: &str) -> Option<PathBuf> {
    let home = std::env::var_os("HOME").filter(|home| !home.is_empty())?;
    Some(Path::new(&home).join(".postgresql").join(name))
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsSettings {
    /// Settings for a connection string's TLS parameters. Files are read
    /// now, so a missing or broken file fails here, before any connection.
    ///
    /// `only_unix_sockets`: every host is a Unix socket, where libpq never
    /// uses TLS (the mode becomes `disable`).
    pub(crate) fn from_params(
        params: &TlsParams,
        only_unix_sockets: bool,
    ) -> Result<Self, StoreError> {
        let system = params.sslrootcert.as_deref() == Some("system");
        let mode = match (params.sslmode, system) {
            (None, true) => SslMode::VerifyFull,
            (Some(mode), true) if mode != SslMode::VerifyFull => {
                return Err(config_error(format!(
                    "weak sslmode {mode} may not be used with sslrootcert=system (use verify-full)"
                )))
            }
            (mode, _) => mode.unwrap_or(SslMode::Prefer),
        };
        if only_unix_sockets || mode == SslMode::Disable {
            return Ok(Self::unverified(SslMode::Disable));
        }
        let roots = if system {
            Some(system_roots()?)
        } else {
            match params.sslrootcert.as_deref() {
                Some(file) => Some(Arc::new(read_roots(Path::new(file))?)),
                None => match default_file("root.crt").filter(|file| file.is_file()) {
                    Some(file) => Some(Arc::new(read_roots(&file)?)),
                    None => None,
                },
            }
        };
        let verification = match (mode, roots) {
            (SslMode::Prefer, _) | (SslMode::Require, None) => Verification::None,
            // libpq: "if a root CA file exists, the behavior of
            // sslmode=require will be the same as that of verify-ca".
            (SslMode::Require | SslMode::VerifyCa, Some(roots)) => Verification::Chain(roots),
            (SslMode::VerifyFull, Some(roots)) => Verification::Full(roots),
            (SslMode::VerifyCa | SslMode::VerifyFull, None) => {
                let default = default_file("root.crt").map_or_else(
                    || "~/.postgresql/root.crt".to_owned(),
                    |f| shown(&f).to_string(),
                );
                return Err(config_error(format!(
                    "sslmode={mode} needs root certificates, and the default file {default} does \
                     not exist: give sslrootcert=FILE, sslrootcert=system for the system's roots, \
                     or a weaker sslmode"
                )));
            }
            (SslMode::Disable, _) => Verification::None,
        };
        let settings = Self {
            mode,
            verification,
            client_auth: client_certificate(params)?.map(Arc::new),
            sni: params.sslsni != Some(false),
        };
        // Assemble once now, so that a key that does not fit its
        // certificate fails here rather than at the first connection.
        settings.connector()?;
        Ok(settings)
    }

    /// `disable`, `prefer` or `require` without certificate checks or
    /// files, for [`crate::StoreConfig::from_pg_config`].
    pub(crate) fn unverified(mode: SslMode) -> Self {
        Self {
            mode,
            verification: Verification::None,
            client_auth: None,
            sni: true,
        }
    }

    /// The effective sslmode.
    pub(crate) fn mode(&self) -> SslMode {
        self.mode
    }

    /// The connector for `tokio_postgres::Config::connect` and the pool.
    ///
    /// # Errors
    /// [`ConnectionError::TlsConfiguration`](crate::ConnectionError::TlsConfiguration) when rustls refuses the
    /// combination (a client key that does not fit its certificate).
    pub(crate) fn connector(&self) -> Result<MakeRustlsConnect, StoreError> {
        let provider = provider();
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| config_error_with("no usable TLS protocol version".to_owned(), e))?;
        let builder = match &self.verification {
            Verification::None => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate { provider })),
            Verification::Chain(roots) => {
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(ChainOnly {
                        inner: webpki_verifier(roots.clone(), provider)?,
                    }))
            }
            Verification::Full(roots) => {
                builder.with_webpki_verifier(webpki_verifier(roots.clone(), provider)?)
            }
        };
        let mut client = match &self.client_auth {
            Some(auth) => builder
                .with_client_auth_cert(auth.0.clone(), auth.1.clone_key())
                .map_err(|e| {
                    config_error_with(
                        "the client certificate (sslcert) and key (sslkey) cannot be used together"
                            .to_owned(),
                        e,
                    )
                })?,
            None => builder.with_no_client_auth(),
        };
        client.enable_sni = self.sni;
        Ok(MakeRustlsConnect::new(client))
    }
}

fn webpki_verifier(
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, StoreError> {
    WebPkiServerVerifier::builder_with_provider(roots, provider)
        .build()
        .map_err(|e| config_error_with("the root certificates cannot be used".to_owned(), e))
}

fn system_roots() -> Result<Arc<RootCertStore>, StoreError> {
    let loaded = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(loaded.certs);
    if added == 0 {
        let detail =
            "sslrootcert=system found no usable certificate in the system's store".to_owned();
        return Err(match loaded.errors.into_iter().next() {
            Some(first) => config_error_with(detail, first),
            None => config_error(detail),
        });
    }
    Ok(Arc::new(roots))
}

fn read_certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, StoreError> {
    let bytes = std::fs::read(path).map_err(|e| {
        config_error_with(format!("cannot read the {what} file {}", shown(path)), e)
    })?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            config_error_with(
                format!("the {what} file {} is not valid PEM", shown(path)),
                e,
            )
        })?;
    if certificates.is_empty() {
        return Err(config_error(format!(
            "the {what} file {} holds no PEM certificate",
            shown(path)
        )));
    }
    Ok(certificates)
}

fn read_roots(path: &Path) -> Result<RootCertStore, StoreError> {
    let mut roots = RootCertStore::empty();
    for certificate in read_certificates(path, "root certificate (sslrootcert)")? {
        roots.add(certificate).map_err(|e| {
            config_error_with(
                format!(
                    "the root certificate file {} holds an unusable certificate",
                    shown(path)
                ),
                e,
            )
        })?;
    }
    Ok(roots)
}

/// `sslcert` and `sslkey`, or libpq's default files when the default
/// certificate exists.
fn client_certificate(
    params: &TlsParams,
) -> Result<Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>, StoreError> {
    let certificate = match &params.sslcert {
        Some(file) => PathBuf::from(file),
        None => match default_file("postgresql.crt").filter(|file| file.is_file()) {
            Some(file) => file,
            None => return Ok(None),
        },
    };
    let key = match &params.sslkey {
        Some(file) => PathBuf::from(file),
        None => default_file("postgresql.key").ok_or_else(|| {
            config_error("sslcert is given but sslkey is not (and HOME is not set)".to_owned())
        })?,
    };
    let chain = read_certificates(&certificate, "client certificate (sslcert)")?;
    let key = PrivateKeyDer::from_pem_file(&key).map_err(|e| {
        config_error_with(
            format!(
                "cannot read a PEM private key from the sslkey file {}",
                shown(&key)
            ),
            e,
        )
    })?;
    Ok(Some((chain, key)))
}

/// `prefer` and `require`: encrypt, check nothing about the certificate
/// (libpq's behaviour), but still check the handshake signatures.
#[derive(Debug)]
struct AcceptAnyCertificate {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// `verify-ca`: the full web-PKI check, except that a certificate valid for
/// another host name is accepted. webpki checks the chain (and validity
/// period) before the name, so "not valid for name" means the chain held.
#[derive(Debug)]
struct ChainOnly {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
