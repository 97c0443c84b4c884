//! `cargo xtask pg start|stop|status|url`: one long-lived cluster per major
//! version for development, kept running between invocations.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Result};

use super::cluster::{self, Cluster};
use super::layout::Layout;
use super::server_user::ServerUser;
use super::state::ClusterState;
use super::{external_database_url, redact, PgMajor, Server};

/// `pg start`: provisions and starts the cluster of `major`, or reports that
/// it runs already. With `DATABASE_URL` set, only reports that it is used.
pub fn start(major: PgMajor) -> Result<()> {
    if let Some(url) = external_database_url() {
        println!(
            "DATABASE_URL is set ({}): that server is used; nothing is provisioned",
            redact(&url)
        );
        return Ok(());
    }
    let started_at = Instant::now();
    let server = Server::provision(major)?;
    let layout = &server.layout;
    let state_file = layout.state_file(major);
    let cluster = Cluster {
        dir: layout.persistent_cluster_dir(major),
        bin_dir: server.binaries.bin_dir.clone(),
        server_user: layout.server_user.clone(),
    };
    if let Some(state) = ClusterState::load(&state_file)? {
        let recorded = recorded_cluster(&state)?;
        if recorded.is_running()? {
            println!("PostgreSQL {major} is already running");
            print_status(major, &state, &recorded, true);
            return Ok(());
        }
    }
    if cluster.is_running()? {
        bail!(
            "a server already runs on {} but {} does not describe it; stop it with \
             `pg_ctl stop -D {}` (as its owner)",
            cluster.data_dir().display(),
            state_file.display(),
            cluster.data_dir().display()
        );
    }
    super::distribution::create_dir_all_0755(&layout.runtime_dir(major))?;
    cluster.initialise()?;
    let server_user = layout
        .server_user
        .as_ref()
        .map_or_else(current_user_name, |user| user.name.clone());
    let mut state = ClusterState {
        major: major.number(),
        server_version: server.version_string().to_owned(),
        source: server.source().to_string(),
        port: 0,
        cluster_dir: cluster.dir.clone(),
        bin_dir: cluster.bin_dir.clone(),
        server_user,
        started_at_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    let port = cluster.start(|port| {
        state.port = port;
        state.save(&state_file)
    })?;
    state.port = port;
    println!(
        "PostgreSQL {major} started in {:.1}s; it keeps running until `cargo xtask pg stop --version {major}`",
        started_at.elapsed().as_secs_f64()
    );
    print_status(major, &state, &cluster, true);
    Ok(())
}

/// `pg stop`: stops the cluster of `major`, or of every version.
pub fn stop(major: Option<PgMajor>) -> Result<()> {
    let layout = Layout::resolve()?;
    for major in selected(major) {
        let Some(state) = ClusterState::load(&layout.state_file(major))? else {
            println!("PostgreSQL {major}: no cluster was started with `cargo xtask pg start`");
            continue;
        };
        let cluster = recorded_cluster(&state)?;
        if cluster.stop("fast")? {
            println!(
                "PostgreSQL {major}: stopped (data kept in {})",
                cluster.data_dir().display()
            );
        } else {
            println!("PostgreSQL {major}: was not running");
        }
    }
    Ok(())
}

/// `pg status`: prints version, port, data directory, whether it runs and
/// the `DATABASE_URL`, for `major` or every version.
pub fn status(major: Option<PgMajor>) -> Result<()> {
    if let Some(url) = external_database_url() {
        println!(
            "DATABASE_URL is set ({}): tests, migrate and the demo use that server",
            redact(&url)
        );
    }
    let layout = Layout::resolve()?;
    for major in selected(major) {
        match ClusterState::load(&layout.state_file(major))? {
            None => println!(
                "PostgreSQL {major}: not started (run `cargo xtask pg start --version {major}`)"
            ),
            Some(state) => {
                let cluster = recorded_cluster(&state)?;
                let running = cluster.is_running()?;
                print_status(major, &state, &cluster, running);
            }
        }
    }
    Ok(())
}

/// `pg url`: prints only the `DATABASE_URL` of the running cluster, for
/// `export DATABASE_URL=$(cargo xtask pg url)`.
pub fn url(major: PgMajor) -> Result<()> {
    if let Some(url) = external_database_url() {
        println!("{url}");
        return Ok(());
    }
    let layout = Layout::resolve()?;
    if let Some(state) = ClusterState::load(&layout.state_file(major))? {
        let cluster = recorded_cluster(&state)?;
        if cluster.is_running()? {
            println!(
                "{}",
                cluster::database_url(cluster.port().unwrap_or(state.port))
            );
            return Ok(());
        }
    }
    bail!(
        "PostgreSQL {major} is not running; start it with `cargo xtask pg start --version {major}`"
    )
}

fn selected(major: Option<PgMajor>) -> Vec<PgMajor> {
    major.map_or_else(|| PgMajor::ALL.to_vec(), |major| vec![major])
}

/// The cluster a state file describes, run as the owner of its directory.
fn recorded_cluster(state: &ClusterState) -> Result<Cluster> {
    let server_user = if state.cluster_dir.exists() {
        ServerUser::owner_of(&state.cluster_dir)?
    } else {
        None
    };
    Ok(Cluster {
        dir: state.cluster_dir.clone(),
        bin_dir: state.bin_dir.clone(),
        server_user,
    })
}

fn current_user_name() -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::effective())
        .ok()
        .flatten()
        .map_or_else(|| "current user".to_owned(), |user| user.name)
}

fn print_status(major: PgMajor, state: &ClusterState, cluster: &Cluster, running: bool) {
    let port = if running {
        cluster.port().unwrap_or(state.port)
    } else {
        state.port
    };
    match (running, cluster.pid()) {
        (true, Some(pid)) => println!("PostgreSQL {major}: running (pid {pid})"),
        (true, None) => println!("PostgreSQL {major}: running"),
        (false, _) => println!("PostgreSQL {major}: not running"),
    }
    println!(
        "  server:       {} ({})",
        state.server_version, state.source
    );
    println!(
        "  port:         {port}{}",
        if running { "" } else { " (last used)" }
    );
    println!("  data dir:     {}", cluster.data_dir().display());
    println!("  log:          {}", cluster.log_file().display());
    println!("  runs as:      {}", state.server_user);
    if running {
        println!("  DATABASE_URL={}", cluster::database_url(port));
        println!(
            "  {}={}",
            super::TLS_CA_ENV,
            cluster.tls_files().ca_certificate().display()
        );
    }
}
