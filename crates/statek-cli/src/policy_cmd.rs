//! `statek policy compile|diff|verify`: what a policy file means, what a
//! change would do, and whether a shard holds it.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use anyhow::Result;
use serde::Serialize;
use statek_policy::analysis::SetMeasure;
use statek_policy::policy_file::PolicyFile;
use statek_policy::{
    PolicyAlgorithm, PolicySeam, ScheduleId, SeamBound, TenantId, WeightedFairnessPolicy,
};

use crate::out::Report;
use crate::policy_compile::Fairness;

/// The largest policy file read, in bytes. The largest policy (1,024
/// tenants with 128-byte ids) is about 170 KB of TOML; a larger input (or
/// an endless one such as `/dev/zero`) is refused before it is read whole.
pub const MAX_POLICY_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Reads a policy file's text, at most [`MAX_POLICY_FILE_BYTES`].
///
/// # Errors
/// [`crate::exit::InvalidInput`] (exit 3) naming the file: unreadable, too
/// large, or not UTF-8.
pub fn read_policy_text(path: &Path) -> Result<String> {
    use std::io::Read as _;
    let invalid = |what: String| crate::exit::InvalidInput(format!("{}: {what}", path.display()));
    let file = std::fs::File::open(path).map_err(|e| invalid(format!("cannot read: {e}")))?;
    let mut bytes = Vec::new();
    file.take(MAX_POLICY_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| invalid(format!("cannot read: {e}")))?;
    if bytes.len() as u64 > MAX_POLICY_FILE_BYTES {
        return Err(invalid(format!(
            "larger than {MAX_POLICY_FILE_BYTES} bytes: not a policy file"
        ))
        .into());
    }
    String::from_utf8(bytes).map_err(|e| invalid(format!("not UTF-8: {e}")).into())
}

/// Reads and parses a policy file; errors name the file, line and field.
pub fn load(path: &Path) -> Result<WeightedFairnessPolicy> {
    Ok(load_file(path)?.into_policy())
}

/// Reads and parses a policy file, keeping its optional `schedule` key.
pub fn load_file(path: &Path) -> Result<PolicyFile> {
    let text = read_policy_text(path)?;
    Ok(PolicyFile::parse(&path.display().to_string(), &text)?)
}

/// The schedule a rollout from `from` to `to` continues, as the two files
/// name it: `from`'s, else `to`'s, else `None` (whichever schedule the
/// sealed shard belongs to).
///
/// # Errors
/// [`crate::exit::ScheduleMismatch`] (exit 13) when both files name a
/// schedule and they differ.
pub fn rollout_schedule(from: &PolicyFile, to: &PolicyFile) -> Result<Option<ScheduleId>> {
    match (from.schedule(), to.schedule()) {
        (Some(a), Some(b)) if a != b => Err(crate::exit::ScheduleMismatch {
            from_file: from.file_name().to_owned(),
            from: a.to_string(),
            to_file: to.file_name().to_owned(),
            to: b.to_string(),
        }
        .into()),
        (a, b) => Ok(a.or(b).cloned()),
    }
}

/// The starvation bound of `tenant` in `policy`, if it schedules it.
fn bound_of(policy: &WeightedFairnessPolicy, tenant: &TenantId) -> Option<u32> {
    policy
        .starvation_bound(tenant)
        .map(|b| b.maximum_reservations_until_selection())
}

/// One tenant of the successor across a rollout's seam, as `rollout`
/// and `policy diff` report it.
#[derive(Debug, Serialize, PartialEq, Eq, Clone)]
pub struct SeamRow {
    /// Tenant id.
    pub tenant: String,
    /// `N`: the seal point these values are for (the sealed shard's cursor
    /// at the seal; its last sequence is `N - 1`). For a dry run and `policy
    /// diff`, the smallest `N` at which the tenant's gap is largest.
    pub seal_sequence: u64,
    /// The tenant's last pick in the sealed shard (`p < N`), or null when it
    /// joins or was not picked there before `N`.
    pub last_pick_before_seal: Option<u64>,
    /// Its first pick in the successor, a sequence of the successor (`q`).
    pub first_pick_after_seal: u64,
    /// The gap across the seam in reservations, counting the picking one:
    /// `(N - p) + q`; `N + 1 + q` when not picked before `N`; `q + 1` for a
    /// joining tenant.
    pub reservations_across_seam: u64,
    /// New in the successor.
    pub joining: bool,
    /// Old (null for a joining tenant) and new starvation bound, in
    /// reservations.
    pub bound: (Option<u32>, u32),
}

/// The rows of `bounds` (from [`PolicySeam::at`] or [`PolicySeam::worst`]).
pub fn seam_rows(
    old: &WeightedFairnessPolicy,
    new: &WeightedFairnessPolicy,
    bounds: &[SeamBound],
) -> Vec<SeamRow> {
    bounds
        .iter()
        .map(|b| SeamRow {
            tenant: b.tenant().to_string(),
            seal_sequence: b.seal_sequence(),
            last_pick_before_seal: b.last_pick_before_seal(),
            first_pick_after_seal: b.first_pick_after_seal(),
            reservations_across_seam: b.reservations_across_seam(),
            joining: b.joining(),
            bound: (
                bound_of(old, b.tenant()),
                bound_of(new, b.tenant()).unwrap_or(0),
            ),
        })
        .collect()
}

/// The row with the largest gap (the first in tenant order on a tie).
pub fn worst_row(rows: &[SeamRow]) -> Option<&SeamRow> {
    rows.iter()
        .fold(None, |best: Option<&SeamRow>, row| match best {
            Some(b) if b.reservations_across_seam >= row.reservations_across_seam => Some(b),
            _ => Some(row),
        })
}

/// The seam table of `rollout` and `policy diff`, one line per tenant.
///
/// # Errors
/// Only those of `w`.
pub fn seam_table(rows: &[SeamRow], w: &mut dyn fmt::Write) -> fmt::Result {
    let width = rows
        .iter()
        .map(|r| r.tenant.len())
        .max()
        .unwrap_or(6)
        .max(6);
    writeln!(
        w,
        "{:<width$}  {:>9}  {:>10}  {:>10}  {:>10}  bound old -> new",
        "tenant", "seal at N", "last pick", "first pick", "seam bound"
    )?;
    for r in rows {
        let last = match (r.joining, r.last_pick_before_seal) {
            (true, _) => "joining".to_owned(),
            (false, Some(p)) => p.to_string(),
            (false, None) => "-".to_owned(),
        };
        let old = r.bound.0.map_or_else(|| "-".to_owned(), |b| b.to_string());
        writeln!(
            w,
            "{:<width$}  {:>9}  {:>10}  {:>10}  {:>10}  {old} -> {}",
            r.tenant,
            r.seal_sequence,
            last,
            r.first_pick_after_seal,
            r.reservations_across_seam,
            r.bound.1
        )?;
    }
    Ok(())
}

/// `policy` compiled with `algorithm` instead of its own.
///
/// # Errors
/// The policy cannot be compiled with it.
pub fn with_algorithm(
    policy: &WeightedFairnessPolicy,
    algorithm: PolicyAlgorithm,
) -> Result<WeightedFairnessPolicy> {
    Ok(WeightedFairnessPolicy::with_algorithm(
        policy.shard_id().clone(),
        algorithm,
        policy.tenants().to_vec(),
    )?
    .with_fairness(policy.fairness()))
}

/// A policy's largest ratio of bound to ceil(L / w) and largest excess in
/// slots, as reported by `policy diff`.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Worst {
    /// The largest ratio's bound and ideal, in slots.
    pub ratio: (u32, u32),
    /// The largest bound - ceil(L / w) over the tenants, in slots.
    pub excess: u32,
}

impl Worst {
    fn of(policy: &WeightedFairnessPolicy) -> Self {
        let measure = SetMeasure::of(policy);
        Worst {
            ratio: (
                measure.largest_ratio().bound(),
                measure.largest_ratio().ideal(),
            ),
            excess: measure.largest_excess(),
        }
    }

    fn text(&self) -> String {
        format!(
            "{}/{} = {:.3}, excess {} slots",
            self.ratio.0,
            self.ratio.1,
            f64::from(self.ratio.0) / f64::from(self.ratio.1.max(1)),
            self.excess
        )
    }
}

/// A tenant present in both policies of a diff.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct KeptTenant {
    /// Tenant id.
    pub id: String,
    /// Old and new weight.
    pub weight: (u32, u32),
    /// Old and new starvation bound, in reservations.
    pub bound: (u32, u32),
}

impl KeptTenant {
    fn unchanged(&self) -> bool {
        self.weight.0 == self.weight.1 && self.bound.0 == self.bound.1
    }
}

/// What `policy diff` found.
#[derive(Debug, Serialize)]
pub struct Diff {
    /// Old and new shard id.
    pub shard: (String, String),
    /// Old and new algorithm.
    pub algorithm: (String, String),
    /// Old and new fairness unit, with its cost parameters.
    pub fairness: (Fairness, Fairness),
    /// Old and new cycle length.
    pub cycle_length: (u32, u32),
    /// Old and new digest.
    pub digest: (String, String),
    /// Old and new cycle digest.
    pub cycle_digest: (String, String),
    /// Old and new largest ratio of bound to ceil(L / w), and excess.
    pub worst: (Worst, Worst),
    /// Tenants added, with weight and new bound.
    pub added: Vec<(String, u32, u32)>,
    /// Tenants removed, with weight and old bound.
    pub removed: Vec<(String, u32, u32)>,
    /// Tenants in both policies.
    pub kept: Vec<KeptTenant>,
    /// Tenants in both policies whose weight changes.
    pub reweighted: Vec<String>,
    /// The schedules the two files name (`schedule = "…"`), null where a
    /// file names none.
    pub schedule: (Option<String>, Option<String>),
    /// Each tenant of the new policy across the seam of a rollout from the
    /// old one, at its worst over every seal point `N` (as `rollout
    /// --dry-run`; the rollout itself prints the exact value for its `N`).
    pub seam: Vec<SeamRow>,
    /// The largest seam bound of all tenants (null without tenants).
    pub worst_seam: Option<SeamRow>,
    /// Whether the policies differ at all.
    pub changed: bool,
}

/// Compares two policies.
pub fn diff(old: &WeightedFairnessPolicy, new: &WeightedFairnessPolicy) -> Diff {
    let bound = |p: &WeightedFairnessPolicy, t| {
        p.starvation_bound(t)
            .map(|b| b.maximum_reservations_until_selection())
            .unwrap_or(0)
    };
    let old_tenants: BTreeMap<_, _> = old
        .tenants()
        .iter()
        .map(|t| (t.tenant(), t.weight()))
        .collect();
    let new_tenants: BTreeMap<_, _> = new
        .tenants()
        .iter()
        .map(|t| (t.tenant(), t.weight()))
        .collect();
    let mut diff = Diff {
        shard: (old.shard_id().to_string(), new.shard_id().to_string()),
        algorithm: (old.algorithm().to_string(), new.algorithm().to_string()),
        fairness: (Fairness::of(old.fairness()), Fairness::of(new.fairness())),
        cycle_length: (old.cycle_length(), new.cycle_length()),
        digest: (old.digest().to_string(), new.digest().to_string()),
        cycle_digest: (
            old.cycle_digest().to_string(),
            new.cycle_digest().to_string(),
        ),
        worst: (Worst::of(old), Worst::of(new)),
        added: Vec::new(),
        removed: Vec::new(),
        kept: Vec::new(),
        reweighted: Vec::new(),
        schedule: (None, None),
        seam: seam_rows(old, new, &PolicySeam::new(old, new).worst()),
        worst_seam: None,
        changed: old.canonical_bytes() != new.canonical_bytes(),
    };
    diff.worst_seam = worst_row(&diff.seam).cloned();
    for (tenant, weight) in &new_tenants {
        match old_tenants.get(tenant) {
            None => diff
                .added
                .push((tenant.to_string(), *weight, bound(new, tenant))),
            Some(old_weight) => {
                if old_weight != weight {
                    diff.reweighted.push(tenant.to_string());
                }
                diff.kept.push(KeptTenant {
                    id: tenant.to_string(),
                    weight: (*old_weight, *weight),
                    bound: (bound(old, tenant), bound(new, tenant)),
                });
            }
        }
    }
    for (tenant, weight) in &old_tenants {
        if !new_tenants.contains_key(tenant) {
            diff.removed
                .push((tenant.to_string(), *weight, bound(old, tenant)));
        }
    }
    diff
}

/// The text form of `policy diff`.
impl Report for Diff {
    fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        let d = self;
        let pair = |(a, b): &(String, String)| {
            if a == b {
                format!("{a} (unchanged)")
            } else {
                format!("{a} -> {b}")
            }
        };
        writeln!(w, "shard        {}", pair(&d.shard))?;
        let schedule_conflict = matches!(&d.schedule, (Some(a), Some(b)) if a != b);
        match &d.schedule {
            (None, None) => {}
            (a, b) => {
                let name = |s: &Option<String>| s.clone().unwrap_or_else(|| "(none)".to_owned());
                writeln!(w, "schedule     {}", pair(&(name(a), name(b))))?;
            }
        }
        writeln!(w, "algorithm    {}", pair(&d.algorithm))?;
        writeln!(
            w,
            "fairness     {}",
            pair(&(d.fairness.0.to_string(), d.fairness.1.to_string()))
        )?;
        writeln!(
            w,
            "cycle length {}",
            if d.cycle_length.0 == d.cycle_length.1 {
                format!("{} (unchanged)", d.cycle_length.0)
            } else {
                format!("{} -> {}", d.cycle_length.0, d.cycle_length.1)
            }
        )?;
        writeln!(w, "digest       {}", pair(&d.digest))?;
        writeln!(w, "cycle digest {}", pair(&d.cycle_digest))?;
        let worst = (d.worst.0.text(), d.worst.1.text());
        writeln!(w, "worst ratio  {}", pair(&worst))?;
        writeln!(w, "tenants")?;
        for (id, weight, bound) in &d.added {
            writeln!(w, "  + {id}: weight {weight}, bound {bound} (added)")?;
        }
        for (id, weight, bound) in &d.removed {
            writeln!(w, "  - {id}: weight {weight}, bound {bound} (removed)")?;
        }
        for k in d.kept.iter().filter(|k| !k.unchanged()) {
            writeln!(
                w,
                "  ~ {}: weight {} -> {}, bound {} -> {}",
                k.id, k.weight.0, k.weight.1, k.bound.0, k.bound.1
            )?;
        }
        let unchanged = d.kept.iter().filter(|k| k.unchanged()).count();
        if unchanged > 0 {
            let unchanged = crate::out::count(unchanged as u64, "tenant", "tenants");
            writeln!(w, "  = {unchanged} unchanged (weight and bound)")?;
        }
        let rollout = d.changed && d.shard.0 != d.shard.1;
        if rollout && !d.seam.is_empty() {
            writeln!(w)?;
            writeln!(
            w,
            "seam of a rollout {} -> {}: each tenant's gap at its worst over every seal point N",
            d.shard.0, d.shard.1
        )?;
            seam_table(&d.seam, w)?;
            if !d.removed.is_empty() {
                writeln!(
                    w,
                    "leaving: {} (no slot after the seal)",
                    d.removed
                        .iter()
                        .map(|(id, _, _)| id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )?;
            }
            if let Some(worst) = &d.worst_seam {
                writeln!(
                w,
                "worst seam bound: {} reservations ({}, at N = {}); the rollout prints the exact \
                 bound for its N",
                worst.reservations_across_seam, worst.tenant, worst.seal_sequence
            )?;
            }
        }
        writeln!(w)?;
        if !d.changed {
            writeln!(w, "no change: identical canonical bytes")?;
        } else if d.shard.0 == d.shard.1
            && d.algorithm.0 != d.algorithm.1
            && d.cycle_length.0 == d.cycle_length.1
            && d.added.is_empty()
            && d.removed.is_empty()
            && d.kept.iter().all(|k| k.weight.0 == k.weight.1)
        {
            writeln!(
            w,
            "algorithms compared on one policy: bound = most consecutive reservations until the tenant is selected, \
             measured on each cycle; worst ratio = largest bound / ceil(L / weight). \
             Switching the algorithm of shard {} is a policy change: it needs a new shard id.",
            d.shard.1
        )?;
        } else if d.shard.0 == d.shard.1 {
            writeln!(
            w,
            "REFUSED BY ROLLOUT AND REGISTER: the new policy reuses shard id {}; a shard is bound to its policy forever. \
             Give the new policy a new shard id (e.g. {}-next) and roll it out: statek rollout OLD.toml NEW.toml.",
            d.shard.1, d.shard.1
        )?;
        } else if schedule_conflict {
            writeln!(
            w,
            "REFUSED BY ROLLOUT: the files name different schedules; a rollout continues one schedule \
             (give the new file the old one's schedule, or leave the key out)."
        )?;
        } else {
            writeln!(
            w,
            "rollout: statek rollout OLD.toml NEW.toml seals {} at its cursor and registers {} as its successor \
             in one transaction; replicas follow within one tick, no drain (statek rollout --dry-run shows the seam).",
            d.shard.0, d.shard.1
        )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(shard: &str, weights: &[(&str, u32)]) -> WeightedFairnessPolicy {
        let text = format!(
            "shard = \"{shard}\"\n{}",
            weights
                .iter()
                .map(|(t, w)| format!("[[tenants]]\nid = \"{t}\"\nweight = {w}\n"))
                .collect::<String>()
        );
        PolicyFile::parse("t.toml", &text).unwrap().into_policy()
    }

    #[test]
    fn diff_compares_algorithms_on_one_file() {
        let file = policy("primary-v1", &[("a", 5), ("b", 2), ("c", 1)]);
        let d = diff(
            &with_algorithm(&file, PolicyAlgorithm::MinGapV1).unwrap(),
            &with_algorithm(&file, PolicyAlgorithm::MinGapV2).unwrap(),
        );
        assert_eq!(d.algorithm, ("min-gap-v1".into(), "min-gap-v2".into()));
        // min-gap-v1 leaves b at 5 against ceil(8 / 2) = 4; v2 finds 4.
        assert_eq!(
            d.worst,
            (
                Worst {
                    ratio: (5, 4),
                    excess: 1
                },
                Worst {
                    ratio: (2, 2),
                    excess: 0
                }
            )
        );
        assert_eq!(
            d.kept.iter().map(|k| k.bound).collect::<Vec<_>>(),
            [(2, 2), (5, 4), (8, 8)]
        );
        let text = crate::out::render(&d, crate::out::Format::Text).unwrap();
        assert!(
            text.contains("algorithm    min-gap-v1 -> min-gap-v2"),
            "{text}"
        );
        assert!(
            text.contains(
                "worst ratio  5/4 = 1.250, excess 1 slots -> 2/2 = 1.000, excess 0 slots"
            ),
            "{text}"
        );
        assert!(text.contains("algorithms compared on one policy"), "{text}");
    }

    #[test]
    fn diff_names_changes() {
        let old = policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)]);
        let new = policy("primary-v2", &[("tenant-a", 3), ("tenant-c", 1)]);
        let d = diff(&old, &new);
        assert!(d.changed);
        assert_eq!(d.added, vec![("tenant-c".into(), 1, 4)]);
        assert_eq!(d.removed, vec![("tenant-b".into(), 1, 4)]);
        assert_eq!(
            d.kept,
            vec![KeptTenant {
                id: "tenant-a".into(),
                weight: (3, 3),
                bound: (2, 2)
            }]
        );
        assert!(!diff(&old, &old).changed);
        assert_eq!(
            d.worst.0,
            Worst {
                ratio: (2, 2),
                excess: 0
            }
        );
        assert!(crate::out::render(
            &diff(&old, &policy("primary-v1", &[("tenant-a", 1)])),
            crate::out::Format::Text
        )
        .unwrap()
        .contains("REFUSED BY ROLLOUT AND REGISTER"));
    }
}
