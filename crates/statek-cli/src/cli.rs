//! Command-line definitions and dispatch.

use crate::out::{emit, Format};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Parser, Subcommand};
use statek_policy::PolicyAlgorithm;
use statek_store_pg::input_limits::{MAX_LIST_LIMIT, MAX_PRUNE_BATCH};
use statek_store_pg::RunState;
use uuid::Uuid;

use crate::count_arg::time_arg;
use crate::count_arg::{duration, ranged, Ranged};
use crate::db::DbArgs;
use crate::{
    audit_cmd, limits_cmd, policy_cmd, policy_compile, rollout_cmd, runs_cmd, shard_cmd, store_cmd,
};

/// statek: fair, weighted, durable tenant scheduling on PostgreSQL.
#[derive(Debug, Parser)]
#[command(
    name = "statek",
    version,
    about,
    after_help = "Examples:
  statek policy compile deploy/policies/two-tenants.toml --show-cycle
  statek policy diff old.toml new.toml
  statek policy diff policy.toml --algorithm min-gap-v1 --against min-gap-v2
  DATABASE_URL=postgres://owner@db/statek statek migrate
  statek register deploy/policies/two-tenants.toml --database-url postgres://runtime@db/statek
  statek rollout primary-v1.toml primary-v2.toml --dry-run
  statek rollout primary-v1.toml primary-v2.toml --database-url postgres://owner@db/statek
  statek status --shard primary-v1 --format json
  statek shard resume primary-v1 --acknowledge-loss --note INC-1234
  statek prune --retain 24h --batch 1000 --until-empty
  statek limits set --tenant tenant-a --max-running 10 --rate 100/s
  statek runs list --tenant tenant-a --state failed --limit 20
  statek runs prune --retain 168h --until-empty
  statek demo                                  (built with --features demo)"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Compile, compare and verify policy files.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Create or upgrade the statek schema (owner role).
    Migrate {
        #[command(flatten)]
        db: DbArgs,
    },
    /// Bind a policy file to its shard (idempotent; a different policy is refused).
    Register {
        /// Policy file (TOML).
        file: PathBuf,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Change the policy live: seal FROM's shard at its cursor and register
    /// TO's shard as its successor, in one transaction (owner role).
    ///
    /// TO.toml needs a new shard id; its `schedule`, if any, must be FROM's.
    /// Replicas follow the chain within one tick of meeting the seal: no
    /// drain, no restart. Prints every tenant's exact seam bound (a retry
    /// after a lost acknowledgement prints `replayed`). `--dry-run` needs no
    /// database: each tenant's seam bound at its worst over every seal point
    /// (FROM counted from its own start); `--dry-run --at-cursor` reads the
    /// chain for the exact bound at the live cursor, with the gaps carried
    /// into FROM from the shard before it.
    Rollout {
        /// The policy of the live shard (TOML).
        from: PathBuf,
        /// The successor's policy (TOML), with a new shard id.
        to: PathBuf,
        /// Print the seam at its worst over every seal point; write nothing
        /// (no database needed).
        #[arg(long)]
        dry_run: bool,
        /// With --dry-run: read the live shard's cursor and the gaps carried
        /// from its predecessor (--database-url or $DATABASE_URL) and print
        /// the exact seam for a seal at that cursor; still writes nothing.
        /// Without it a dry run never connects, whatever the environment.
        #[arg(long, requires = "dry_run")]
        at_cursor: bool,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Least-privilege roles.
    #[command(subcommand)]
    Roles(RolesCommand),
    /// Judge a shard's fairness evidence against its policy: per tenant, slots
    /// entitled and received, how they ended (claimed, idle, known idle,
    /// contended, limited, debt, unused, unrecorded), the largest gap against
    /// the bound, the longest wait of a run (service gap), service lag, runs,
    /// the cost served (on a cost shard judged against the cost bound); exit
    /// 16 when a gap or a cost is outside its bound or the evidence is
    /// inconsistent.
    Audit {
        /// The shard.
        #[arg(long)]
        shard: String,
        /// Sequences A..B (A to B-1) or A.. (to the cursor); default: every
        /// sequence up to the cursor.
        #[arg(long, value_parser = crate::audit_cmd::sequences, conflicts_with_all = ["from", "to"])]
        sequences: Option<std::ops::Range<u64>>,
        /// Audit every shard of the shard's schedule (first to live, all
        /// their sequences) and the gap of every tenant across each seam.
        #[arg(long, conflicts_with_all = ["sequences", "from", "to"])]
        whole_schedule: bool,
        /// The ranges reserved at or after this time: RFC 3339
        /// (2026-12-04T10:00:00Z) or a duration ago (1h).
        #[arg(long, value_parser = time_arg, requires = "to")]
        from: Option<std::time::SystemTime>,
        /// ... and before this time (RFC 3339, a duration ago, or now).
        #[arg(long, value_parser = time_arg, requires = "from")]
        to: Option<std::time::SystemTime>,
        /// Cost mode: D of the bound, the most attempts of one tenant
        /// claimed and not yet charged at any moment: the sum, over every
        /// Worker process that held attempts of the schedule within one
        /// lease period of another (crashed ones and a predecessor shard's
        /// included), of its concurrency plus twice its completion batch.
        /// Both sides of every tenant's cost bound are judged with it;
        /// without it they are reported, not judged (ignored on a
        /// slot-mode shard).
        #[arg(long, allow_negative_numbers = true, value_parser = ranged::<1, 1_000_000>)]
        concurrency: Option<Ranged>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Cursor, seal and chain, recent reservation rate and retained evidence of a shard.
    Status {
        /// The shard.
        #[arg(long)]
        shard: String,
        /// Count rows older than this as due for pruning (e.g. 24h, 7d).
        #[arg(long, default_value = "24h", allow_hyphen_values = true, value_parser = duration)]
        retain: Duration,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        #[command(flatten)]
        db: DbArgs,
    },
    /// A shard's halts after reservation losses: `shard halts` lists them, `shard resume` resumes the shard (owner role).
    #[command(subcommand)]
    Shard(ShardCommand),
    /// Delete reservation rows older than the retention, oldest first, in batches (retention role).
    Prune {
        /// Keep rows younger than this (1h..=366d), e.g. 24h, 30d.
        #[arg(long, allow_hyphen_values = true, value_parser = duration)]
        retain: Duration,
        /// Rows per transaction (1..=10000).
        #[arg(long, default_value = "1000", allow_negative_numbers = true, value_parser = ranged::<1, { MAX_PRUNE_BATCH }>)]
        batch: Ranged,
        /// Repeat until nothing is due (default: one batch).
        #[arg(long)]
        until_empty: bool,
        /// Output format of the totals.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Tenant limits: concurrency cap and rate limit, runtime settings checked in every claim.
    #[command(subcommand)]
    Limits(LimitsCommand),
    /// The run queue: list, cancel, retry; prune finished runs.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// The noisy-neighbour demo against your database: statek, then a plain FIFO queue (owner role: it migrates and creates the FIFO baseline's index). Feature `demo`.
    #[cfg(feature = "demo")]
    Demo {
        #[command(flatten)]
        args: crate::demo::DemoArgs,
        #[command(flatten)]
        db: DbArgs,
    },
}

#[derive(Debug, Subcommand)]
enum PolicyCommand {
    /// Tenants, weights, entitled share, starvation bound per tenant, cycle length, digest.
    Compile {
        /// Policy file (TOML).
        file: PathBuf,
        /// Also print the cycle, slot by slot.
        #[arg(long)]
        show_cycle: bool,
        /// For a cost-mode policy: D, the most attempts of a tenant claimed
        /// and not yet charged (its `--max-running` cap; see
        /// docs/guarantees.md for D without one), to print each tenant's
        /// cost bound as a number (default: `… + D×C_max`; ignored for a
        /// slot-mode policy).
        #[arg(long, allow_negative_numbers = true, value_parser = ranged::<1, 1_000_000>)]
        concurrency: Option<Ranged>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// What changes between two policy files, and what the rollout must do;
    /// or, with `--against`, the bounds of two algorithms on one file.
    // Both forms in the usage line, which clap's error for a missing NEW
    // prints: a lone file is finished with NEW or with `--against`.
    #[command(override_usage = "statek policy diff [OPTIONS] <OLD> <NEW>\n       \
                                statek policy diff [OPTIONS] <OLD> --against <AGAINST>")]
    Diff {
        /// The policy in production (with `--against`: the one file).
        old: PathBuf,
        /// The proposed policy (not with `--against`).
        #[arg(required_unless_present = "against")]
        new: Option<PathBuf>,
        /// With `--against`: the algorithm to compare from (default: the
        /// file's).
        // `requires` alone lets `OLD NEW --algorithm A` through (clap drops
        // a requirement that conflicts with a given argument), and the
        // algorithm would be ignored: refuse it with NEW as well.
        #[arg(long, requires = "against", conflicts_with = "new", value_parser = algorithm())]
        algorithm: Option<PolicyAlgorithm>,
        /// Compare the file compiled with `--algorithm` against this
        /// algorithm.
        #[arg(long, conflicts_with = "new", value_parser = algorithm())]
        against: Option<PolicyAlgorithm>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Check that a shard holds exactly this policy (exit 4 if not).
    Verify {
        /// Policy file (TOML).
        file: PathBuf,
        /// The shard to check (default: the file's shard).
        #[arg(long)]
        shard: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        #[command(flatten)]
        db: DbArgs,
    },
}

#[derive(Debug, Subcommand)]
enum LimitsCommand {
    /// Set a tenant's cap and/or rate; a limit not given is kept (owner role).
    #[command(group(clap::ArgGroup::new("limit").required(true).multiple(true).args(["max_running", "rate"])))]
    Set {
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// At most this many runs of the tenant executing at once, across all replicas (1..=100000).
        #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = integer)]
        max_running: Option<i128>,
        /// At most N claims in any sliding window: 10/s, 100/m, 5000/h, 5/10s, 1/250ms (window 1ms..=1h).
        #[arg(long, value_name = "N/WINDOW", allow_hyphen_values = true)]
        rate: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Show one tenant's limits, or every tenant's (runtime role may read).
    Show {
        /// The tenant (default: all tenants with limits).
        #[arg(long)]
        tenant: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Remove a tenant's limits (owner role).
    Clear {
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        #[command(flatten)]
        db: DbArgs,
    },
}

#[derive(Debug, Subcommand)]
enum RunsCommand {
    /// Runs newest first, one page at a time.
    List {
        /// Only this tenant's runs.
        #[arg(long)]
        tenant: Option<String>,
        /// Only runs in this state.
        #[arg(long, value_parser = run_state())]
        state: Option<RunState>,
        /// Runs per page (1..=10000).
        #[arg(long, default_value = "50", allow_negative_numbers = true, value_parser = ranged::<1, { MAX_LIST_LIMIT }>)]
        limit: Ranged,
        /// The cursor printed after the previous page (`more: --after C`).
        #[arg(long)]
        after: Option<u64>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Cancel an available or running run (a running one learns it at its next heartbeat).
    Cancel {
        /// The run id.
        #[arg(value_parser = run_id)]
        id: Uuid,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Make a failed or cancelled run available again now.
    Retry {
        /// The run id.
        #[arg(value_parser = run_id)]
        id: Uuid,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Delete finished runs older than the retention, oldest first, in batches (retention role).
    Prune {
        /// Keep runs that finished less than this ago (1h..=366d), e.g. 168h.
        #[arg(long, allow_hyphen_values = true, value_parser = duration)]
        retain: Duration,
        /// Runs per transaction (1..=10000).
        #[arg(long, default_value = "1000", allow_negative_numbers = true, value_parser = ranged::<1, { MAX_PRUNE_BATCH }>)]
        batch: Ranged,
        /// Repeat until nothing is due (default: one batch).
        #[arg(long)]
        until_empty: bool,
        /// Output format of the totals.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        #[command(flatten)]
        db: DbArgs,
    },
}

#[derive(Debug, Subcommand)]
enum ShardCommand {
    /// Every halt recorded for the shard: why, both timelines, the lost
    /// reservations, who recorded it, and its resume.
    Halts {
        /// The shard.
        shard: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Resume a halted shard (owner role): records the acknowledgement and
    /// the reissued sequences of every open halt, then lets the shard
    /// accept reservations again.
    ///
    /// The sequences a failover lost were acknowledged on the old timeline
    /// and are handed out again on the new one: each of their slots is
    /// decided twice. `--acknowledge-loss` says you accept that; the
    /// command prints the reissued range of each halt.
    Resume {
        /// The shard.
        shard: String,
        /// Required: acknowledge that the lost sequences are handed out again.
        #[arg(long, required = true)]
        acknowledge_loss: bool,
        /// A note stored with the resume (at most 1,024 bytes), e.g. an incident id.
        #[arg(long)]
        note: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        #[command(flatten)]
        db: DbArgs,
    },
}

#[derive(Debug, Subcommand)]
enum RolesCommand {
    /// Grant the owner, runtime and retention roles exactly their privileges (run after migrate).
    Apply {
        /// Role that owns the schema (migrations).
        #[arg(long)]
        owner: String,
        /// Role of scheduler replicas and enqueuers.
        #[arg(long)]
        runtime: String,
        /// Role of the pruning job.
        #[arg(long)]
        retention: String,
        /// Also set the runtime role's default synchronous_commit (`ALTER
        /// ROLE runtime SET synchronous_commit = LEVEL`: on, remote_apply,
        /// remote_write, local, off), what a pooler's new server connection
        /// for it starts with. Needs CREATEROLE or a superuser.
        #[arg(long, value_name = "LEVEL")]
        synchronous_commit: Option<statek_store_pg::SynchronousCommit>,
        /// Print the SQL instead of applying it.
        #[arg(long)]
        print: bool,
        #[command(flatten)]
        db: DbArgs,
    },
}

// Flag values are parsed here, by clap: a value that is not of its kind
// (not an integer, not one of the listed names, not a UUID) is a usage
// error, exit 2, like a bad `--batch` or `--format`. What the commands
// check after parsing (a range, an id's or a rate's grammar) is invalid
// input, exit 3.

/// `--algorithm`, `--against`: the name of an algorithm this build knows.
fn algorithm() -> impl TypedValueParser<Value = PolicyAlgorithm> {
    PossibleValuesParser::new(PolicyAlgorithm::ALL.iter().map(|a| a.name()))
        .try_map(|name| name.parse::<PolicyAlgorithm>())
}

/// `--state`: the name of a run state.
fn run_state() -> impl TypedValueParser<Value = RunState> {
    PossibleValuesParser::new(RunState::ALL.map(|s| s.as_str()))
        .try_map(|name| name.parse::<RunState>())
}

/// Any integer (its range is the command's check, exit 3).
fn integer(text: &str) -> Result<i128, std::num::ParseIntError> {
    text.trim().parse()
}

/// A run id.
fn run_id(text: &str) -> Result<Uuid, uuid::Error> {
    Uuid::parse_str(text.trim())
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Runs one parsed command line: the command returns its report, and
/// `emit` writes it once, in the format asked for (text for commands
/// without `--format`).
///
/// # Errors
/// Any failure; [`crate::exit::code_for`] maps it to an exit code.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Policy(PolicyCommand::Compile {
            file,
            show_cycle,
            concurrency,
            format,
        }) => {
            let policy = policy_cmd::load(&file)?;
            let concurrency = concurrency.map(|d| d.get("--concurrency")).transpose()?;
            let compiled = policy_compile::compile(
                &file.display().to_string(),
                &policy,
                show_cycle,
                concurrency,
            );
            emit(&compiled, format)
        }
        Command::Policy(PolicyCommand::Diff {
            old,
            new,
            algorithm,
            against,
            format,
        }) => {
            let diff = match (new, against) {
                (Some(new), None) => {
                    let (old, new) = (policy_cmd::load_file(&old)?, policy_cmd::load_file(&new)?);
                    let mut diff = policy_cmd::diff(old.policy(), new.policy());
                    diff.schedule = (
                        old.schedule().map(ToString::to_string),
                        new.schedule().map(ToString::to_string),
                    );
                    diff
                }
                (None, Some(against)) => {
                    let policy = policy_cmd::load(&old)?;
                    let from = match algorithm {
                        Some(algorithm) => policy_cmd::with_algorithm(&policy, algorithm)?,
                        None => policy.clone(),
                    };
                    policy_cmd::diff(&from, &policy_cmd::with_algorithm(&policy, against)?)
                }
                _ => {
                    return Err(crate::exit::InvalidInput(
                        "policy diff needs a second file, or --against ALGORITHM".into(),
                    )
                    .into())
                }
            };
            emit(&diff, format)
        }
        Command::Policy(PolicyCommand::Verify {
            file,
            shard,
            format,
            db,
        }) => {
            // The report is written also when the shard holds another
            // policy; the mismatch is the exit code after it.
            let verified = runtime()?.block_on(store_cmd::verify(&file, shard.as_deref(), &db))?;
            emit(&verified, format)?;
            verified.into_result()
        }
        Command::Migrate { db } => {
            emit(&runtime()?.block_on(store_cmd::migrate(&db))?, Format::Text)
        }
        Command::Register { file, db } => emit(
            &runtime()?.block_on(store_cmd::register(&file, &db))?,
            Format::Text,
        ),
        Command::Rollout {
            from,
            to,
            dry_run,
            at_cursor,
            format,
            db,
        } => {
            let plan = rollout_cmd::RolloutPlan::load(&from, &to)?;
            let report = if at_cursor {
                runtime()?.block_on(plan.dry_run_at_cursor(&db))?
            } else if dry_run {
                plan.dry_run()
            } else {
                runtime()?.block_on(plan.run(&db))?
            };
            emit(&report, format)
        }
        Command::Roles(RolesCommand::Apply {
            owner,
            runtime: runtime_role,
            retention,
            synchronous_commit,
            print,
            db,
        }) => emit(
            &runtime()?.block_on(store_cmd::roles_apply(
                &owner,
                &runtime_role,
                &retention,
                synchronous_commit,
                print,
                &db,
            ))?,
            Format::Text,
        ),
        Command::Audit {
            shard,
            whole_schedule: true,
            concurrency,
            format,
            db,
            ..
        } => {
            let concurrency = concurrency.map(|d| d.get("--concurrency")).transpose()?;
            let audited =
                runtime()?.block_on(audit_cmd::audit_schedule(&shard, concurrency, &db))?;
            emit(&audited, format)?;
            audited.into_result()
        }
        Command::Audit {
            shard,
            sequences,
            from,
            to,
            concurrency,
            format,
            db,
            whole_schedule: false,
        } => {
            let span = match (from, to) {
                (Some(from), Some(to)) => audit_cmd::Span::Between(from, to),
                _ => audit_cmd::Span::Sequences(sequences.unwrap_or(0..u64::MAX)),
            };
            // The report is written also when the audit failed; the
            // failure is the exit code after it.
            let concurrency = concurrency.map(|d| d.get("--concurrency")).transpose()?;
            let audited = runtime()?.block_on(audit_cmd::audit(&shard, span, concurrency, &db))?;
            emit(&audited, format)?;
            audited.into_result()
        }
        Command::Status {
            shard,
            retain,
            format,
            db,
        } => emit(
            &runtime()?.block_on(store_cmd::status(&shard, retain, &db))?,
            format,
        ),
        Command::Shard(ShardCommand::Halts { shard, format, db }) => {
            emit(&runtime()?.block_on(shard_cmd::halts(&shard, &db))?, format)
        }
        Command::Shard(ShardCommand::Resume {
            shard,
            acknowledge_loss: _,
            note,
            format,
            db,
        }) => emit(
            &runtime()?.block_on(shard_cmd::resume(&shard, note.as_deref(), &db))?,
            format,
        ),
        Command::Prune {
            retain,
            batch,
            until_empty,
            format,
            db,
        } => {
            // Progress on standard error only for text, as a person reads it.
            let progress = format == Format::Text;
            emit(
                &runtime()?.block_on(store_cmd::prune(
                    retain,
                    batch.get("--batch")?,
                    until_empty,
                    progress,
                    &db,
                ))?,
                format,
            )
        }
        Command::Limits(LimitsCommand::Set {
            tenant,
            max_running,
            rate,
            format,
            db,
        }) => emit(
            &runtime()?.block_on(limits_cmd::set(&tenant, max_running, rate.as_deref(), &db))?,
            format,
        ),
        Command::Limits(LimitsCommand::Show { tenant, format, db }) => emit(
            &runtime()?.block_on(limits_cmd::show(tenant.as_deref(), &db))?,
            format,
        ),
        Command::Limits(LimitsCommand::Clear { tenant, format, db }) => emit(
            &runtime()?.block_on(limits_cmd::clear(&tenant, &db))?,
            format,
        ),
        Command::Runs(RunsCommand::List {
            tenant,
            state,
            limit,
            after,
            format,
            db,
        }) => emit(
            &runtime()?.block_on(runs_cmd::list(
                tenant.as_deref(),
                state,
                limit.get("--limit")?,
                after,
                &db,
            ))?,
            format,
        ),
        Command::Runs(RunsCommand::Cancel { id, format, db }) => {
            emit(&runtime()?.block_on(runs_cmd::cancel(id, &db))?, format)
        }
        Command::Runs(RunsCommand::Retry { id, format, db }) => {
            emit(&runtime()?.block_on(runs_cmd::retry(id, &db))?, format)
        }
        Command::Runs(RunsCommand::Prune {
            retain,
            batch,
            until_empty,
            format,
            db,
        }) => emit(
            &runtime()?.block_on(runs_cmd::prune(
                retain,
                batch.get("--batch")?,
                until_empty,
                &db,
            ))?,
            format,
        ),
        #[cfg(feature = "demo")]
        Command::Demo { args, .. } if args.cost_skew => crate::demo::run_cost_skew(&args),
        #[cfg(feature = "demo")]
        Command::Demo { args, db } => {
            // Its progress streams to standard output while it runs (the
            // exception in `out.rs`); the tables and checks are the report,
            // and a failed check is the exit code after it.
            let report = crate::demo::report(args, db.url()?)?;
            emit(&report, Format::Text)?;
            report.into_result()
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_valid() {
        super::Cli::command().debug_assert();
    }
}
