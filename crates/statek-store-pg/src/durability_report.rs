//! What a durability check reads and decides, as values: the levels of
//! `synchronous_commit`, the caller's [`DurabilityPolicy`], the risks found,
//! the [`FailoverCondition`] a synchronous layout is durable under, and the
//! [`DurabilityReport`]. Below `error.rs`, whose errors carry them, and
//! `durability.rs`, which runs the check (and parses a level into a
//! [`StoreError`](crate::StoreError)).
//!
//! How standbys are judged, when statek's commits wait for standbys
//! (`synchronous_commit` `remote_write`, `on` or `remote_apply`):
//!
//! | `sync_state` | listed in `synchronous_standby_names` | judged |
//! |---|---|---|
//! | `sync` (`FIRST n`) | yes, among the first n connected | no risk: every acknowledged commit was flushed there; durable if a failover promotes one of these |
//! | `quorum` (`ANY n`) | yes | no risk: every acknowledged commit was flushed on n of them; durable if a failover promotes the most advanced |
//! | `potential` | yes, not waited for now | no risk by itself (commits wait for the others, or wait); a failover must not promote it |
//! | `async` | no | risk `asynchronous_standbys` |
//!
//! With `local` or `off` every standby is `asynchronous_standbys`, and a
//! `synchronous_standby_names` that does not parse makes `potential`
//! standbys one too (fail closed).

use std::fmt;

use crate::synchronous_standbys::SynchronousStandbys;

/// The `synchronous_commit` level of statek's transactions, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum SynchronousCommit {
    /// Do not wait for the WAL flush: a crash loses recent acknowledged
    /// reservations. For tests and demos only.
    Off,
    /// Wait for the local WAL flush only, never for standbys.
    Local,
    /// Wait for the local flush and for synchronous standbys to write the
    /// WAL to their operating system.
    RemoteWrite,
    /// Wait for the local flush and for synchronous standbys to flush the
    /// WAL (PostgreSQL's default, and statek's).
    On,
    /// As `On`, and wait until synchronous standbys have applied it.
    RemoteApply,
}

impl SynchronousCommit {
    /// The PostgreSQL setting value.
    pub fn as_str(self) -> &'static str {
        match self {
            SynchronousCommit::Off => "off",
            SynchronousCommit::Local => "local",
            SynchronousCommit::RemoteWrite => "remote_write",
            SynchronousCommit::On => "on",
            SynchronousCommit::RemoteApply => "remote_apply",
        }
    }

    /// Whether a commit at this level waits for the local WAL flush.
    pub fn waits_for_local_flush(self) -> bool {
        self != SynchronousCommit::Off
    }

    /// Whether a commit at this level waits for synchronous standbys.
    pub fn waits_for_standbys(self) -> bool {
        self >= SynchronousCommit::RemoteWrite
    }
}

impl fmt::Display for SynchronousCommit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the durability check does with the risks it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum DurabilityPolicy {
    /// Refuse every risk (the default): `fsync` or `full_page_writes` off,
    /// a `synchronous_commit` that does not wait for the local flush,
    /// asynchronous physical standbys, and standbys the role cannot see.
    #[default]
    Require,
    /// As `Require`, but accept asynchronous (or invisible) standbys: a
    /// failover to one can lose acknowledged reservations, which the
    /// failover detection then reports (never silently).
    AllowAsynchronousStandbys,
    /// Accept everything and only report it: tests, demos, benchmarks.
    AllowNoDurability,
}

impl DurabilityPolicy {
    /// Whether this policy refuses `risk`.
    pub fn refuses(self, risk: &DurabilityRisk) -> bool {
        match self {
            DurabilityPolicy::Require => true,
            DurabilityPolicy::AllowAsynchronousStandbys => !matches!(
                risk,
                DurabilityRisk::AsynchronousStandbys { .. }
                    | DurabilityRisk::StandbysNotVisible { .. }
            ),
            DurabilityPolicy::AllowNoDurability => false,
        }
    }
}

/// One way an acknowledged reservation could be lost on this server.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DurabilityRisk {
    /// `fsync = off`: an operating-system crash can lose committed data.
    FsyncOff,
    /// `full_page_writes = off`: an operating-system crash can leave torn
    /// pages that recovery cannot repair.
    FullPageWritesOff,
    /// statek's effective `synchronous_commit` does not wait for the local
    /// WAL flush: a crash of this server loses acknowledged reservations.
    SynchronousCommitOff {
        /// The effective value on statek's connection.
        setting: String,
    },
    /// Physical streaming standbys that statek's commits do not wait for
    /// and that `synchronous_standby_names` does not list (`sync_state =
    /// async`), or every standby when statek's `synchronous_commit` waits
    /// for none (`local`, `off`): a failover to one can lose acknowledged
    /// reservations.
    AsynchronousStandbys {
        /// Their `application_name`s.
        standbys: Vec<String>,
    },
    /// Walsenders whose details the role may not read (it needs the
    /// privileges of `pg_read_all_stats`, e.g. through `pg_monitor`): they
    /// may be asynchronous standbys.
    StandbysNotVisible {
        /// How many.
        walsenders: u32,
    },
}

impl DurabilityRisk {
    /// The metric label and setting name: `fsync`, `full_page_writes`,
    /// `synchronous_commit`, `asynchronous_standbys`,
    /// `standbys_not_visible`.
    pub fn label(&self) -> &'static str {
        match self {
            DurabilityRisk::FsyncOff => "fsync",
            DurabilityRisk::FullPageWritesOff => "full_page_writes",
            DurabilityRisk::SynchronousCommitOff { .. } => "synchronous_commit",
            DurabilityRisk::AsynchronousStandbys { .. } => "asynchronous_standbys",
            DurabilityRisk::StandbysNotVisible { .. } => "standbys_not_visible",
        }
    }

    /// Every label, for metrics that report each risk as 0 or 1.
    pub const LABELS: [&'static str; 5] = [
        "fsync",
        "full_page_writes",
        "synchronous_commit",
        "asynchronous_standbys",
        "standbys_not_visible",
    ];
}

impl fmt::Display for DurabilityRisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DurabilityRisk::FsyncOff => {
                f.write_str("fsync is off: an operating-system crash can lose acknowledged reservations")
            }
            DurabilityRisk::FullPageWritesOff => f.write_str(
                "full_page_writes is off: an operating-system crash can corrupt acknowledged reservations",
            ),
            DurabilityRisk::SynchronousCommitOff { setting } => write!(
                f,
                "synchronous_commit is {setting} on statek's connection: a crash of the server loses acknowledged reservations"
            ),
            DurabilityRisk::AsynchronousStandbys { standbys } => write!(
                f,
                "asynchronous standbys ({}): a failover to one can lose acknowledged reservations; \
                 list them in synchronous_standby_names",
                standbys.join(", ")
            ),
            DurabilityRisk::StandbysNotVisible { walsenders } => write!(
                f,
                "{walsenders} walsender(s) the role may not inspect (grant pg_monitor): they may be asynchronous standbys"
            ),
        }
    }
}

/// A physical streaming standby of the server, from `pg_stat_replication`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standby {
    /// Its `application_name` (what `synchronous_standby_names` lists).
    pub application_name: String,
    /// `streaming` or `catchup`.
    pub state: String,
    /// `async`, `potential`, `sync` or `quorum`.
    pub sync_state: String,
}

/// What the durability check read from the server, on statek's own
/// connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurabilityReport {
    /// `fsync`.
    pub fsync: bool,
    /// `full_page_writes`.
    pub full_page_writes: bool,
    /// The effective `synchronous_commit` of statek's connection (startup
    /// option, role setting or server default, in that order).
    pub synchronous_commit: SynchronousCommit,
    /// The server's `synchronous_standby_names`.
    pub synchronous_standby_names: String,
    /// Physical streaming standbys (not logical replication, not
    /// `pg_receivewal` or `pg_basebackup`, which replay nothing).
    pub standbys: Vec<Standby>,
    /// Walsenders the role may not inspect.
    pub hidden_walsenders: u32,
    /// The server's WAL timeline (`None` on a standby in recovery).
    pub timeline: Option<u32>,
}

impl DurabilityReport {
    /// Every risk found, in a fixed order.
    pub fn risks(&self) -> Vec<DurabilityRisk> {
        let mut risks = Vec::new();
        if !self.fsync {
            risks.push(DurabilityRisk::FsyncOff);
        }
        if !self.full_page_writes {
            risks.push(DurabilityRisk::FullPageWritesOff);
        }
        if !self.synchronous_commit.waits_for_local_flush() {
            risks.push(DurabilityRisk::SynchronousCommitOff {
                setting: self.synchronous_commit.to_string(),
            });
        }
        // `off` and `local` wait for no standby, whatever it is listed as.
        let waits = self.synchronous_commit.waits_for_standbys();
        // A `potential` standby is listed: commits wait for the `sync`
        // ones (or, with fewer attached than the number, wait), and the
        // failover condition says not to promote it.
        let listed = matches!(
            self.synchronous_standbys(),
            Some(SynchronousStandbys::First { .. } | SynchronousStandbys::Any { .. })
        );
        let asynchronous: Vec<String> = self
            .standbys
            .iter()
            .filter(|s| {
                !waits
                    || !match s.sync_state.as_str() {
                        "sync" | "quorum" => true,
                        "potential" => listed,
                        _ => false,
                    }
            })
            .map(|s| s.application_name.clone())
            .collect();
        if !asynchronous.is_empty() {
            risks.push(DurabilityRisk::AsynchronousStandbys {
                standbys: asynchronous,
            });
        }
        if self.hidden_walsenders > 0 {
            risks.push(DurabilityRisk::StandbysNotVisible {
                walsenders: self.hidden_walsenders,
            });
        }
        risks
    }

    /// The risks `policy` refuses.
    pub fn refused_by(&self, policy: DurabilityPolicy) -> Vec<DurabilityRisk> {
        self.risks()
            .into_iter()
            .filter(|risk| policy.refuses(risk))
            .collect()
    }

    /// [`synchronous_standby_names`](Self::synchronous_standby_names),
    /// parsed; `None` when it does not parse (a server never reports such
    /// a value).
    pub fn synchronous_standbys(&self) -> Option<SynchronousStandbys> {
        SynchronousStandbys::parse(&self.synchronous_standby_names)
    }

    /// The condition under which a failover keeps every acknowledged
    /// reservation, when statek's commits wait for standbys (a
    /// `synchronous_commit` of `remote_write` or stronger, and a
    /// `synchronous_standby_names` that lists some); `None` otherwise
    /// (commits wait for no standby: see [`risks`](Self::risks)). statek
    /// cannot check it: the failover manager decides which standby it
    /// promotes.
    pub fn failover_condition(&self) -> Option<FailoverCondition> {
        if !self.synchronous_commit.waits_for_standbys() {
            return None;
        }
        let named = |state: &str| -> Vec<String> {
            self.standbys
                .iter()
                .filter(|s| s.sync_state == state)
                .map(|s| s.application_name.clone())
                .collect()
        };
        match self.synchronous_standbys()? {
            SynchronousStandbys::None => None,
            SynchronousStandbys::First { count, .. } => {
                Some(FailoverCondition::PromoteSynchronous {
                    count,
                    synchronous: named("sync"),
                    potential: named("potential"),
                })
            }
            SynchronousStandbys::Any { count, .. } => {
                Some(FailoverCondition::PromoteMostAdvanced {
                    count,
                    quorum: named("quorum"),
                    potential: named("potential"),
                })
            }
        }
    }
}

/// What a failover must do to keep every acknowledged reservation, on a
/// server whose commits wait for synchronous standbys. PostgreSQL makes
/// each commit wait; which standby a failover promotes is the failover
/// manager's choice (CloudNativePG and Patroni promote one that meets the
/// condition).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailoverCondition {
    /// `FIRST n (...)` (priority): each acknowledged commit was flushed on
    /// the `n` standbys shown as `sync`. Durable if a failover promotes a
    /// standby that was synchronous, never a `potential` one (it may lack
    /// the last acknowledged commits). With fewer than `n` synchronous
    /// standbys attached, commits wait.
    PromoteSynchronous {
        /// `n`: how many synchronous standbys each commit waits for.
        count: u32,
        /// The standbys shown as `sync`: the ones a failover may promote.
        synchronous: Vec<String>,
        /// The listed standbys shown as `potential`: not to be promoted.
        potential: Vec<String>,
    },
    /// `ANY n (...)` (quorum): each acknowledged commit was flushed on `n`
    /// of the standbys shown as `quorum`, not always the same ones.
    /// Durable if a failover promotes the most advanced of them (the one
    /// that has every acknowledged commit).
    PromoteMostAdvanced {
        /// `n`: how many of the quorum each commit waits for.
        count: u32,
        /// The standbys shown as `quorum`.
        quorum: Vec<String>,
        /// The listed standbys shown as `potential` (not streaming yet).
        potential: Vec<String>,
    },
}

impl fmt::Display for FailoverCondition {
    /// One sentence, e.g. `durable if a failover promotes a standby that
    /// was synchronous (FIRST 1: standby1), never a potential one
    /// (standby2)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |names: &[String]| {
            if names.is_empty() {
                "none attached".to_owned()
            } else {
                names.join(", ")
            }
        };
        let (count, attached, potential) = match self {
            FailoverCondition::PromoteSynchronous {
                count,
                synchronous,
                potential,
            } => {
                write!(
                    f,
                    "durable if a failover promotes a standby that was synchronous \
                     (FIRST {count}: {})",
                    list(synchronous)
                )?;
                (*count, synchronous, potential)
            }
            FailoverCondition::PromoteMostAdvanced {
                count,
                quorum,
                potential,
            } => {
                write!(
                    f,
                    "durable if a failover promotes the most advanced standby of the quorum \
                     (ANY {count}: {})",
                    list(quorum)
                )?;
                (*count, quorum, potential)
            }
        };
        if !potential.is_empty() {
            write!(f, ", never a potential one ({})", potential.join(", "))?;
        }
        if attached.len() < usize::try_from(count).unwrap_or(usize::MAX) {
            write!(
                f,
                "; only {} of {count} attached: commits wait",
                attached.len()
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for DurabilityReport {
    /// One line: `fsync=on full_page_writes=on synchronous_commit=on
    /// standbys=standby1(sync),standby2(potential) timeline=1`, then, when
    /// commits wait for standbys, `; ` and the [`FailoverCondition`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on = |b: bool| if b { "on" } else { "off" };
        write!(
            f,
            "fsync={} full_page_writes={} synchronous_commit={} standbys=",
            on(self.fsync),
            on(self.full_page_writes),
            self.synchronous_commit
        )?;
        if self.standbys.is_empty() {
            f.write_str("none")?;
        }
        for (i, s) in self.standbys.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}({})", s.application_name, s.sync_state)?;
        }
        if self.hidden_walsenders > 0 {
            write!(f, " hidden_walsenders={}", self.hidden_walsenders)?;
        }
        match self.timeline {
            Some(t) => write!(f, " timeline={t}")?,
            None => f.write_str(" timeline=in-recovery")?,
        }
        match self.failover_condition() {
            Some(condition) => write!(f, "; {condition}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SynchronousCommit::{Local, On, RemoteApply, RemoteWrite};

    /// A durable server's report: `standbys` as `name:sync_state`.
    fn report(level: SynchronousCommit, names: &str, standbys: &[&str]) -> DurabilityReport {
        DurabilityReport {
            fsync: true,
            full_page_writes: true,
            synchronous_commit: level,
            synchronous_standby_names: names.to_owned(),
            standbys: standbys
                .iter()
                .map(|s| {
                    let (name, sync_state) = s.split_once(':').unwrap_or((s, ""));
                    Standby {
                        application_name: name.to_owned(),
                        state: "streaming".to_owned(),
                        sync_state: sync_state.to_owned(),
                    }
                })
                .collect(),
            hidden_walsenders: 0,
            timeline: Some(1),
        }
    }

    /// The standbys judged asynchronous (the only risk of these durable
    /// reports, refused by `Require`) and the failover condition's text
    /// (empty: none).
    fn check(
        level: SynchronousCommit,
        names: &str,
        standbys: &[&str],
        asynchronous: &[&str],
        condition: &str,
    ) {
        let r = report(level, names, standbys);
        let expected = if asynchronous.is_empty() {
            vec![]
        } else {
            vec![DurabilityRisk::AsynchronousStandbys {
                standbys: asynchronous.iter().map(|&s| s.to_owned()).collect(),
            }]
        };
        let case = format!("{level} {names:?} {standbys:?}");
        assert_eq!(r.risks(), expected, "{case}");
        assert_eq!(r.refused_by(DurabilityPolicy::Require), expected, "{case}");
        assert!(
            r.refused_by(DurabilityPolicy::AllowAsynchronousStandbys)
                .is_empty(),
            "{case}"
        );
        assert_eq!(
            r.failover_condition()
                .map(|c| c.to_string())
                .unwrap_or_default(),
            condition,
            "{case}"
        );
    }

    const FIRST_1: &str = "durable if a failover promotes a standby that was synchronous (FIRST 1";
    const ANY_1: &str =
        "durable if a failover promotes the most advanced standby of the quorum (ANY 1";

    #[test]
    fn standbys_are_judged_by_what_a_failover_keeps() {
        let first_1 = |rest: &str| format!("{FIRST_1}{rest}");
        let any_1 = |rest: &str| format!("{ANY_1}{rest}");
        let potential = first_1(": standby1), never a potential one (standby2)");
        // No standby, no synchronous replication: nothing to fail over to.
        check(On, "", &[], &[], "");
        // FIRST 1 with both attached: the second is potential, no risk.
        check(
            On,
            "FIRST 1 (standby1, standby2)",
            &["standby1:sync", "standby2:potential"],
            &[],
            &potential,
        );
        check(
            On,
            "standby1, standby2",
            &["standby1:sync", "standby2:potential"],
            &[],
            &potential,
        );
        check(
            RemoteApply,
            "*",
            &["standby1:sync", "standby2:potential"],
            &[],
            &potential,
        );
        check(
            On,
            "FIRST 1 (standby1, standby2)",
            &["standby2:sync"],
            &[],
            &first_1(": standby2)"),
        );
        // ANY 1 with two: both quorum.
        check(
            On,
            "ANY 1 (standby1, standby2)",
            &["standby1:quorum", "standby2:quorum"],
            &[],
            &any_1(": standby1, standby2)"),
        );
        check(
            RemoteWrite,
            "ANY 1 (s1, s2)",
            &["s1:quorum", "s2:potential"],
            &[],
            &any_1(": s1), never a potential one (s2)"),
        );
        // A standby not listed is asynchronous beside a synchronous one.
        check(
            On,
            "FIRST 1 (standby1)",
            &["standby1:sync", "standby2:async"],
            &["standby2"],
            &first_1(": standby1)"),
        );
        check(
            On,
            "ANY 1 (s1, s2)",
            &["s1:quorum", "s3:async", "s2:quorum"],
            &["s3"],
            &any_1(": s1, s2)"),
        );
        check(On, "", &["s1:async"], &["s1"], "");
        // FIRST n with n attached, and with fewer (commits wait).
        check(On, "FIRST 2 (s1, s2, s3)", &["s1:sync", "s2:sync", "s3:potential"], &[], "durable if a failover promotes a standby that was synchronous (FIRST 2: s1, s2), never a potential one (s3)");
        check(On, "2 (s1, s2)", &["s1:sync"], &[], "durable if a failover promotes a standby that was synchronous (FIRST 2: s1); only 1 of 2 attached: commits wait");
        check(
            On,
            "FIRST 1 (s1)",
            &[],
            &[],
            &first_1(": none attached); only 0 of 1 attached: commits wait"),
        );
        // `local` waits for no standby: every standby is a risk, no condition.
        check(
            Local,
            "FIRST 1 (s1, s2)",
            &["s1:sync", "s2:potential"],
            &["s1", "s2"],
            "",
        );
        // Fail closed: `potential` without a list that says why, or with
        // one that does not parse.
        check(On, "", &["s1:potential"], &["s1"], "");
        check(On, "FIRST 1 (s1", &["s1:sync", "s2:potential"], &["s2"], "");
    }

    #[test]
    fn the_report_line_shows_the_condition() {
        assert_eq!(
            report(
                On,
                "FIRST 1 (standby1, standby2)",
                &["standby1:sync", "standby2:potential"]
            )
            .to_string(),
            "fsync=on full_page_writes=on synchronous_commit=on \
             standbys=standby1(sync),standby2(potential) timeline=1; durable if a failover \
             promotes a standby that was synchronous (FIRST 1: standby1), never a potential one \
             (standby2)"
        );
        assert_eq!(
            report(Local, "ANY 1 (s1, s2)", &["s1:quorum"]).to_string(),
            "fsync=on full_page_writes=on synchronous_commit=local standbys=s1(quorum) timeline=1"
        );
    }
}
