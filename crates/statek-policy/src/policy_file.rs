//! TOML policy files, as operators write them (feature `toml`).
//!
//! ```toml
//! # deploy/policies/example.toml
//! shard = "primary-v1"
//! schedule = "primary"   # optional, default: the shard id
//! algorithm = "swrr-v1"   # optional, default swrr-v1; or "min-gap-v1", "min-gap-v2"
//! [[tenants]]
//! id = "tenant-a"
//! weight = 3
//! [[tenants]]
//! id = "tenant-b"
//! weight = 1
//! ```
//!
//! A policy that shares cost instead of slots (opt-in; see
//! [`crate::FairnessUnit`]) adds a table:
//!
//! ```toml
//! [fairness]
//! unit = "cost"        # or "slots", the default (then no other key)
//! quantum = 1          # credit one slot grants, 1..=2^40
//! max_cost = 40        # most one attempt is charged, 1..=2^40
//! default_cost = 40    # charged when an attempt reports none; 0..=max_cost, default max_cost
//! balance_cap = 80     # largest positive balance, 0..=2^40
//! ```
//!
//! The top level has exactly the keys `shard` (required string),
//! `schedule` (optional string, a [`ScheduleId`]: the schedule whose
//! succession of shards this one joins; without it the shard is alone in
//! the schedule named like its shard id, see
//! [`PolicyFile::schedule_or_default`]), `algorithm` (optional string:
//! `swrr-v1`, the default, `min-gap-v1` or `min-gap-v2`;
//! see [`PolicyAlgorithm`]), `fairness` (optional table, above) and
//! `tenants` (required
//! array of tables); each tenant has exactly `id` (string) and `weight`
//! (integer). Unknown keys are errors. Every error is a [`PolicyFileError`]
//! that names the file, the 1-based line and column, and the field, as
//! `{file}:{line}:{column}: {field}: {what}`. Fields are written like
//! `tenants[2].weight`, where `tenants[n]` is the `n`-th `[[tenants]]`
//! table of the file, counting from 1 like lines and columns.
//!
//! The schedule is not part of the policy: a policy's canonical bytes and
//! digest are the same with or without it, and
//! [`PolicyFile::policy`] does not carry it.
//!
//! Reading the file is the caller's job: this module does no I/O.
//!
//! ```
//! use statek_policy::policy_file::PolicyFile;
//! let text = "shard = \"primary-v1\"\n[[tenants]]\nid = \"tenant-a\"\nweight = 0\n";
//! let error = PolicyFile::parse("example.toml", text).unwrap_err();
//! assert_eq!(
//!     error.to_string(),
//!     "example.toml:4:10: tenants[1].weight: weight 0 of tenant tenant-a is out of range 1..=1024",
//! );
//! ```

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use crate::algorithm::PolicyAlgorithm;
use crate::cycle_length::MAX_CYCLE_LENGTH;
use crate::error::PolicyError;
use crate::fairness_unit::{CostFairness, FairnessUnit, MAX_COST_PARAMETER};
use crate::id::{ScheduleId, SchedulerShardId, TenantId};
use crate::policy::{WeightedFairnessPolicy, MAX_TENANTS};
use crate::policy_file_tree::{Node, Raw};
use crate::weight::{TenantFairnessWeight, MAX_WEIGHT, MIN_WEIGHT};

/// A parsed and validated policy file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyFile {
    file_name: String,
    schedule: Option<ScheduleId>,
    policy: WeightedFairnessPolicy,
}

impl PolicyFile {
    /// Parses and validates the policy file `text`; `file_name` is used only
    /// in error messages.
    ///
    /// # Errors
    ///
    /// A [`PolicyFileError`] for the first problem found: invalid TOML, an
    /// unknown or missing key, a value of the wrong type, or a policy error
    /// (invalid shard, schedule or tenant id, weight out of range, duplicate tenant, too many tenants,
    /// cycle too long, unknown algorithm). Semantic errors point at the
    /// offending value; a duplicate tenant points at its second occurrence.
    pub fn parse(file_name: &str, text: &str) -> Result<PolicyFile, PolicyFileError> {
        let source = Source { file_name, text };
        let root = toml::from_str::<Raw>(text).map_err(|error| source.unreadable(&error))?;
        let (schedule, policy) = source.policy(root)?;
        Ok(PolicyFile {
            file_name: file_name.to_string(),
            schedule,
            policy,
        })
    }

    /// The file name given to [`parse`](Self::parse).
    #[must_use]
    pub fn file_name(&self) -> &str {
        &self.file_name
    }

    /// The schedule the file names with `schedule = "…"`, or `None` if it
    /// names none.
    #[must_use]
    pub fn schedule(&self) -> Option<&ScheduleId> {
        self.schedule.as_ref()
    }

    /// The schedule the shard belongs to: the one the file names, or else
    /// the one named like the shard id ([`ScheduleId::of_shard`]).
    ///
    /// ```
    /// use statek_policy::policy_file::PolicyFile;
    /// let tenants = "[[tenants]]\nid = \"tenant-a\"\nweight = 1\n";
    /// let named = PolicyFile::parse("a.toml", &format!("shard = \"primary-v2\"\nschedule = \"primary\"\n{tenants}"))?;
    /// assert_eq!(named.schedule_or_default().as_str(), "primary");
    /// let alone = PolicyFile::parse("b.toml", &format!("shard = \"primary-v2\"\n{tenants}"))?;
    /// assert_eq!(alone.schedule(), None);
    /// assert_eq!(alone.schedule_or_default().as_str(), "primary-v2");
    /// // The schedule is not part of the policy.
    /// assert_eq!(named.policy().digest(), alone.policy().digest());
    /// # Ok::<(), statek_policy::policy_file::PolicyFileError>(())
    /// ```
    #[must_use]
    pub fn schedule_or_default(&self) -> ScheduleId {
        match &self.schedule {
            Some(schedule) => schedule.clone(),
            None => ScheduleId::of_shard(self.policy.shard_id()),
        }
    }

    /// The policy the file describes.
    #[must_use]
    pub fn policy(&self) -> &WeightedFairnessPolicy {
        &self.policy
    }

    /// Consumes the file and returns its policy.
    #[must_use]
    pub fn into_policy(self) -> WeightedFairnessPolicy {
        self.policy
    }
}

/// Where in a policy file an error is: file name, 1-based line and column
/// (in characters), and the field, like `tenants[2].weight`.
///
/// Displayed as `{file}:{line}:{column}: {field}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PolicyFileLocation {
    file: String,
    line: usize,
    column: usize,
    field: String,
}

impl PolicyFileLocation {
    /// The file name given to [`PolicyFile::parse`].
    #[must_use]
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The 1-based line.
    #[must_use]
    pub fn line(&self) -> usize {
        self.line
    }

    /// The 1-based column, counted in characters.
    #[must_use]
    pub fn column(&self) -> usize {
        self.column
    }

    /// The field, like `shard` or `tenants[2].weight` (tenants count from
    /// 1), or `document` for TOML syntax errors.
    #[must_use]
    pub fn field(&self) -> &str {
        &self.field
    }
}

impl fmt::Display for PolicyFileLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.column, self.field
        )
    }
}

/// Why a policy file was rejected, and where.
///
/// Displayed as `{file}:{line}:{column}: {field}: {what}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyFileError {
    /// The text is not valid TOML.
    #[error("{location}: invalid toml: {message}")]
    Syntax {
        /// Where the TOML parser stopped; the field is `document`.
        location: PolicyFileLocation,
        /// The TOML parser's message.
        message: String,
    },
    /// A key that the format does not have.
    #[error("{location}: unknown key, expected one of {expected}")]
    UnknownKey {
        /// The unknown key's value.
        location: PolicyFileLocation,
        /// The keys allowed in that table.
        expected: &'static str,
    },
    /// A required key is absent.
    #[error("{location}: missing required key")]
    MissingKey {
        /// The table that lacks the key (line 1 for the top level); the
        /// field names the missing key.
        location: PolicyFileLocation,
    },
    /// A value has the wrong TOML type.
    #[error("{location}: expected {expected}, found {found}")]
    WrongType {
        /// The value.
        location: PolicyFileLocation,
        /// The type the format requires.
        expected: &'static str,
        /// The type found.
        found: &'static str,
    },
    /// An integer does not fit its key's range (a weight that does not
    /// fit the weight type, a negative or too large cost parameter).
    #[error("{location}: {value} is out of range {min}..={max}")]
    IntegerOutOfRange {
        /// The value.
        location: PolicyFileLocation,
        /// The rejected integer.
        value: i64,
        /// The smallest allowed value.
        min: i64,
        /// The largest allowed value.
        max: i64,
    },
    /// The values are well-typed but do not make a valid policy.
    #[error("{location}: {error}")]
    Policy {
        /// The offending value.
        location: PolicyFileLocation,
        /// What is wrong with it.
        error: PolicyError,
    },
}

impl PolicyFileError {
    /// Where the error is.
    #[must_use]
    pub fn location(&self) -> &PolicyFileLocation {
        match self {
            PolicyFileError::Syntax { location, .. }
            | PolicyFileError::UnknownKey { location, .. }
            | PolicyFileError::MissingKey { location }
            | PolicyFileError::WrongType { location, .. }
            | PolicyFileError::IntegerOutOfRange { location, .. }
            | PolicyFileError::Policy { location, .. } => location,
        }
    }

    /// The policy error behind a [`PolicyFileError::Policy`].
    #[must_use]
    pub fn policy_error(&self) -> Option<&PolicyError> {
        match self {
            PolicyFileError::Policy { error, .. } => Some(error),
            _ => None,
        }
    }
}

const TOP_LEVEL_KEYS: &str = "shard, schedule, algorithm, fairness, tenants";
const TENANT_KEYS: &str = "id, weight";
const FAIRNESS_KEYS: &str = "unit, quantum, max_cost, default_cost, balance_cap";
/// What a slot-mode `[fairness]` table may hold.
const SLOT_FAIRNESS_KEYS: &str = "unit (cost parameters need unit = \"cost\")";

/// Joins the lines of a multi-line TOML parser message with `; `, so every
/// error is one line.
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// The file being parsed, for turning byte offsets into locations.
struct Source<'a> {
    file_name: &'a str,
    text: &'a str,
}

/// One tenant as written, with where its values are.
struct FileTenant {
    weight: TenantFairnessWeight,
    id_at: usize,
    weight_at: usize,
}

impl Source<'_> {
    /// The location of byte `offset`, for `field`.
    /// Why `toml` could not read the text. Valid TOML that this reader
    /// cannot take (it keeps every value's position, which `toml` cannot
    /// give for dotted keys) is named for what it is: a top-level key the
    /// format does not have (a file that is not a policy file), or a
    /// dotted key.
    fn unreadable(&self, error: &toml::de::Error) -> PolicyFileError {
        let at = error.span().map_or(0, |span| span.start);
        let Ok(table) = toml::from_str::<toml::Table>(self.text) else {
            return PolicyFileError::Syntax {
                location: self.locate(at, "document"),
                message: one_line(error.message()),
            };
        };
        let top_level = ["shard", "schedule", "algorithm", "fairness", "tenants"];
        if let Some(key) = table.keys().find(|key| !top_level.contains(&key.as_str())) {
            return PolicyFileError::UnknownKey {
                location: self.locate(self.key_offset(key).unwrap_or(at), key),
                expected: TOP_LEVEL_KEYS,
            };
        }
        PolicyFileError::Syntax {
            location: self.locate(at, "document"),
            message: "dotted keys (`a.b = 1`, `[a.b]`) are not supported in a policy file: \
                      give each table its own header"
                .to_owned(),
        }
    }

    /// Where top-level `key` is first written: at the start of a line
    /// (after `[` for a table header), followed by `.`, `=`, `]` or a
    /// space.
    fn key_offset(&self, key: &str) -> Option<usize> {
        let mut line_start = 0;
        for line in self.text.split_inclusive('\n') {
            let name = line.trim_start().trim_start_matches('[').trim_start();
            let offset = line_start + (line.len() - name.len());
            line_start += line.len();
            if let Some(rest) = name.strip_prefix(key) {
                if rest.starts_with(['.', '=', ']', ' ', '\t']) {
                    return Some(offset);
                }
            }
        }
        None
    }

    fn locate(&self, offset: usize, field: &str) -> PolicyFileLocation {
        let bytes = self.text.as_bytes();
        let before = bytes.get(..offset.min(bytes.len())).unwrap_or_default();
        let line_start = before
            .iter()
            .rposition(|&byte| byte == b'\n')
            .map_or(0, |newline| newline + 1);
        let line = 1 + before.iter().filter(|&&byte| byte == b'\n').count();
        // Count characters, not bytes: skip UTF-8 continuation bytes.
        let column = 1 + before
            .get(line_start..)
            .unwrap_or_default()
            .iter()
            .filter(|&&byte| byte & 0xc0 != 0x80)
            .count();
        PolicyFileLocation {
            file: self.file_name.to_string(),
            line,
            column,
            field: field.to_string(),
        }
    }

    fn policy_error(&self, offset: usize, field: &str, error: PolicyError) -> PolicyFileError {
        PolicyFileError::Policy {
            location: self.locate(offset, field),
            error,
        }
    }

    fn wrong_type(&self, node: &Node, field: &str, expected: &'static str) -> PolicyFileError {
        PolicyFileError::WrongType {
            location: self.locate(node.span.start, field),
            expected,
            found: node.value.kind(),
        }
    }

    fn string<'n>(&self, node: &'n Node, field: &str) -> Result<&'n str, PolicyFileError> {
        match &node.value {
            Raw::String(value) => Ok(value),
            _ => Err(self.wrong_type(node, field, "a string")),
        }
    }

    /// The schedule the file names, if any, and the policy.
    fn policy(
        &self,
        root: Raw,
    ) -> Result<(Option<ScheduleId>, WeightedFairnessPolicy), PolicyFileError> {
        let Raw::Table(entries) = root else {
            return Err(PolicyFileError::WrongType {
                location: self.locate(0, "document"),
                expected: "a table",
                found: root.kind(),
            });
        };
        let (mut shard, mut schedule, mut algorithm, mut tenants) = (None, None, None, None);
        let mut fairness = None;
        for (key, node) in entries {
            match key.as_str() {
                "shard" => shard = Some(node),
                "schedule" => schedule = Some(node),
                "algorithm" => algorithm = Some(node),
                "fairness" => fairness = Some(node),
                "tenants" => tenants = Some(node),
                _ => {
                    return Err(PolicyFileError::UnknownKey {
                        location: self.locate(node.span.start, &key),
                        expected: TOP_LEVEL_KEYS,
                    })
                }
            }
        }
        let shard = shard.ok_or_else(|| PolicyFileError::MissingKey {
            location: self.locate(0, "shard"),
        })?;
        let shard = SchedulerShardId::try_from(self.string(&shard, "shard")?)
            .map_err(|error| self.policy_error(shard.span.start, "shard", error))?;
        let schedule = match schedule {
            None => None,
            Some(node) => Some(
                ScheduleId::try_from(self.string(&node, "schedule")?)
                    .map_err(|error| self.policy_error(node.span.start, "schedule", error))?,
            ),
        };
        let algorithm = match algorithm {
            None => PolicyAlgorithm::SwrrV1,
            Some(node) => self
                .string(&node, "algorithm")?
                .parse()
                .map_err(|error| self.policy_error(node.span.start, "algorithm", error))?,
        };
        let unit = match fairness {
            None => FairnessUnit::Slots,
            Some(node) => self.fairness(node)?,
        };
        let tenants = tenants.ok_or_else(|| PolicyFileError::MissingKey {
            location: self.locate(0, "tenants"),
        })?;
        let tenants_at = tenants.span.start;
        let file_tenants = self.tenants(tenants)?;
        let weights = file_tenants.into_iter().map(|tenant| tenant.weight);
        let policy = WeightedFairnessPolicy::with_algorithm(shard, algorithm, weights)
            .map_err(|error| self.policy_error(tenants_at, "tenants", error))?
            .with_fairness(unit);
        Ok((schedule, policy))
    }

    /// Validates the `[fairness]` table: `unit = "slots"` (the default)
    /// alone, or `unit = "cost"` with `quantum`, `max_cost` and
    /// `balance_cap`, and optionally `default_cost` (default: `max_cost`,
    /// so an attempt that reports nothing is charged the most).
    fn fairness(&self, node: Node) -> Result<FairnessUnit, PolicyFileError> {
        let table_at = node.span.start;
        let Raw::Table(entries) = node.value else {
            return Err(self.wrong_type(&node, "fairness", "a table"));
        };
        let mut unit = None;
        let mut parameters: Vec<(&'static str, Node)> = Vec::new();
        for (key, value) in entries {
            let name = match key.as_str() {
                "unit" => {
                    unit = Some(value);
                    continue;
                }
                "quantum" => "quantum",
                "max_cost" => "max_cost",
                "default_cost" => "default_cost",
                "balance_cap" => "balance_cap",
                _ => {
                    return Err(PolicyFileError::UnknownKey {
                        location: self.locate(value.span.start, &format!("fairness.{key}")),
                        expected: FAIRNESS_KEYS,
                    })
                }
            };
            parameters.push((name, value));
        }
        let name = match &unit {
            None => "slots",
            Some(node) => self.string(node, "fairness.unit")?,
        };
        match name {
            "slots" => match parameters.first() {
                None => Ok(FairnessUnit::Slots),
                Some((key, value)) => Err(PolicyFileError::UnknownKey {
                    location: self.locate(value.span.start, &format!("fairness.{key}")),
                    expected: SLOT_FAIRNESS_KEYS,
                }),
            },
            "cost" => self.cost(table_at, &parameters),
            other => {
                let at = unit.as_ref().map_or(table_at, |node| node.span.start);
                Err(self.policy_error(
                    at,
                    "fairness.unit",
                    PolicyError::UnknownFairnessUnit {
                        name: other.to_string(),
                    },
                ))
            }
        }
    }

    /// The cost parameters of a `unit = "cost"` table at `table_at`.
    fn cost(
        &self,
        table_at: usize,
        parameters: &[(&'static str, Node)],
    ) -> Result<FairnessUnit, PolicyFileError> {
        let top = i64::try_from(MAX_COST_PARAMETER).unwrap_or(i64::MAX);
        let value =
            |name: &str, min: i64, max: i64| -> Result<Option<(u64, usize)>, PolicyFileError> {
                let Some((_, node)) = parameters.iter().find(|(key, _)| *key == name) else {
                    return Ok(None);
                };
                let field = format!("fairness.{name}");
                let Raw::Integer(value) = node.value else {
                    return Err(self.wrong_type(node, &field, "an integer"));
                };
                match u64::try_from(value) {
                    Ok(fits) if (min..=max).contains(&value) => Ok(Some((fits, node.span.start))),
                    _ => Err(PolicyFileError::IntegerOutOfRange {
                        location: self.locate(node.span.start, &field),
                        value,
                        min,
                        max,
                    }),
                }
            };
        let required = |name: &'static str, min: i64| -> Result<(u64, usize), PolicyFileError> {
            value(name, min, top)?.ok_or_else(|| PolicyFileError::MissingKey {
                location: self.locate(table_at, &format!("fairness.{name}")),
            })
        };
        let quantum = required("quantum", 1)?;
        let max_cost = required("max_cost", 1)?;
        let balance_cap = required("balance_cap", 0)?;
        let most = i64::try_from(max_cost.0).unwrap_or(top);
        let default_cost = value("default_cost", 0, most)?.unwrap_or(max_cost);
        let cost = CostFairness::new(quantum.0, max_cost.0, default_cost.0, balance_cap.0)
            .map_err(|error| self.policy_error(default_cost.1, "fairness.default_cost", error))?;
        Ok(FairnessUnit::Cost(cost))
    }

    /// Validates the `tenants` array in file order: each tenant's shape, id
    /// and weight, then duplicates, the tenant count and the cycle length.
    fn tenants(&self, node: Node) -> Result<Vec<FileTenant>, PolicyFileError> {
        let Raw::Array(elements) = node.value else {
            return Err(self.wrong_type(&node, "tenants", "an array of tables"));
        };
        if elements.is_empty() {
            return Err(self.policy_error(node.span.start, "tenants", PolicyError::NoTenants));
        }
        let count = elements.len();
        let mut seen: BTreeMap<TenantId, usize> = BTreeMap::new();
        let mut tenants = Vec::with_capacity(count.min(MAX_TENANTS));
        for (index, element) in elements.into_iter().enumerate() {
            let field = format!("tenants[{}]", index + 1);
            if index == MAX_TENANTS {
                return Err(self.policy_error(
                    element.span.start,
                    &field,
                    PolicyError::TooManyTenants {
                        max: MAX_TENANTS,
                        actual: count,
                    },
                ));
            }
            let tenant = self.tenant(element, &field)?;
            if seen.insert(tenant.weight.tenant().clone(), index).is_some() {
                return Err(self.policy_error(
                    tenant.id_at,
                    &format!("{field}.id"),
                    PolicyError::DuplicateTenant {
                        tenant: tenant.weight.tenant().clone(),
                    },
                ));
            }
            tenants.push(tenant);
        }
        let total = tenants.iter().fold(0_u32, |sum, tenant| {
            sum.saturating_add(tenant.weight.weight())
        });
        let mut running = 0_u32;
        for (index, tenant) in tenants.iter().enumerate() {
            running = running.saturating_add(tenant.weight.weight());
            if running > MAX_CYCLE_LENGTH {
                return Err(self.policy_error(
                    tenant.weight_at,
                    &format!("tenants[{}].weight", index + 1),
                    PolicyError::CycleTooLong {
                        max: MAX_CYCLE_LENGTH,
                        actual: total,
                    },
                ));
            }
        }
        Ok(tenants)
    }

    /// Validates one element of `tenants`.
    fn tenant(&self, node: Node, field: &str) -> Result<FileTenant, PolicyFileError> {
        let table_at = node.span.start;
        let Raw::Table(entries) = node.value else {
            return Err(self.wrong_type(&node, field, "a table"));
        };
        let (mut id, mut weight) = (None, None);
        for (key, value) in entries {
            match key.as_str() {
                "id" => id = Some(value),
                "weight" => weight = Some(value),
                _ => {
                    return Err(PolicyFileError::UnknownKey {
                        location: self.locate(value.span.start, &format!("{field}.{key}")),
                        expected: TENANT_KEYS,
                    })
                }
            }
        }
        let id_field = format!("{field}.id");
        let weight_field = format!("{field}.weight");
        let id = id.ok_or_else(|| PolicyFileError::MissingKey {
            location: self.locate(table_at, &id_field),
        })?;
        let weight = weight.ok_or_else(|| PolicyFileError::MissingKey {
            location: self.locate(table_at, &weight_field),
        })?;
        let tenant = TenantId::try_from(self.string(&id, &id_field)?)
            .map_err(|error| self.policy_error(id.span.start, &id_field, error))?;
        let Raw::Integer(value) = weight.value else {
            return Err(self.wrong_type(&weight, &weight_field, "an integer"));
        };
        let value = u32::try_from(value).map_err(|_| PolicyFileError::IntegerOutOfRange {
            location: self.locate(weight.span.start, &weight_field),
            value,
            min: i64::from(MIN_WEIGHT),
            max: i64::from(MAX_WEIGHT),
        })?;
        let tenant_weight = TenantFairnessWeight::new(tenant, value)
            .map_err(|error| self.policy_error(weight.span.start, &weight_field, error))?;
        Ok(FileTenant {
            weight: tenant_weight,
            id_at: id.span.start,
            weight_at: weight.span.start,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations() {
        let source = Source {
            file_name: "f.toml",
            text: "ab\ncé d\n\nx",
        };
        let at = |offset| {
            let location = source.locate(offset, "field");
            (location.line(), location.column())
        };
        assert_eq!(at(0), (1, 1));
        assert_eq!(at(1), (1, 2));
        assert_eq!(at(2), (1, 3));
        assert_eq!(at(3), (2, 1));
        assert_eq!(at(4), (2, 2));
        // "é" is two bytes but one column.
        assert_eq!(at(6), (2, 3));
        assert_eq!(at(7), (2, 4));
        assert_eq!(at(9), (3, 1));
        assert_eq!(at(10), (4, 1));
        assert_eq!(at(11), (4, 2));
        assert_eq!(at(999), (4, 2));
    }
}
