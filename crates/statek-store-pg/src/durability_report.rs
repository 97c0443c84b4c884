//! What a durability check reads and decides, as values: the levels of
//! `synchronous_commit`, the caller's [`DurabilityPolicy`], the risks found
//! and the [`DurabilityReport`]. Below `error.rs`, whose errors carry them,
//! and `durability.rs`, which runs the check (and parses a level into a
//! [`StoreError`](crate::StoreError)).

use std::fmt;

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
    /// Physical streaming standbys that statek's commits do not wait for: a
    /// failover to one can lose acknowledged reservations.
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
        let asynchronous: Vec<String> = self
            .standbys
            .iter()
            .filter(|s| !waits || !matches!(s.sync_state.as_str(), "sync" | "quorum"))
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
}

impl fmt::Display for DurabilityReport {
    /// One line: `fsync=on full_page_writes=on synchronous_commit=on
    /// standbys=standby1(sync) timeline=1`.
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
            Some(t) => write!(f, " timeline={t}"),
            None => f.write_str(" timeline=in-recovery"),
        }
    }
}
