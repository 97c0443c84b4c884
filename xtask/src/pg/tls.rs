//! TLS for the development and test clusters: a CA and a server
//! certificate made with rcgen into `<cluster>/tls/`, `ssl=on`, and
//! pg_hba.conf lines that let the role [`TLS_ONLY_ROLE`] connect over TLS
//! only. Tests read the CA's path from [`TLS_CA_ENV`].

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

use super::server_user::ServerUser;

/// Environment variable that names the test clusters' CA certificate
/// (PEM) for the TLS tests.
pub const TLS_CA_ENV: &str = "STATEK_TEST_TLS_CA";

/// A role that pg_hba.conf admits over TLS only (tests create it).
pub const TLS_ONLY_ROLE: &str = "statek_tls_only";

/// The first line of the pg_hba.conf block this module adds.
const HBA_MARKER: &str = "# statek: the role statek_tls_only may connect over TLS only";

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

    /// Writes a new CA and a server certificate for `localhost` and
    /// `127.0.0.1` unless all three files exist; the server user owns them.
    pub fn ensure(&self, server_user: Option<&ServerUser>) -> Result<()> {
        if self.ca_certificate().is_file()
            && self.server_certificate().is_file()
            && self.server_key().is_file()
        {
            return Ok(());
        }
        fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        let (ca, server, key) = generate().context("generating TLS certificates")?;
        write(&self.ca_certificate(), &ca, 0o644, server_user)?;
        write(&self.server_certificate(), &server, 0o644, server_user)?;
        write(&self.server_key(), &key, 0o600, server_user)?;
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

/// (CA certificate, server certificate, server key), PEM.
fn generate() -> Result<(String, String, String)> {
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
    Ok((ca_cert.pem(), server_cert.pem(), server_key.serialize_pem()))
}

/// Puts the TLS-only lines at the top of `pg_hba.conf` (first match wins)
/// unless they are there already.
pub fn ensure_hba(data_dir: &Path) -> Result<()> {
    let path = data_dir.join("pg_hba.conf");
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    if text.contains(HBA_MARKER) {
        return Ok(());
    }
    let block = format!(
        "{HBA_MARKER}\nhostnossl all {TLS_ONLY_ROLE} 0.0.0.0/0 reject\n\
         hostnossl all {TLS_ONLY_ROLE} ::/0 reject\n\n"
    );
    // Writing in place keeps the file's owner (the server user).
    fs::write(&path, format!("{block}{text}"))
        .with_context(|| format!("writing {}", path.display()))
}

/// The `-c` settings that turn TLS on with these files.
pub fn server_settings(files: &TlsFiles) -> Vec<String> {
    vec![
        "ssl=on".to_owned(),
        format!("ssl_cert_file='{}'", files.server_certificate().display()),
        format!("ssl_key_file='{}'", files.server_key().display()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificates_parse_and_chain() {
        let (ca, server, key) = generate().unwrap();
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(server.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(key.starts_with("-----BEGIN PRIVATE KEY-----"));
        assert_ne!(ca, server);
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
            "# statek: the role statek_tls_only may connect over TLS only\n\
             hostnossl all statek_tls_only 0.0.0.0/0 reject\n\
             hostnossl all statek_tls_only ::/0 reject\n\n\
             host all all 127.0.0.1/32 trust\n"
        );
    }
}
