//! libpq connection strings: the parameters tokio-postgres's parser does not
//! know (`sslmode=verify-ca|verify-full`, `sslrootcert`, `sslcert`,
//! `sslkey`, ...) are taken out here, in both forms libpq reads (URLs and
//! `key=value` strings), and the rest is handed to `tokio_postgres::Config`.
//!
//! Nothing here ever echoes a value of the string (it may hold a password):
//! errors name the parameter, and a key only when it looks like one.

use crate::ConnectionError;
use std::borrow::Cow;
use std::fmt;

use statek_policy::EchoedValue;

use crate::StoreError;

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it, plaintext otherwise; the certificate
    /// is not checked (libpq's default).
    Prefer,
    /// TLS or nothing; the certificate is not checked (unless a root
    /// certificate file is present: then as `VerifyCa`, as libpq does).
    Require,
    /// TLS; the server's certificate chain must lead to a trusted root; the
    /// host name is not checked.
    VerifyCa,
    /// TLS; the chain must lead to a trusted root and the certificate must
    /// name the host connected to.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            _ => return None,
        })
    }

    /// The libpq spelling (`verify-full`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }

    /// What tokio-postgres is told: it knows disable, prefer and require;
    /// the verification modes are TLS-or-nothing like require.
    pub(crate) fn for_tokio_postgres(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Pg;
        match self {
            Self::Disable => Pg::Disable,
            Self::Prefer => Pg::Prefer,
            Self::Require | Self::VerifyCa | Self::VerifyFull => Pg::Require,
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The TLS parameters of a connection string, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TlsParams {
    pub sslmode: Option<SslMode>,
    pub sslrootcert: Option<String>,
    pub sslcert: Option<String>,
    pub sslkey: Option<String>,
    /// `sslsni=0` turns server name indication off.
    pub sslsni: Option<bool>,
}

/// A connection string split in two.
#[derive(Debug)]
pub(crate) struct Split {
    /// What tokio-postgres parses (same form as the input).
    pub rest: String,
    pub tls: TlsParams,
}

/// Parameters tokio-postgres's parser reads itself.
const TOKIO_POSTGRES_KEYS: &[&str] = &[
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "sslnegotiation",
    "host",
    "hostaddr",
    "port",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
];

/// libpq parameters statek knows but cannot honour: refused by name rather
/// than silently ignored.
const UNSUPPORTED_KEYS: &[&str] = &[
    "sslpassword",
    "sslcrl",
    "sslcrldir",
    "sslcertmode",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "requirepeer",
    "krbsrvname",
    "gsslib",
    "gssdelegation",
    "service",
    "passfile",
    "require_auth",
];

fn invalid(message: String) -> StoreError {
    StoreError::Connection(ConnectionError::InvalidConnectionString(message))
}

/// A key for an error message: itself when it looks like a parameter name
/// (ASCII letters, digits, `_`; at most 64 bytes), else a description, so
/// that a malformed string never leaks what may be part of a password.
fn printable_key(key: &str) -> String {
    if !key.is_empty()
        && key.len() <= 64
        && key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        format!("`{key}`")
    } else {
        format!(
            "a parameter whose name is not a libpq keyword ({} bytes)",
            key.len()
        )
    }
}

/// Reads one parameter into `tls`; returns false when tokio-postgres should
/// get it instead.
fn take(tls: &mut TlsParams, key: &str, value: &str) -> Result<bool, StoreError> {
    match key {
        "sslmode" => {
            let mode = SslMode::parse(value).ok_or_else(|| {
                invalid(format!(
                    "sslmode must be disable, prefer, require, verify-ca or verify-full, got {}",
                    EchoedValue(value)
                ))
            })?;
            tls.sslmode = Some(mode);
        }
        "sslrootcert" => tls.sslrootcert = Some(value.to_owned()),
        "sslcert" => tls.sslcert = Some(value.to_owned()),
        "sslkey" => tls.sslkey = Some(value.to_owned()),
        "sslsni" => {
            tls.sslsni = Some(match value {
                "1" => true,
                "0" => false,
                _ => return Err(invalid("sslsni must be 0 or 1".to_owned())),
            });
        }
        // Ignored by libpq itself since PostgreSQL 14 (no TLS compression).
        "sslcompression" => {
            if !matches!(value, "0" | "1") {
                return Err(invalid("sslcompression must be 0 or 1".to_owned()));
            }
        }
        // statek never uses GSSAPI encryption; `prefer` falls back as libpq does.
        "gssencmode" => match value {
            "disable" | "prefer" => {}
            "require" => {
                return Err(invalid(
                    "gssencmode=require is not supported (statek has no GSSAPI encryption); \
                     use TLS with sslmode"
                        .to_owned(),
                ))
            }
            _ => {
                return Err(invalid(
                    "gssencmode must be disable, prefer or require".to_owned(),
                ))
            }
        },
        key if TOKIO_POSTGRES_KEYS.contains(&key) => return Ok(false),
        key if UNSUPPORTED_KEYS.contains(&key) => {
            return Err(invalid(format!(
                "connection parameter `{key}` is not supported by statek"
            )))
        }
        key => {
            return Err(invalid(format!(
                "unknown connection parameter {}",
                printable_key(key)
            )))
        }
    }
    Ok(true)
}

/// Splits a URL (`postgres://` or `postgresql://`) or a `key=value` string.
pub(crate) fn split(text: &str) -> Result<Split, StoreError> {
    if text.trim().is_empty() {
        return Err(invalid("the connection string is empty".to_owned()));
    }
    match ["postgresql://", "postgres://"]
        .iter()
        .find_map(|prefix| text.strip_prefix(prefix).map(|rest| (prefix.len(), rest)))
    {
        Some((prefix_len, rest)) => split_url(text, prefix_len, rest),
        None => split_key_value(text),
    }
}

/// The query starts at the first `?` after the credentials (everything up
/// to the first `@`), exactly where tokio-postgres looks for it.
fn split_url(text: &str, prefix_len: usize, after_prefix: &str) -> Result<Split, StoreError> {
    let credentials = after_prefix.find('@').map_or(0, |at| at + 1);
    let Some(query_at) = after_prefix[credentials..].find('?') else {
        return Ok(Split {
            rest: text.to_owned(),
            tls: TlsParams::default(),
        });
    };
    let query_start = prefix_len + credentials + query_at;
    let (base, query) = (&text[..query_start], &text[query_start + 1..]);
    let mut tls = TlsParams::default();
    let mut kept = Vec::new();
    // Empty pairs (`?`, `&&`, a trailing `&`) are skipped.
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let Some((raw_key, raw_value)) = pair.split_once('=') else {
            return Err(invalid(
                "a URL parameter has no `=` (write key=value)".to_owned(),
            ));
        };
        let key = decode(raw_key)?;
        let value = decode(raw_value)?;
        if !take(&mut tls, &key, &value)? {
            kept.push(pair);
        }
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok(Split { rest, tls })
}

fn decode(raw: &str) -> Result<Cow<'_, str>, StoreError> {
    percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| invalid("a URL parameter is not valid UTF-8 once percent-decoded".to_owned()))
}

/// libpq's `key = value` form: values may be single-quoted, `\` escapes
/// the next character. The kept pairs are written back quoted.
fn split_key_value(text: &str) -> Result<Split, StoreError> {
    let mut tls = TlsParams::default();
    let mut kept = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_whitespace() && *c != '=') {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(invalid(format!(
                "{} has no `=` (write key=value)",
                printable_key(&key)
            )));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                    None => {
                        return Err(invalid(format!(
                            "the quoted value of {} is not closed",
                            printable_key(&key)
                        )))
                    }
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
            if value.is_empty() {
                return Err(invalid(format!("{} has no value", printable_key(&key))));
            }
        }
        if !take(&mut tls, &key, &value)? {
            kept.push(format!(
                "{key}='{}'",
                value.replace('\\', "\\\\").replace('\'', "\\'")
            ));
        }
    }
    Ok(Split {
        rest: kept.join(" "),
        tls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, rest: &str, tls: TlsParams) {
        let split = split(input).unwrap();
        assert_eq!((split.rest.as_str(), split.tls), (rest, tls), "{input}");
    }

    fn fails(input: &str, message: &str) {
        let err = split(input).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("invalid connection string: {message}"),
            "{input}"
        );
    }

    fn full(root: &str) -> TlsParams {
        TlsParams {
            sslmode: Some(SslMode::VerifyFull),
            sslrootcert: Some(root.to_owned()),
            ..TlsParams::default()
        }
    }

    #[test]
    fn urls() {
        check(
            "postgres://u@h/db",
            "postgres://u@h/db",
            TlsParams::default(),
        );
        check(
            "postgres://u@h/db?sslmode=verify-full&sslrootcert=%2Ftmp%2Fca%20x.crt",
            "postgres://u@h/db",
            full("/tmp/ca x.crt"),
        );
        check(
            "postgresql://u:p%3Fw@h:5/db?application_name=a&sslmode=verify-full&sslrootcert=r&connect_timeout=3",
            "postgresql://u:p%3Fw@h:5/db?application_name=a&connect_timeout=3",
            full("r"),
        );
        check(
            "postgres://u@h/db?",
            "postgres://u@h/db",
            TlsParams::default(),
        );
        check(
            "postgres://u@h/db?&sslmode=disable&&connect_timeout=2&",
            "postgres://u@h/db?connect_timeout=2",
            TlsParams {
                sslmode: Some(SslMode::Disable),
                ..TlsParams::default()
            },
        );
        // A `?` inside the password (before the `@`) is not the query.
        check(
            "postgres://u:a?b@h/db",
            "postgres://u:a?b@h/db",
            TlsParams::default(),
        );
        check(
            "postgres://h/db?sslmode=require&sslcert=c.pem&sslkey=k.pem&sslsni=0",
            "postgres://h/db",
            TlsParams {
                sslmode: Some(SslMode::Require),
                sslcert: Some("c.pem".into()),
                sslkey: Some("k.pem".into()),
                sslsni: Some(false),
                ..TlsParams::default()
            },
        );
    }

    #[test]
    fn key_value_strings() {
        check(
            "host=h user=u sslmode=verify-ca sslrootcert='/a b/c\\'s.crt' dbname = d",
            "host='h' user='u' dbname='d'",
            TlsParams {
                sslmode: Some(SslMode::VerifyCa),
                sslrootcert: Some("/a b/c's.crt".into()),
                ..TlsParams::default()
            },
        );
        check(
            "password='a\\'b c' host=h",
            "password='a\\'b c' host='h'",
            TlsParams::default(),
        );
        check(
            "sslrootcert=system",
            "",
            TlsParams {
                sslrootcert: Some("system".into()),
                ..TlsParams::default()
            },
        );
    }

    #[test]
    fn refusals_name_the_parameter_and_never_echo_secrets() {
        fails("", "the connection string is empty");
        fails("   ", "the connection string is empty");
        fails(
            "postgres://h/db?sslmode=verify",
            "sslmode must be disable, prefer, require, verify-ca or verify-full, got \"verify\"",
        );
        fails(
            "host=h sslmode=allow",
            "sslmode must be disable, prefer, require, verify-ca or verify-full, got \"allow\"",
        );
        fails(
            "postgres://h/db?sslcrl=x",
            "connection parameter `sslcrl` is not supported by statek",
        );
        fails(
            "postgres://h/db?nonsense=1",
            "unknown connection parameter `nonsense`",
        );
        // `password=a b=c`: `b` is part of a password typed without quotes.
        fails(
            "host=h password=se cret=x",
            "unknown connection parameter `cret`",
        );
        fails(
            "host=h password=a SeCrEt=x",
            "unknown connection parameter a parameter whose name is not a libpq keyword (6 bytes)",
        );
        fails(
            "host=h password='sekret",
            "the quoted value of `password` is not closed",
        );
        fails(
            "postgres://h/db?sslmode",
            "a URL parameter has no `=` (write key=value)",
        );
        fails("postgres://h/db?gssencmode=require", "gssencmode=require is not supported (statek has no GSSAPI encryption); use TLS with sslmode");
        let long = "x".repeat(100_000);
        let err = split(&format!("host=h sslmode={long}"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!(
                "invalid connection string: sslmode must be disable, prefer, require, verify-ca or verify-full, got \"{}\"…(100000 bytes)",
                "x".repeat(64)
            )
        );
    }
}
