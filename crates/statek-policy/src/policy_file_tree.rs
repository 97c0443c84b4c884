//! The TOML value tree policy files are read into: every value with its
//! byte span (`toml::Spanned`), so every error of a policy file can name
//! its line and column (feature `toml`).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::ops::Range;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use toml::Spanned;

/// Any TOML value, with the byte span of every nested value, so that every
/// error can point at its line.
pub(crate) struct Node {
    pub(crate) span: Range<usize>,
    pub(crate) value: Raw,
}

/// A TOML value whose children carry spans.
pub(crate) enum Raw {
    String(String),
    Integer(i64),
    Float,
    Boolean,
    Datetime,
    Array(Vec<Node>),
    /// Keys in file order.
    Table(Vec<(String, Node)>),
}

impl Raw {
    /// The TOML type, for error messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Raw::String(_) => "a string",
            Raw::Integer(_) => "an integer",
            Raw::Float => "a float",
            Raw::Boolean => "a boolean",
            Raw::Datetime => "a datetime",
            Raw::Array(_) => "an array",
            Raw::Table(_) => "a table",
        }
    }
}

/// The key under which `toml` hands a datetime to `deserialize_any`.
const TOML_DATETIME_KEY: &str = "$__toml_private_datetime";

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = Spanned::<Raw>::deserialize(deserializer)?;
        Ok(Node {
            span: spanned.span(),
            value: spanned.into_inner(),
        })
    }
}

impl<'de> Deserialize<'de> for Raw {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RawVisitor)
    }
}

struct RawVisitor;

impl<'de> Visitor<'de> for RawVisitor {
    type Value = Raw;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any toml value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Raw, E> {
        Ok(Raw::Boolean)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Raw, E> {
        Ok(Raw::Integer(value))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Raw, E> {
        // TOML integers are i64; saturate anything larger so it is reported
        // as out of range.
        Ok(Raw::Integer(i64::try_from(value).unwrap_or(i64::MAX)))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Raw, E> {
        Ok(Raw::Float)
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Raw, E> {
        Ok(Raw::String(value.to_string()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Raw, E> {
        Ok(Raw::String(value))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Raw, A::Error> {
        let mut elements = Vec::new();
        while let Some(element) = seq.next_element::<Node>()? {
            elements.push(element);
        }
        Ok(Raw::Array(elements))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Raw, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == TOML_DATETIME_KEY {
                map.next_value::<de::IgnoredAny>()?;
                return Ok(Raw::Datetime);
            }
            let value = map.next_value::<Node>()?;
            entries.push((key, value));
        }
        Ok(Raw::Table(entries))
    }
}
