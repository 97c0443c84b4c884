//! The bench report: machine description, every figure, the targets of
//! issue 6 with met/missed, JSON files and the printed table.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::args::Section;
use super::load::Measured;
use super::queue::QueuePhase;
use super::retained::PruneMeasured;
pub use super::target::Target;

/// What the run ran on.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Machine {
    /// `model name` from /proc/cpuinfo.
    pub cpu: String,
    /// Logical CPUs.
    pub cpus: usize,
    /// MemTotal from /proc/meminfo, GiB.
    pub memory_gib: f64,
    /// `uname -r`.
    pub kernel: String,
    /// `SELECT version()`.
    pub postgres: String,
    /// Server settings that matter for the figures.
    pub settings: BTreeMap<String, String>,
    /// `pgbench --version`.
    pub pgbench: String,
    /// When (UTC, `date -u`).
    pub date: String,
    /// The commit measured (`git rev-parse --short HEAD`, `+dirty` with
    /// uncommitted changes): a figure is evidence for this commit only.
    #[serde(default)]
    pub commit: String,
    /// `/proc/loadavg`'s 1, 5 and 15 minute load averages at the start.
    #[serde(default)]
    pub load_average: String,
    /// CPU steal over the run, percent of all CPU time (`/proc/stat`'s
    /// `steal` column): time the hypervisor gave this VM's CPUs to
    /// others. `None` where the kernel does not report it.
    #[serde(default)]
    pub cpu_steal_percent: Option<f64>,
    /// `/proc/stat`'s `(steal, total)` at the start.
    #[serde(skip)]
    steal_at_start: Option<(u64, u64)>,
}

/// `(steal, total)` jiffies of the `cpu` line of `/proc/stat`: user,
/// nice, system, idle, iowait, irq, softirq and steal add up to the total.
fn cpu_steal(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    (fields.len() == 8).then(|| (fields[7], fields.iter().sum()))
}

/// Percent of CPU time stolen between two `(steal, total)` readings.
fn steal_percent(start: (u64, u64), end: (u64, u64)) -> Option<f64> {
    let total = end.1.checked_sub(start.1).filter(|t| *t > 0)?;
    let steal = end.0.checked_sub(start.0)?;
    Some(steal as f64 * 100.0 / total as f64)
}

/// One client count of the reservation comparison.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ReservationRow {
    /// Concurrent clients.
    pub clients: usize,
    /// statek `reserve`.
    pub statek: Measured,
    /// pgbench, same transaction.
    pub pgbench: Measured,
    /// statek `reserve_batch` (units: reservations).
    pub batch: Measured,
}

/// Reservations on a durable server (`fsync`, `synchronous_commit`,
/// `full_page_writes` on), alone or with a synchronous standby.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct DurableRow {
    /// `durable` or `durable + synchronous standby`.
    pub setup: String,
    /// Concurrent clients.
    pub clients: usize,
    /// statek `reserve`.
    pub single: Measured,
    /// statek `reserve_batch` (units: reservations).
    pub batch: Measured,
}

/// Reservation latency at a retained row count.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct RetainedRow {
    /// Old rows in the table.
    pub rows: u64,
    /// One client, single reservations.
    pub measured: Measured,
}

/// The prune phase.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct PruneRow {
    /// The prune itself.
    pub prune: PruneMeasured,
    /// Reservers without a prune.
    pub without: Measured,
    /// The same reservers while the prune ran.
    pub during: Measured,
}

/// One criterion figure, nanoseconds.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct CompileRow {
    /// Shape (`compile/<shape>`).
    pub shape: String,
    /// `policy_new`, `swrr_reference`, `swrr_grouped`, `swrr_chosen`.
    pub function: String,
    /// Mean, ns.
    pub mean_ns: f64,
    /// Median, ns.
    pub median_ns: f64,
}

/// Everything one `cargo xtask bench` measured.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Report {
    /// The machine.
    pub machine: Machine,
    /// Seconds per measured load.
    pub window_seconds: u64,
    /// k of the batch figures.
    pub batch: u32,
    /// Reservations, per client count.
    pub reservations: Vec<ReservationRow>,
    /// Queue phases: fair k=1, fair k=batch, plain, empty.
    pub queue: Vec<QueuePhase>,
    /// Latency by retained rows.
    pub retained: Vec<RetainedRow>,
    /// Reservations with durable commits (section `durable`).
    #[serde(default)]
    pub durable: Vec<DurableRow>,
    /// Prune.
    pub prune: Option<PruneRow>,
    /// Policy compile (criterion).
    pub compile: Option<Vec<CompileRow>>,
    /// Section `workloads` (issue 12).
    #[serde(default)]
    pub workloads: super::workloads::Workloads,
    /// Section `enqueue` (issue 14).
    #[serde(default)]
    pub enqueue: Vec<super::enqueue::EnqueueRow>,
    /// Section `cost-skew` (issue 25).
    #[serde(default)]
    pub cost_skew: Option<super::workloads::cost_skew::CostSkew>,
    /// Section `soak` (opt-in).
    #[serde(default)]
    pub soak: Option<super::soak::Soak>,
    /// Section `sustained` (opt-in).
    #[serde(default)]
    pub sustained: Option<super::sustained::Sustained>,
    /// Targets.
    pub targets: Vec<Target>,
    /// Wall time of the database part, seconds.
    pub total_seconds: f64,
}

/// `"1234 /s, p50 0.41 ms, p99 1.20 ms"`.
pub fn line(m: &Measured) -> String {
    format!(
        "{:.0} /s, p50 {:.2} ms, p99 {:.2} ms ({} operations in {:.1} s)",
        m.units_per_second, m.p50_ms, m.p99_ms, m.operations, m.seconds
    )
}

fn command_output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

impl Machine {
    /// The machine without a server (the compile-only run).
    pub fn local() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
            .unwrap_or_else(|| "unknown".to_owned());
        let memory_kib: f64 = std::fs::read_to_string("/proc/meminfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        Machine {
            cpu,
            cpus: std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
            memory_gib: memory_kib / 1024.0 / 1024.0,
            kernel: command_output("uname", &["-r"]),
            postgres: String::new(),
            settings: BTreeMap::new(),
            pgbench: String::new(),
            date: command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            commit: commit(),
            load_average: std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
            cpu_steal_percent: None,
            steal_at_start: std::fs::read_to_string("/proc/stat")
                .ok()
                .as_deref()
                .and_then(cpu_steal),
        }
    }

    /// Sets [`cpu_steal_percent`](Self::cpu_steal_percent) from the start
    /// of the run to now.
    fn finish_steal(&mut self) {
        let now = std::fs::read_to_string("/proc/stat")
            .ok()
            .as_deref()
            .and_then(cpu_steal);
        if let (Some(start), Some(end)) = (self.steal_at_start, now) {
            self.cpu_steal_percent = steal_percent(start, end);
        }
    }
}

/// The short commit of the workspace, `+dirty` when it has uncommitted
/// changes.
fn commit() -> String {
    let head = command_output("git", &["rev-parse", "--short", "HEAD"]);
    let dirty =
        !command_output("git", &["status", "--porcelain", "--untracked-files=no"]).is_empty();
    if dirty {
        format!("{head}+dirty")
    } else {
        head
    }
}

/// Reads the machine description and the server's settings.
pub async fn machine(client: &tokio_postgres::Client) -> Result<Machine> {
    let mut machine = Machine::local();
    machine.postgres = client
        .query_one("SELECT version()", &[])
        .await?
        .try_get(0)?;
    for name in [
        "fsync",
        "synchronous_commit",
        "full_page_writes",
        "shared_buffers",
        "max_connections",
        "wal_level",
    ] {
        let value: String = client
            .query_one(&format!("SHOW {name}"), &[])
            .await?
            .try_get(0)?;
        machine.settings.insert(name.to_owned(), value);
    }
    Ok(machine)
}

/// Runs the criterion benchmark of statek-policy and reads its estimates;
/// `quick` shortens criterion's warm-up and measurement (a smoke run).
pub fn run_criterion(quick: bool) -> Result<Vec<CompileRow>> {
    let mut command = crate::workspace::cargo();
    command.args(["bench", "-p", "statek-policy", "--bench", "compile"]);
    if quick {
        command.args([
            "--",
            "--warm-up-time",
            "0.1",
            "--measurement-time",
            "0.3",
            "--sample-size",
            "10",
        ]);
    }
    let status = command.status().context("running cargo bench")?;
    if !status.success() {
        bail!("cargo bench -p statek-policy --bench compile failed ({status})");
    }
    let root = crate::workspace::target_dir().join("criterion");
    let mut rows = Vec::new();
    for group in std::fs::read_dir(&root).with_context(|| format!("reading {}", root.display()))? {
        let group = group?.path();
        if !group.is_dir() {
            continue;
        }
        for function in std::fs::read_dir(&group)? {
            let dir: PathBuf = function?.path().join("new");
            let (Ok(meta), Ok(estimates)) = (
                std::fs::read_to_string(dir.join("benchmark.json")),
                std::fs::read_to_string(dir.join("estimates.json")),
            ) else {
                continue;
            };
            let meta: serde_json::Value = serde_json::from_str(&meta)?;
            let estimates: serde_json::Value = serde_json::from_str(&estimates)?;
            let Some(group_id) = meta["group_id"].as_str() else {
                continue;
            };
            let Some(shape) = group_id.strip_prefix("compile/") else {
                continue;
            };
            rows.push(CompileRow {
                shape: shape.to_owned(),
                function: meta["function_id"].as_str().unwrap_or_default().to_owned(),
                mean_ns: estimates["mean"]["point_estimate"]
                    .as_f64()
                    .unwrap_or(f64::NAN),
                median_ns: estimates["median"]["point_estimate"]
                    .as_f64()
                    .unwrap_or(f64::NAN),
            });
        }
    }
    rows.sort_by(|a, b| (&a.shape, &a.function).cmp(&(&b.shape, &b.function)));
    Ok(rows)
}

impl Report {
    /// An empty report for `machine`.
    pub fn new(machine: Machine, window_seconds: u64, batch: u32) -> Self {
        Self {
            machine,
            window_seconds,
            batch,
            reservations: Vec::new(),
            queue: Vec::new(),
            retained: Vec::new(),
            durable: Vec::new(),
            prune: None,
            compile: None,
            workloads: super::workloads::Workloads::default(),
            enqueue: Vec::new(),
            cost_skew: None,
            soak: None,
            sustained: None,
            targets: Vec::new(),
            total_seconds: 0.0,
        }
    }

    fn evaluate(&mut self) {
        let mut targets = Vec::new();
        for row in &self.reservations {
            let rate = row.statek.units_per_second / row.pgbench.units_per_second;
            targets.push(Target {
                what: format!("reserve rate vs pgbench, {} clients", row.clients),
                required: ">= 0.90x".to_owned(),
                measured: format!("{rate:.2}x"),
                ratio: Some(rate),
                met: rate >= 0.9,
            });
            let p99 = row.statek.p99_ms / row.pgbench.p99_ms;
            targets.push(Target {
                what: format!("reserve p99 vs pgbench, {} clients", row.clients),
                required: "<= 1.20x".to_owned(),
                measured: format!("{p99:.2}x"),
                ratio: Some(p99),
                met: p99 <= 1.2,
            });
            let batch = row.batch.units_per_second / row.statek.units_per_second;
            targets.push(Target {
                what: format!(
                    "batch k={} vs k=1 rate, {} clients",
                    self.batch, row.clients
                ),
                required: ">= 5x".to_owned(),
                measured: format!("{batch:.1}x"),
                ratio: Some(batch),
                met: batch >= 5.0,
            });
        }
        if let (Some(fair), Some(plain)) = (
            self.queue.iter().find(|q| q.name == "fair replicas, k = 1"),
            self.queue.iter().find(|q| q.name.starts_with("plain")),
        ) {
            let tax = fair.runs_per_second / plain.runs_per_second;
            targets.push(Target {
                what: "fair runs/s vs plain SKIP LOCKED (k = 1)".to_owned(),
                required: ">= 0.70x".to_owned(),
                measured: format!("{tax:.2}x"),
                ratio: Some(tax),
                met: tax >= 0.7,
            });
            if let Some(batched) = self
                .queue
                .iter()
                .find(|q| q.name == format!("fair replicas, k = {}", self.batch))
            {
                let tax = batched.runs_per_second / plain.runs_per_second;
                targets.push(Target {
                    what: format!("fair runs/s vs plain SKIP LOCKED (k = {})", self.batch),
                    required: ">= 0.70x".to_owned(),
                    measured: format!("{tax:.2}x"),
                    ratio: Some(tax),
                    met: tax >= 0.7,
                });
            }
        }
        if let Some(compile) = &self.compile {
            let mut shapes: Vec<&str> = compile.iter().map(|c| c.shape.as_str()).collect();
            shapes.dedup();
            for shape in shapes {
                let of = |f: &str| {
                    compile
                        .iter()
                        .find(|c| c.shape == shape && c.function == f)
                        .map(|c| c.mean_ns)
                };
                if let Some(new) = of("policy_new") {
                    targets.push(Target {
                        what: format!("policy compile, {shape}"),
                        required: "<= 1 ms".to_owned(),
                        measured: format!("{:.3} ms", new / 1e6),
                        ratio: Some(new / 1e6),
                        met: new <= 1e6,
                    });
                }
                if let (Some(reference), Some(chosen)) = (of("swrr_reference"), of("swrr_chosen")) {
                    let speedup = reference / chosen;
                    let required = if shape == "1024x4" {
                        ">= 5x"
                    } else {
                        ">= 1x (never slower)"
                    };
                    let floor = if shape == "1024x4" { 5.0 } else { 0.95 };
                    targets.push(Target {
                        what: format!("SWRR chosen vs plain loop, {shape}"),
                        required: required.to_owned(),
                        measured: format!("{speedup:.1}x"),
                        ratio: Some(speedup),
                        met: speedup >= floor,
                    });
                }
            }
        }
        if let (Some(empty), Some(full)) = (
            self.retained.first(),
            self.retained.iter().max_by_key(|r| r.rows),
        ) {
            if full.rows > 0 {
                let ratio = full.measured.p50_ms / empty.measured.p50_ms;
                targets.push(Target {
                    what: format!("reserve p50 at {} retained rows vs empty", full.rows),
                    required: "<= 1.20x".to_owned(),
                    measured: format!("{ratio:.2}x"),
                    ratio: Some(ratio),
                    met: ratio <= 1.2,
                });
            }
        }
        targets.extend(super::workloads::targets::judge(&self.workloads));
        targets.extend(super::enqueue::target(&self.enqueue));
        targets.extend(self.soak.as_ref().map(super::soak::target));
        targets.extend(self.sustained.iter().flat_map(super::sustained::targets));
        self.targets = targets;
    }

    /// Evaluates the targets and writes `results.json` plus one file per
    /// section into `out`.
    /// Writes `results.json` and `targets.json` (this run's), and the
    /// files of the sections in `ran` only: a run of some sections leaves
    /// the other sections' files of an earlier run as they were.
    pub fn write(&mut self, out: &Path, ran: &[Section]) -> Result<()> {
        self.evaluate();
        self.machine.finish_steal();
        let write = |name: &str, value: &dyn erased::Json| -> Result<()> {
            let path = out.join(name);
            std::fs::write(&path, value.json()?)
                .with_context(|| format!("writing {}", path.display()))
        };
        let any = |sections: &[Section]| sections.iter().any(|s| ran.contains(s));
        write("results.json", self)?;
        write("targets.json", &self.targets)?;
        if any(&[Section::Reservations, Section::Durable]) {
            write("reservations.json", &self.reservations)?;
        }
        if any(&[Section::Queue]) {
            write("queue.json", &self.queue)?;
        }
        if any(&[Section::Retention]) {
            write("retention.json", &(&self.retained, &self.prune))?;
        }
        if any(&[Section::Compile]) {
            write("compile.json", &self.compile)?;
        }
        if any(&[Section::Workloads, Section::Soak]) {
            write("workloads.json", &(&self.workloads, &self.soak))?;
        }
        if any(&[Section::CostSkew]) {
            write("cost-skew.json", &self.cost_skew)?;
        }
        if any(&[Section::Enqueue]) {
            write("enqueue.json", &self.enqueue)?;
        }
        if any(&[Section::Sustained]) {
            write("sustained.json", &self.sustained)?;
        }
        if any(&[Section::Workloads]) {
            let markdown = out.join("workloads.md");
            std::fs::write(
                &markdown,
                super::workloads::table::markdown(&self.workloads),
            )
            .with_context(|| format!("writing {}", markdown.display()))?;
        }
        Ok(())
    }

    /// Prints the tables.
    pub fn print(&self) {
        let m = &self.machine;
        println!();
        println!("==== cargo xtask bench ({})", m.date);
        println!(
            "machine: {} ({} CPUs, {:.1} GiB), Linux {}, load average {} at the start",
            m.cpu, m.cpus, m.memory_gib, m.kernel, m.load_average
        );
        println!("commit:  {}", m.commit);
        if let Some(steal) = m.cpu_steal_percent {
            println!("CPU steal over the run: {steal:.2}%");
        }
        println!("server:  {}", m.postgres);
        println!(
            "settings: {}",
            m.settings
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        println!(
            "pgbench: {}; window {} s per load",
            m.pgbench, self.window_seconds
        );
        println!();
        println!(
            "{:>7} | {:>22} | {:>22} | {:>6} | {:>6} | {:>26}",
            "clients",
            "statek reserve /s p99",
            "pgbench tx/s p99",
            "rate",
            "p99",
            format!("reserve_batch k={} res/s p99", self.batch)
        );
        for r in &self.reservations {
            println!(
                "{:>7} | {:>12.0} {:>7.2}ms | {:>12.0} {:>7.2}ms | {:>5.2}x | {:>5.2}x | {:>16.0} {:>7.2}ms",
                r.clients,
                r.statek.units_per_second,
                r.statek.p99_ms,
                r.pgbench.units_per_second,
                r.pgbench.p99_ms,
                r.statek.units_per_second / r.pgbench.units_per_second,
                r.statek.p99_ms / r.pgbench.p99_ms,
                r.batch.units_per_second,
                r.batch.p99_ms,
            );
        }
        println!();
        println!(
            "{:<34} | {:>7} | {:>10} | {:>10}",
            "queue phase", "workers", "runs/s", "ticks/s"
        );
        for q in &self.queue {
            println!(
                "{:<34} | {:>7} | {:>10.0} | {:>10.0}",
                q.name, q.workers, q.runs_per_second, q.ticks_per_second
            );
        }
        println!();
        println!(
            "{:>12} | {:>10} | {:>9} | {:>9}",
            "retained", "reserve/s", "p50", "p99"
        );
        for r in &self.retained {
            println!(
                "{:>12} | {:>10.0} | {:>7.3}ms | {:>7.3}ms",
                r.rows, r.measured.units_per_second, r.measured.p50_ms, r.measured.p99_ms
            );
        }
        if let Some(p) = &self.prune {
            println!();
            println!(
                "prune: {} rows in {:.1} s = {:.0} rows/s (batch {}, {} batches)",
                p.prune.deleted,
                p.prune.seconds,
                p.prune.rows_per_second,
                p.prune.batch,
                p.prune.batches
            );
            println!(
                "reserve p99 with {} clients: {:.2} ms without prune, {:.2} ms during ({:.0} vs {:.0} /s)",
                p.without.clients,
                p.without.p99_ms,
                p.during.p99_ms,
                p.without.units_per_second,
                p.during.units_per_second
            );
        }
        if !self.durable.is_empty() {
            println!();
            println!(
                "{:<32} | {:>7} | {:>26} | {:>26}",
                "durable commits",
                "clients",
                "reserve /s p99",
                format!("reserve_batch k={} res/s p99", self.batch)
            );
            for d in &self.durable {
                println!(
                    "{:<32} | {:>7} | {:>12.0} {:>11.2}ms | {:>12.0} {:>11.2}ms",
                    d.setup,
                    d.clients,
                    d.single.units_per_second,
                    d.single.p99_ms,
                    d.batch.units_per_second,
                    d.batch.p99_ms
                );
            }
        }
        super::workloads::table::print(&self.workloads);
        if let Some(skew) = &self.cost_skew {
            skew.print();
        }
        if let Some(soak) = &self.soak {
            println!(
                "soak ({}): VmRSS {} KiB after 1 min, {} KiB after {} min ({} runs executed, {:.0} runs/s)",
                soak.allocator,
                soak.rss_first_minute_kib,
                soak.rss_end_kib,
                soak.minutes,
                soak.executed,
                soak.runs_per_second
            );
        }
        if let Some(sustained) = &self.sustained {
            super::sustained::print(sustained);
        }
        if let Some(compile) = &self.compile {
            println!();
            println!(
                "{:<34} | {:<16} | {:>10}",
                "compile shape", "function", "mean"
            );
            for c in compile {
                println!(
                    "{:<34} | {:<16} | {:>8.1}us",
                    c.shape,
                    c.function,
                    c.mean_ns / 1000.0
                );
            }
        }
        if !self.enqueue.is_empty() {
            println!();
            println!(
                "{:>14} | {:>12} | {:>10} | {:>12}",
                "runs/statement", "runs/s", "statements", "ms/statement"
            );
            for e in &self.enqueue {
                println!(
                    "{:>14} | {:>12.0} | {:>10} | {:>12.2}",
                    e.runs_per_statement, e.runs_per_second, e.statements, e.mean_statement_ms
                );
            }
        }
        println!();
        println!(
            "{:<72} | {:<22} | {:>10} | result",
            "target", "required", "measured"
        );
        for t in &self.targets {
            println!(
                "{:<72} | {:<22} | {:>10} | {}",
                t.what,
                t.required,
                t.measured,
                if t.met { "met" } else { "MISSED" }
            );
        }
        println!("database part: {:.0} s", self.total_seconds);
    }
}

/// Serialising values of different types through one closure.
mod erased {
    /// Pretty JSON of a value.
    pub trait Json {
        fn json(&self) -> anyhow::Result<String>;
    }

    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> anyhow::Result<String> {
            Ok(serde_json::to_string_pretty(self)?)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_steal_is_read_from_proc_stat_and_taken_as_a_share_of_the_run() {
        let stat = "cpu  100 5 50 800 10 3 2 30 0 0\ncpu0 50 2 25 400 5 1 1 15 0 0\n";
        assert_eq!(cpu_steal(stat), Some((30, 1000)));
        assert_eq!(cpu_steal("cpu  1 2 3\n"), None);
        assert_eq!(cpu_steal("intr 5\n"), None);
        assert_eq!(steal_percent((30, 1000), (80, 2000)), Some(5.0));
        assert_eq!(steal_percent((30, 1000), (30, 1000)), None);
    }
}
