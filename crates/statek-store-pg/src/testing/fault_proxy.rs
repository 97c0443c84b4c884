//! A TCP relay between a client and PostgreSQL that can cut a connection at
//! its next commit point, to reproduce lost acknowledgements
//! deterministically.
//!
//! The relay parses the PostgreSQL frontend/backend framing (a type byte and
//! a 4-byte big-endian length that counts itself; the startup message has no
//! type byte). A commit point is either
//! - a `COMMIT` simple query (`Q`; how tokio-postgres ends a transaction),
//! - or, outside a `BEGIN`/`START TRANSACTION` block, the `Sync` (`S`) that
//!   ends an extended-protocol exchange binding a prepared statement that
//!   writes reservation rows (it calls `statek.reserve` or
//!   `statek.reserve_batch`), claims runs (it writes claim history,
//!   `statek.claim_slots` or `statek.claim_run`) or finishes runs (it sets
//!   a claim's finish time, `statek.finish_runs`):
//!   the server commits such an implicit transaction at that `Sync`, and
//!   rolls it back if the connection ends before it.
//!
//! Below, "the `COMMIT`" means either.
//!
//! - [`Fault::AfterCommit`]: the `COMMIT` is forwarded; the server's whole
//!   reply to it (up to and including its `ReadyForQuery`) is read and
//!   discarded, then both sides are closed. The transaction is committed, the
//!   client never learns it.
//! - [`Fault::BeforeCommit`]: the `COMMIT` is dropped and both sides are
//!   closed. The server rolls the transaction back when it sees the closed
//!   socket.
//!
//! To find the reply to the `COMMIT`, each direction counts: every simple
//! query (`Q`) and every `Sync` (`S`) the client sends is answered by exactly
//! one `ReadyForQuery` (`Z`), and the startup exchange ends with one more.
//!
//! Only loopback addresses are used, on both sides. Part of the test
//! fixtures (feature `test-support`) so that every crate's tests can cut
//! a store's connections the same way.

// A fixture: a broken relay is a failed test.
#![allow(clippy::unwrap_used, clippy::panic, clippy::expect_used)]

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::{JoinHandle, JoinSet};
use tokio_postgres::config::Host;

/// Where the relay cuts a connection at the next `COMMIT` it sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward the `COMMIT`, swallow the server's reply, close both sides.
    AfterCommit,
    /// Drop the `COMMIT` before it reaches the server, close both sides.
    BeforeCommit,
}

/// Untyped startup-phase request codes.
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;
/// Protocol major version 3 (`3.x` startup messages).
const PROTOCOL_MAJOR_3: u32 = 3;

#[derive(Debug, Default)]
struct Shared {
    armed: Mutex<Option<Fault>>,
    fired: AtomicU64,
    /// While set, the relay refuses connections (see [`FaultProxy::down`]).
    down: AtomicBool,
    /// Wakes the accept loop when `down` is set.
    went_down: Notify,
}

impl Shared {
    fn take_armed(&self) -> Option<Fault> {
        self.armed.lock().unwrap().take()
    }
}

/// A running relay on `127.0.0.1`, stopped (with all its connections) on
/// drop.
#[derive(Debug)]
pub struct FaultProxy {
    through: tokio_postgres::Config,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a relay to the server `upstream` points at (its first host and
    /// port, which must be a loopback IP address).
    pub async fn start(upstream: &tokio_postgres::Config) -> Self {
        let host = match upstream.get_hosts().first() {
            Some(Host::Tcp(host)) => host.clone(),
            other => panic!("fault proxy needs a TCP host, got {other:?}"),
        };
        let ip: IpAddr = host
            .parse()
            .unwrap_or_else(|e| panic!("fault proxy needs an IP address, got {host:?}: {e}"));
        assert!(
            ip.is_loopback(),
            "fault proxy relays to loopback only, got {ip}"
        );
        let port = *upstream.get_ports().first().unwrap_or(&5432);
        let target = SocketAddr::new(ip, port);

        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let listen = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let accept = tokio::spawn(accept_loop(listener, target, Arc::clone(&shared)));

        let mut through = tokio_postgres::Config::new();
        through.host(listen.ip().to_string()).port(listen.port());
        if let Some(user) = upstream.get_user() {
            through.user(user);
        }
        if let Some(password) = upstream.get_password() {
            through.password(password);
        }
        if let Some(dbname) = upstream.get_dbname() {
            through.dbname(dbname);
        }
        if let Some(name) = upstream.get_application_name() {
            through.application_name(name);
        }
        Self {
            through,
            shared,
            accept,
        }
    }

    /// Connection settings that reach the upstream server through the relay
    /// (same user, password, database and application name).
    pub fn pg_config(&self) -> tokio_postgres::Config {
        self.through.clone()
    }

    /// Arms `fault` for the next `COMMIT` on any relayed connection; it
    /// fires once and disarms.
    pub fn arm(&self, fault: Fault) {
        *self.shared.armed.lock().unwrap() = Some(fault);
    }

    /// True while a fault is armed and has not fired.
    pub fn is_armed(&self) -> bool {
        self.shared.armed.lock().unwrap().is_some()
    }

    /// An outage: closes every relayed connection now and, until
    /// [`up`](Self::up), closes each new one as soon as it is accepted
    /// (the client sees its connection end during startup).
    pub fn down(&self) {
        self.shared.down.store(true, Ordering::SeqCst);
        self.shared.went_down.notify_waiters();
    }

    /// Ends the outage of [`down`](Self::down): new connections are
    /// relayed again.
    pub fn up(&self) {
        self.shared.down.store(false, Ordering::SeqCst);
    }

    /// How many faults have fired since the relay started. A fault counts
    /// before its connection is closed, so a client that saw the cut also
    /// sees the count.
    pub fn fired(&self) -> u64 {
        self.shared.fired.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, target: SocketAddr, shared: Arc<Shared>) {
    // Dropping the set (when this task is aborted) aborts every relay.
    let mut relays = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((client, _)) = accepted {
                    if shared.down.load(Ordering::SeqCst) {
                        drop(client);
                    } else {
                        relays.spawn(relay(client, target, Arc::clone(&shared)));
                    }
                }
            }
            () = shared.went_down.notified() => relays.abort_all(),
            Some(_) = relays.join_next(), if !relays.is_empty() => {}
        }
    }
}

/// Per-connection counters shared by the two directions.
#[derive(Debug, Default)]
struct Exchange {
    /// `ReadyForQuery` messages the client has asked for so far.
    solicited: AtomicU64,
    /// `ReadyForQuery` messages the server has sent so far.
    ready: AtomicU64,
    /// Ordinal of the `ReadyForQuery` that ends the reply to a forwarded,
    /// armed `COMMIT` (0: none).
    cut_at_ready: AtomicU64,
}

/// Why one direction stopped.
enum Ended {
    Eof,
    Cut,
}

async fn relay(mut client: TcpStream, target: SocketAddr, shared: Arc<Shared>) -> io::Result<()> {
    client.set_nodelay(true)?;
    let mut server = TcpStream::connect(target).await?;
    server.set_nodelay(true)?;

    // Startup phase: untyped messages. Encryption requests are declined by
    // the relay itself (it must see plain protocol bytes).
    let exchange = Exchange::default();
    loop {
        let message = read_untyped(&mut client).await?;
        let code = u32::from_be_bytes([message[4], message[5], message[6], message[7]]);
        if code == SSL_REQUEST || code == GSSENC_REQUEST {
            client.write_all(b"N").await?;
            continue;
        }
        if code >> 16 == PROTOCOL_MAJOR_3 {
            // The startup exchange ends with one ReadyForQuery.
            exchange.solicited.store(1, Ordering::SeqCst);
        }
        server.write_all(&message).await?;
        break;
    }

    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    // Whichever direction ends first (EOF, error or cut) ends the relay;
    // returning drops all four halves, which closes both sockets.
    tokio::select! {
        ended = client_to_server(client_read, server_write, &exchange, &shared) => ended.map(|_| ()),
        ended = server_to_client(server_read, client_write, &exchange, &shared) => ended.map(|_| ()),
    }
}

async fn read_untyped(from: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut length = [0u8; 4];
    from.read_exact(&mut length).await?;
    let length = u32::from_be_bytes(length) as usize;
    if !(8..=10_000).contains(&length) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("startup message length {length}"),
        ));
    }
    let mut message = vec![0u8; length];
    message[..4].copy_from_slice(&(length as u32).to_be_bytes());
    from.read_exact(&mut message[4..]).await?;
    Ok(message)
}

/// Length (type byte included) of the complete typed message at the start
/// of `buf`, or `None` if more bytes are needed.
fn typed_message_len(buf: &[u8]) -> io::Result<Option<usize>> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let length = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if length < 4 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("message {:?} has length {length}", buf[0] as char),
        ));
    }
    Ok((buf.len() > length).then_some(length + 1))
}

/// True for a simple query whose text is `COMMIT` (any case, optional `;`).
fn is_commit(query_message: &[u8]) -> bool {
    let text = &query_message[5..];
    let text = text.strip_suffix(&[0]).unwrap_or(text);
    std::str::from_utf8(text).is_ok_and(|sql| {
        sql.trim()
            .trim_end_matches(';')
            .trim_end()
            .eq_ignore_ascii_case("COMMIT")
    })
}

/// The parts of statement text that mark a write whose lost
/// acknowledgement the tests reproduce: reservations, claims (each writes
/// claim history through `statek.claim_slots` or `statek.claim_run`) and
/// the finish of runs (complete, fail, `finish_runs`: each sets a claim's
/// finish time through `statek.finish_runs`; migration V11).
const WRITES: [&str; 5] = [
    "statek.reserve(",
    "statek.reserve_batch(",
    "statek.claim_slots(",
    "statek.claim_run(",
    "statek.finish_runs(",
];

/// Reads the NUL-terminated string at `at` in `message`; returns it and the
/// position after its NUL.
fn cstring(message: &[u8], at: usize) -> Option<(&str, usize)> {
    let rest = message.get(at..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    Some((std::str::from_utf8(&rest[..end]).ok()?, at + end + 1))
}

/// The text of a simple query message (`Q`).
fn simple_query_text(message: &[u8]) -> &str {
    cstring(message, 5).map_or("", |(text, _)| text)
}

/// What one client connection has said so far.
#[derive(Debug, Default)]
struct ClientState {
    /// Prepared statements (by name) that write (see [`WRITES`]).
    writers: HashSet<String>,
    /// Inside an explicit transaction block.
    in_block: bool,
    /// A writer was bound since the last `Sync`.
    pending_write: bool,
}

impl ClientState {
    /// Notes `message`; returns true if it is a commit point.
    fn is_commit_point(&mut self, message: &[u8]) -> bool {
        match message[0] {
            b'Q' => {
                let sql = simple_query_text(message).trim().to_ascii_uppercase();
                if sql.starts_with("BEGIN") || sql.starts_with("START TRANSACTION") {
                    self.in_block = true;
                } else if sql.starts_with("ROLLBACK") {
                    self.in_block = false;
                }
                if is_commit(message) {
                    self.in_block = false;
                    return true;
                }
                false
            }
            b'P' => {
                if let Some((name, next)) = cstring(message, 5) {
                    if cstring(message, next)
                        .is_some_and(|(sql, _)| WRITES.iter().any(|w| sql.contains(w)))
                    {
                        self.writers.insert(name.to_owned());
                    }
                }
                false
            }
            b'B' => {
                if let Some((_portal, next)) = cstring(message, 5) {
                    if cstring(message, next).is_some_and(|(name, _)| self.writers.contains(name)) {
                        self.pending_write = true;
                    }
                }
                false
            }
            b'S' => std::mem::take(&mut self.pending_write) && !self.in_block,
            _ => false,
        }
    }
}

async fn client_to_server(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    exchange: &Exchange,
    shared: &Shared,
) -> io::Result<Ended> {
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut chunk = vec![0u8; 16 * 1024];
    let mut state = ClientState::default();
    loop {
        let n = from.read(&mut chunk).await?;
        if n == 0 {
            return Ok(Ended::Eof);
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut pos = 0;
        while let Some(len) = typed_message_len(&buf[pos..])? {
            let message = &buf[pos..pos + len];
            let solicits = matches!(message[0], b'Q' | b'S');
            let ordinal = if solicits {
                exchange.solicited.fetch_add(1, Ordering::SeqCst) + 1
            } else {
                0
            };
            if state.is_commit_point(message) {
                match shared.take_armed() {
                    Some(Fault::BeforeCommit) => {
                        // Forward what came before, never the commit point.
                        to.write_all(&buf[..pos]).await?;
                        shared.fired.fetch_add(1, Ordering::SeqCst);
                        return Ok(Ended::Cut);
                    }
                    Some(Fault::AfterCommit) => {
                        // Set before the commit point leaves, so the other
                        // direction knows its reply when it comes.
                        exchange.cut_at_ready.store(ordinal, Ordering::SeqCst);
                    }
                    None => {}
                }
            }
            pos += len;
        }
        to.write_all(&buf[..pos]).await?;
        buf.drain(..pos);
    }
}

async fn server_to_client(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    exchange: &Exchange,
    shared: &Shared,
) -> io::Result<Ended> {
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut chunk).await?;
        if n == 0 {
            return Ok(Ended::Eof);
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut pos = 0;
        // Messages before `forward_end` go to the client; once the reply to
        // an armed COMMIT starts, nothing more does.
        let mut forward_end = 0;
        let mut swallowing = false;
        while let Some(len) = typed_message_len(&buf[pos..])? {
            let kind = buf[pos];
            let cut_at = exchange.cut_at_ready.load(Ordering::SeqCst);
            let ready_before = exchange.ready.load(Ordering::SeqCst);
            if kind == b'Z' {
                exchange.ready.fetch_add(1, Ordering::SeqCst);
            }
            pos += len;
            if cut_at != 0 && ready_before + 1 == cut_at {
                // Part of the reply to the armed COMMIT: swallow it.
                swallowing = true;
                if kind == b'Z' {
                    to.write_all(&buf[..forward_end]).await?;
                    shared.fired.fetch_add(1, Ordering::SeqCst);
                    return Ok(Ended::Cut);
                }
            } else if !swallowing {
                forward_end = pos;
            }
        }
        to.write_all(&buf[..forward_end]).await?;
        buf.drain(..pos);
    }
}

#[test]
fn recognises_commit_and_framing() {
    fn query(sql: &str) -> Vec<u8> {
        let mut m = vec![b'Q'];
        m.extend_from_slice(&((sql.len() + 5) as u32).to_be_bytes());
        m.extend_from_slice(sql.as_bytes());
        m.push(0);
        m
    }
    assert!(is_commit(&query("COMMIT")));
    assert!(is_commit(&query(" commit; ")));
    assert!(!is_commit(&query("ROLLBACK")));
    assert!(!is_commit(&query("COMMIT PREPARED 'x'")));
    assert!(!is_commit(&query("")));
    let m = query("COMMIT");
    assert_eq!(typed_message_len(&m).unwrap(), Some(m.len()));
    assert_eq!(typed_message_len(&m[..m.len() - 1]).unwrap(), None);
    assert_eq!(typed_message_len(&m[..3]).unwrap(), None);
    assert!(typed_message_len(&[b'Q', 0, 0, 0, 3]).is_err());
}

#[test]
fn recognises_autocommit_reservation_writes() {
    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }
    let parse = message(
        b'P',
        b"s1\0SELECT * FROM statek.reserve($1, $2, $3, $4, $5)\0\0\0",
    );
    let other = message(b'P', b"s2\0SELECT 1\0\0\0");
    let bind = |name: &[u8]| {
        let mut body = b"\0".to_vec();
        body.extend_from_slice(name);
        body.extend_from_slice(b"\0\0\0\0\0\0\0");
        message(b'B', &body)
    };
    let sync = message(b'S', b"");
    let query = |sql: &str| {
        let mut body = sql.as_bytes().to_vec();
        body.push(0);
        message(b'Q', &body)
    };
    let mut state = ClientState::default();
    assert!(!state.is_commit_point(&parse));
    assert!(!state.is_commit_point(&other));
    assert!(!state.is_commit_point(&bind(b"s2")));
    assert!(!state.is_commit_point(&sync), "not a writer");
    assert!(!state.is_commit_point(&bind(b"s1")));
    assert!(state.is_commit_point(&sync), "an autocommit writer");
    assert!(!state.is_commit_point(&sync), "once per bind");
    assert!(!state.is_commit_point(&query("START TRANSACTION ISOLATION LEVEL READ COMMITTED")));
    assert!(!state.is_commit_point(&bind(b"s1")));
    assert!(
        !state.is_commit_point(&sync),
        "inside a block the COMMIT commits"
    );
    assert!(state.is_commit_point(&query("COMMIT")));
    assert!(!state.is_commit_point(&bind(b"s1")));
    assert!(
        state.is_commit_point(&sync),
        "after the block, autocommit again"
    );
}
