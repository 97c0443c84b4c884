//! TLS for the development and test clusters: a CA, a server certificate
//! and a client certificate made with rcgen into `<cluster>/tls/`,
//! `ssl=on`, and pg_hba.conf lines for three test roles (tests create the
//! roles): [`TLS_ONLY_ROLE`] may connect over TLS only,
//! [`CLIENT_CERT_ROLE`] only over TLS with the client certificate
//! (`cert` authentication), and [`PASSWORD_ROLE`] only with a password
//! (`scram-sha-256`). Tests read the CA's path from [`TLS_CA_ENV`]; the
//! client certificate and key lie next to it (`client.crt`, `client.key`).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

use super::server_user::ServerUser;

/// Environment variable that names the test clusters' CA certificate
/// (PEM) for the TLS tests.
pub const TLS_CA_ENV: &str = "STATEK_TEST_TLS_CA";

/// A role that pg_hba.conf admits over TLS only (tests create it).
pub const TLS_ONLY_ROLE: &str = "statek_tls_only";

/// A role that pg_hba.conf admits with the client certificate only; the
/// certificate's common name.
pub const CLIENT_CERT_ROLE: &str = "statek_tls_cert";

/// A role that pg_hba.conf admits with a password only.
pub const PASSWORD_ROLE: &str = "statek_password";

/// The first line of the pg_hba.conf block this module adds.
const HBA_MARKER: &str = "# statek test roles: TLS only, client certificate only, password only";

/// The certificate files of one cluster.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// `<cluster>/tls`.
    pub dir: PathBuf,
}

impl TlsFiles {
    /// The files under `cluster_dir`.
    pub fn of(cluster_dir: &Path) -> Self {
        Self {
            dir: cluster_dir.join("tls"),
        }
    }

    /// The CA certificate (PEM): what clients give as `sslrootcert`.
    pub fn ca_certificate(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// The server certificate (PEM), for `ssl_cert_file`.
    pub fn server_certificate(&self) -> PathBuf {
        self.dir.join("server.crt")
    }

    /// The server key (PEM, mode 0600), for `ssl_key_file`.
    pub fn server_key(&self) -> PathBuf {
        self.dir.join("server.key")
    }

    /// The client certificate (PEM) for [`CLIENT_CERT_ROLE`].
    pub fn client_certificate(&self) -> PathBuf {
        self.dir.join("client.crt")
    }

    /// The client key (PEM, mode 0600).
    pub fn client_key(&self) -> PathBuf {
        self.dir.join("client.key")
    }

    fn all(&self) -> [PathBuf; 5] {
        [
            self.ca_certificate(),
            self.server_certificate(),
            self.server_key(),
            self.client_certificate(),
            self.client_key(),
        ]
    }

    /// Writes a new CA, a server certificate for `localhost` and
    /// `127.0.0.1` and a client certificate for [`CLIENT_CERT_ROLE`] unless
    /// all the files exist; the server user owns them.
    pub fn ensure(&self, server_user: Option<&ServerUser>) -> Result<()> {
        if self.all().iter().all(|file| file.is_file()) {
            return Ok(());
        }
        fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        let made = generate().context("generating TLS certificates")?;
        write(&self.ca_certificate(), &made.ca, 0o644, server_user)?;
        write(&self.server_certificate(), &made.server, 0o644, server_user)?;
        write(&self.server_key(), &made.server_key, 0o600, server_user)?;
        write(&self.client_certificate(), &made.client, 0o644, server_user)?;
        write(&self.client_key(), &made.client_key, 0o600, server_user)?;
        if let Some(user) = server_user {
            user.chown(&self.dir)?;
        }
        Ok(())
    }
}

fn write(path: &Path, text: &str, mode: u32, server_user: Option<&ServerUser>) -> Result<()> {
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting the mode of {}", path.display()))?;
    if let Some(user) = server_user {
        user.chown(path)?;
    }
    Ok(())
}

/// The certificates and keys of one cluster, PEM.
struct Made {
    ca: String,
    server: String,
    server_key: String,
    client: String,
    client_key: String,
}

fn generate() -> Result<Made> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "statek test CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let server_key = KeyPair::generate()?;
    let mut server_params =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])?;
    server_params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let server_cert = server_params.signed_by(&server_key, &issuer)?;

    let client_key = KeyPair::generate()?;
    let mut client_params = CertificateParams::new(Vec::<String>::new())?;
    client_params
        .distinguished_name
        .push(DnType::CommonName, CLIENT_CERT_ROLE);
    let client_cert = client_params.signed_by(&client_key, &issuer)?;
    Ok(Made {
        ca: ca_cert.pem(),
        server: server_cert.pem(),
        server_key: server_key.serialize_pem(),
        client: client_cert.pem(),
        client_key: client_key.serialize_pem(),
    })
}

/// Puts the TLS-only lines at the top of `pg_hba.conf` (first match wins)
/// unless they are there already.
pub fn ensure_hba(data_dir: &Path) -> Result<()> {
    let path = data_dir.join("pg_hba.conf");
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    if text.contains(HBA_MARKER) {
        return Ok(());
    }
    let mut block = format!("{HBA_MARKER}\n");
    for (kind, role, method) in [
        ("hostnossl", TLS_ONLY_ROLE, "reject"),
        ("hostnossl", CLIENT_CERT_ROLE, "reject"),
        ("hostssl", CLIENT_CERT_ROLE, "cert"),
        ("host", PASSWORD_ROLE, "scram-sha-256"),
    ] {
        for address in ["0.0.0.0/0", "::/0"] {
            block.push_str(&format!("{kind} all {role} {address} {method}\n"));
        }
    }
    block.push('\n');
    // Writing in place keeps the file's owner (the server user).
    fs::write(&path, format!("{block}{text}"))
        .with_context(|| format!("writing {}", path.display()))
}

/// The `-c` settings that turn TLS on with these files.
pub fn server_settings(files: &TlsFiles) -> Vec<String> {
    vec![
        "ssl=on".to_owned(),
        format!("ssl_ca_file='{}'", files.ca_certificate().display()),
        format!("ssl_cert_file='{}'", files.server_certificate().display()),
        format!("ssl_key_file='{}'", files.server_key().display()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificates_parse_and_chain() {
        let made = generate().unwrap();
        for certificate in [&made.ca, &made.server, &made.client] {
            assert!(certificate.starts_with("-----BEGIN CERTIFICATE-----"));
        }
        for key in [&made.server_key, &made.client_key] {
            assert!(key.starts_with("-----BEGIN PRIVATE KEY-----"));
        }
        assert_ne!(made.ca, made.server);
    }

    #[test]
    fn hba_lines_are_added_once_at_the_top() {
        let dir = std::env::temp_dir().join(format!("statek-xtask-hba-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("pg_hba.conf"), "host all all 127.0.0.1/32 trust\n").unwrap();
        ensure_hba(&dir).unwrap();
        ensure_hba(&dir).unwrap();
        let text = fs::read_to_string(dir.join("pg_hba.conf")).unwrap();
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(
            text,
            "# statek test roles: TLS only, client certificate only, password only\n\
             hostnossl all statek_tls_only 0.0.0.0/0 reject\n\
             hostnossl all statek_tls_only ::/0 reject\n\
             hostnossl all statek_tls_cert 0.0.0.0/0 reject\n\
             hostnossl all statek_tls_cert ::/0 reject\n\
             hostssl all statek_tls_cert 0.0.0.0/0 cert\n\
             hostssl all statek_tls_cert ::/0 cert\n\
             host all statek_password 0.0.0.0/0 scram-sha-256\n\
             host all statek_password ::/0 scram-sha-256\n\n\
             host all all 127.0.0.1/32 trust\n"
        );
    }
}
