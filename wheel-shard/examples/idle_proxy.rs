//! idle_proxy: a TCP proxy whose idle and request timeouts live in a wheel `TimerService`.
//!
//! ```text
//! cargo run --release -p wheel-shard --example idle_proxy --features async -- \
//!     --listen 127.0.0.1:7000 --upstream 127.0.0.1:6379 --idle 30s --request-timeout 2s
//! ```
//!
//! Every connection has one idle timer in the service; each read or write in either direction
//! pushes it back with `reschedule` (the heartbeat / idle-detection case), a partial write
//! included, so a client that reads slowly but steadily is not idle. While the client has
//! sent bytes that upstream has not answered, a request timer runs too; upstream's next bytes
//! cancel it. A timer that fires raises its connection's [`Alarm`] (a tokio `Notify`) and the
//! connection's task closes both sockets. Ctrl-C prints the service's stats and exits.
//!
//! Nothing here blocks a runtime thread: timers are scheduled with `try_schedule` (a full
//! ring refuses at once instead of waiting up to `saturation_timeout`), and the service's
//! blocking `shutdown` runs on tokio's blocking pool.
//!
//! Its tests (`tests/idle_proxy/`) include this file as a module and run [`Proxy`] in-process.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use clap::Parser;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use wheel_shard::{Config, ConfigError, ScheduleError, Stats, TimerId, TimerService};

/// What `--help` says about hostile clients, after the options.
const HOSTILE_CLIENTS: &str = "\
Hostile clients:
  Slowloris (a request sent a byte at a time, or never finished): --request-timeout closes
    the client that long after the first byte it sent since upstream last sent anything,
    however many bytes trickle in after it. The proxy does not parse requests, so upstream's
    bytes count as the answer to everything sent before them: a partial request sent in the
    same burst as a complete one is left to --idle once the complete one is answered.
    Without --request-timeout, only --idle applies, and a client sending a byte now and then
    stays open.
  Descriptor floods: each connection holds two descriptors (client and upstream).
    --max-connections caps open connections; one beyond it is closed at once and counted as
    refused. Keep 2 x max-connections below the open-file limit (ulimit -n). If descriptors
    still run out, accept backs off 50 ms per failure instead of spinning.
  Slow readers: a write to the client that makes progress, however slowly, is activity; one
    that makes none for --idle is closed. --client-send-buffer keeps the kernel's buffer small,
    so a slow reader's progress shows every few KiB, and --relay-buffer caps the buffers on the
    way to it (the client's receive side, both of upstream's), so a client that writes without
    reading cannot pin megabytes of kernel memory either.";

/// Command line.
#[derive(Parser, Debug)]
#[command(
    about = "A TCP proxy that closes idle connections; its timers live in a wheel TimerService",
    after_help = HOSTILE_CLIENTS
)]
pub struct Args {
    /// Address to listen on; port 0 picks a free port (the address is printed at startup).
    #[arg(long)]
    pub listen: SocketAddr,
    /// Address every connection is relayed to.
    #[arg(long)]
    pub upstream: SocketAddr,
    /// Close a connection after this long without a read or write in either direction ("30s").
    #[arg(long, value_parser = humantime::parse_duration)]
    pub idle: Duration,
    /// Close a client whose upstream has not answered this long after the client sent bytes.
    /// Also what closes a slowloris client that never finishes its request.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub request_timeout: Option<Duration>,
    /// Most connections open at once; one beyond it is closed at once and counted as refused.
    /// Bounds the descriptors (two per connection) a flood of connects can take.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS, value_parser = at_least_one)]
    pub max_connections: usize,
    /// Send buffer of client sockets in bytes; 0 leaves it to the kernel's autotuning (up to
    /// megabytes). A blocked write shows progress only as about a third of the buffer drains
    /// (~6 KiB at the default), so a reader slower than that per --idle is closed as idle; it
    /// also bounds the kernel memory a slow reader pins. Raise it for bulk transfers over long
    /// round trips (a connection sends about twice this per round trip).
    #[arg(long, default_value_t = DEFAULT_CLIENT_SEND_BUFFER)]
    pub client_send_buffer: u32,
    /// Receive buffer of client sockets and send and receive buffers of upstream sockets, in
    /// bytes; 0 leaves them to the kernel's autotuning (up to megabytes each). Bounds what a
    /// client that writes without reading pins in the proxy's kernel memory; a bulk transfer
    /// then moves at most about this much per round trip.
    #[arg(long, default_value_t = DEFAULT_RELAY_BUFFER)]
    pub relay_buffer: u32,
    /// Timer service config (TOML); `WHEEL_*` environment variables override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// What can stop the proxy from starting. Each message names the address or file at fault.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: SocketAddr, source: io::Error },
    #[error("upstream {addr} is unreachable: {source}")]
    Upstream { addr: SocketAddr, source: io::Error },
    #[error("upstream {addr} did not accept a connection within {limit:?}")]
    UpstreamSilent { addr: SocketAddr, limit: Duration },
    #[error("timer service config: {0}")]
    Config(#[from] ConfigError),
    #[error("timer service: {0}")]
    Timers(#[from] ScheduleError),
}

/// A count of at least one (`--max-connections 0` would refuse everyone).
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(error) => Err(error.to_string()),
    }
}

/// `--max-connections` unless given.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// `--client-send-buffer` unless given. On Linux loopback a blocked writer then wakes each
/// ~6 KiB the reader takes, and a smaller buffer wakes it no more often; autotuned, the buffer
/// grows to megabytes and a client reading a few KiB a second shows no progress for minutes.
pub const DEFAULT_CLIENT_SEND_BUFFER: u32 = 8 * 1024;

/// `--relay-buffer` unless given: Linux doubles it for its own bookkeeping, so a stalled
/// connection holds at most about 3 × 128 KiB in these buffers (the client's send buffer
/// apart), and a transfer over a 1 ms round trip still moves 64 MB/s.
pub const DEFAULT_RELAY_BUFFER: u32 = 64 * 1024;

/// The proxy's timing rules, connection limit and client socket buffer.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Close a connection after this long without bytes moving in either direction.
    pub idle: Duration,
    /// Close a client whose upstream has not answered this long after it sent bytes.
    pub request_timeout: Option<Duration>,
    /// Connections open at once; an accepted one beyond it is closed at once.
    pub max_connections: usize,
    /// SO_SNDBUF of client sockets; `None` leaves it to the kernel.
    pub client_send_buffer: Option<u32>,
    /// SO_RCVBUF of client sockets, SO_SNDBUF and SO_RCVBUF of upstream sockets; `None` leaves
    /// them to the kernel.
    pub relay_buffer: Option<u32>,
}

impl Limits {
    /// `idle`, no request deadline, and the command line's defaults for the rest.
    pub fn new(idle: Duration) -> Limits {
        Limits {
            idle,
            request_timeout: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            client_send_buffer: Some(DEFAULT_CLIENT_SEND_BUFFER),
            relay_buffer: Some(DEFAULT_RELAY_BUFFER),
        }
    }
}

/// Connection counts. `accepted` counts every connection `accept` returned; each ends up in
/// exactly one of the other counts, or is still `open`.
#[derive(Debug, Default)]
pub struct Counters {
    /// Every connection `accept` returned, refused ones included.
    pub accepted: AtomicU64,
    /// Closed at once: `max_connections` were open.
    pub refused: AtomicU64,
    /// Closed by the idle timer.
    pub closed_idle: AtomicU64,
    /// Closed by the request deadline.
    pub closed_request_timeout: AtomicU64,
    /// Ended by the peers: both directions reached EOF.
    pub closed_normally: AtomicU64,
    /// Refused for want of a timer, or ended by an I/O error.
    pub failed: AtomicU64,
    /// Cut when [`Proxy::run_until`] stopped (or its task was dropped) while they were open.
    pub closed_by_stop: AtomicU64,
    /// Connections being served now (a gauge, not a count of events).
    pub open: AtomicU64,
    /// `accept` calls that failed (out of descriptors, say); each one backs off.
    pub accept_errors: AtomicU64,
    /// Reads and writes that moved bytes and pushed their connection's idle deadline back (a
    /// count of events over all connections; a move after the idle timer fired is not one).
    pub idle_pushed_back: AtomicU64,
}

/// What [`Proxy::run_until`] hands back: the service's stats after the last connection closed.
#[derive(Debug)]
pub struct Report {
    pub stats: Stats,
    pub counters: Arc<Counters>,
}

/// Why a connection's timer closed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    Idle = 1,
    RequestTimeout = 2,
}

/// Raised by a connection's timer callbacks (on the service's executor threads), awaited by
/// the connection's task. The first reason wins.
#[derive(Default)]
pub struct Alarm {
    reason: AtomicU8,
    notify: Notify,
}

impl Alarm {
    fn raise(&self, reason: CloseReason) {
        let first =
            self.reason
                .compare_exchange(0, reason as u8, Ordering::AcqRel, Ordering::Acquire);
        if first.is_ok() {
            // notify_one keeps a permit when the task is not waiting yet: no lost wake-up.
            self.notify.notify_one();
        }
    }

    async fn raised(&self) -> CloseReason {
        self.notify.notified().await;
        match self.reason.load(Ordering::Acquire) {
            1 => CloseReason::Idle,
            _ => CloseReason::RequestTimeout,
        }
    }
}

fn raise_on_fire(alarm: &Arc<Alarm>, reason: CloseReason) -> impl FnOnce() + Send + 'static {
    let alarm = Arc::clone(alarm);
    move || alarm.raise(reason)
}

/// One connection's timers. Dropping it cancels whatever has not fired.
struct ConnTimers {
    timers: TimerService,
    limits: Limits,
    counters: Arc<Counters>,
    alarm: Arc<Alarm>,
    idle: TimerId,
    request: Mutex<Option<TimerId>>,
}

impl ConnTimers {
    /// Runs in the accept loop: `try_schedule`, because waiting for room in a full ring would
    /// block a runtime thread (and every connection on it) for up to `saturation_timeout`.
    fn start(
        timers: &TimerService,
        limits: Limits,
        counters: &Arc<Counters>,
    ) -> Result<ConnTimers, ScheduleError> {
        let alarm = Arc::new(Alarm::default());
        let idle = timers.try_schedule(limits.idle, raise_on_fire(&alarm, CloseReason::Idle))?;
        Ok(ConnTimers {
            timers: timers.clone(),
            limits,
            counters: Arc::clone(counters),
            alarm,
            idle,
            request: Mutex::new(None),
        })
    }

    /// Bytes moved: push the idle deadline back. A `false` from `reschedule` means the timer
    /// fired already; the alarm is raised and the task is closing the connection.
    fn touch(&self) {
        if self.timers.reschedule(self.idle, self.limits.idle) {
            // Counted after the deadline moved, so whoever sees the count sees a deadline at
            // least `idle` after the move.
            self.counters
                .idle_pushed_back
                .fetch_add(1, Ordering::Release);
        }
    }

    /// The client sent bytes: start the request deadline unless one is already running (the
    /// oldest unanswered bytes set the deadline). Runs in the connection's task, so it never
    /// waits for ring room: a full ring fails the connection rather than stalling the runtime.
    fn request_sent(&self) -> Result<(), ScheduleError> {
        let Some(limit) = self.limits.request_timeout else {
            return Ok(());
        };
        let mut running = self.request.lock().unwrap_or_else(PoisonError::into_inner);
        if running.is_none() {
            let fire = raise_on_fire(&self.alarm, CloseReason::RequestTimeout);
            *running = Some(self.timers.try_schedule(limit, fire)?);
        }
        Ok(())
    }

    /// Upstream sent bytes: the outstanding request is answered.
    fn answered(&self) {
        let running = self
            .request
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(id) = running {
            self.timers.cancel(id);
        }
    }
}

impl Drop for ConnTimers {
    fn drop(&mut self) {
        self.timers.cancel(self.idle);
        self.answered();
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    ClientToUpstream,
    UpstreamToClient,
}

/// Copies one direction until EOF (then half-closes the other side), touching the timers.
///
/// Every read and every write that moves bytes touches the idle timer, partial writes
/// included: a peer that reads slowly takes a buffer a few KiB at a time, and each of those
/// is activity. Touching only once a whole buffer is written would close a slow but steady
/// reader as idle.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    conn: &ConnTimers,
    direction: Direction,
) -> io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await?;
        conn.touch();
        if n == 0 {
            return to.shutdown().await;
        }
        match direction {
            // Armed before forwarding, so a fast answer cannot arrive before the deadline.
            Direction::ClientToUpstream => conn.request_sent().map_err(io::Error::other)?,
            Direction::UpstreamToClient => conn.answered(),
        }
        let mut written = 0;
        while written < n {
            match to.write(&buf[written..n]).await? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                wrote => written += wrote,
            }
            conn.touch();
        }
    }
}

/// Connects upstream and relays both directions until both have ended. The client socket is
/// borrowed: it closes only when [`serve`] drops it, after the connection is counted.
async fn relay(client: &mut TcpStream, shared: &Shared, conn: &ConnTimers) -> io::Result<()> {
    let mut upstream = connect_upstream(shared.upstream, shared.limits.relay_buffer).await?;
    // Request/response traffic: Nagle would hold back small replies.
    client.set_nodelay(true)?;
    upstream.set_nodelay(true)?;
    let (client_read, client_write) = client.split();
    let (upstream_read, upstream_write) = upstream.split();
    tokio::try_join!(
        pump(
            client_read,
            upstream_write,
            conn,
            Direction::ClientToUpstream
        ),
        pump(
            upstream_read,
            client_write,
            conn,
            Direction::UpstreamToClient
        ),
    )?;
    Ok(())
}

/// A connection to upstream, its buffers capped to `buffer` bytes (set before the connect, as
/// the receive buffer sets the window the handshake offers).
async fn connect_upstream(addr: SocketAddr, buffer: Option<u32>) -> io::Result<TcpStream> {
    let socket = socket_for(addr)?;
    if let Some(bytes) = buffer {
        socket.set_send_buffer_size(bytes)?;
        socket.set_recv_buffer_size(bytes)?;
    }
    socket.connect(addr).await
}

/// A connection's place under `max_connections`, counted in `open` from the accept until
/// [`OpenConnection::close`] counts how it ended. Dropped without that (its task aborted
/// when the proxy stops), it counts the connection as cut by the stop.
struct OpenConnection {
    counters: Arc<Counters>,
    counted: bool,
}

impl OpenConnection {
    fn new(counters: &Arc<Counters>) -> OpenConnection {
        counters.open.fetch_add(1, Ordering::Relaxed);
        OpenConnection {
            counters: Arc::clone(counters),
            counted: false,
        }
    }

    /// Counts the connection in `how` and gives its place back. Called before its sockets
    /// close, so a client that sees the close finds it counted and, reconnecting at once,
    /// its place free.
    fn close(mut self, how: &AtomicU64) {
        how.fetch_add(1, Ordering::Relaxed);
        self.counted = true;
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        if !self.counted {
            self.counters.closed_by_stop.fetch_add(1, Ordering::Relaxed);
        }
        self.counters.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Everything a connection's task needs.
struct Shared {
    timers: TimerService,
    upstream: SocketAddr,
    limits: Limits,
    counters: Arc<Counters>,
}

/// One connection, from accept to close. Its sockets close at the end, when `relay` (with
/// the upstream socket) and then the client socket are dropped, after `open.close` counted
/// the connection and gave its place back.
async fn serve(mut client: TcpStream, conn: ConnTimers, shared: Arc<Shared>, open: OpenConnection) {
    let counters = &shared.counters;
    let alarm = Arc::clone(&conn.alarm);
    let relay = relay(&mut client, &shared, &conn);
    tokio::pin!(relay);
    let counter = tokio::select! {
        reason = alarm.raised() => match reason {
            CloseReason::Idle => &counters.closed_idle,
            CloseReason::RequestTimeout => &counters.closed_request_timeout,
        },
        result = &mut relay => match result {
            Ok(()) => &counters.closed_normally,
            Err(error) => {
                tracing::debug!("connection to {} ended: {error}", shared.upstream);
                &counters.failed
            }
        },
    };
    open.close(counter);
}

/// A bound proxy, ready to run.
pub struct Proxy {
    listener: TcpListener,
    shared: Arc<Shared>,
}

/// Pending connections the kernel queues for `accept`; tokio's default (1024) is short for a
/// burst of thousands of connects.
const BACKLOG: u32 = 4096;

/// How long the startup check waits for upstream to accept a connection.
const UPSTREAM_CHECK: Duration = Duration::from_secs(3);

/// How long the accept loop pauses after `accept` fails.
const ACCEPT_BACK_OFF: Duration = Duration::from_millis(50);

impl Proxy {
    /// Binds `listen` and checks that `upstream` accepts connections.
    pub async fn bind(
        listen: SocketAddr,
        upstream: SocketAddr,
        limits: Limits,
        timers: TimerService,
    ) -> Result<Proxy, StartError> {
        let listener = listen_on(listen, &limits).map_err(|source| StartError::Listen {
            addr: listen,
            source,
        })?;
        check_upstream(&timers, upstream).await?;
        let shared = Shared {
            timers,
            upstream,
            limits,
            counters: Arc::default(),
        };
        Ok(Proxy {
            listener,
            shared: Arc::new(shared),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Live connection counts.
    pub fn counters(&self) -> Arc<Counters> {
        Arc::clone(&self.shared.counters)
    }

    /// Serves until `stop` completes, then closes every connection, shuts the timer service
    /// down and reports its final stats.
    pub async fn run_until(self, stop: impl Future<Output = ()>) -> Report {
        let mut connections = JoinSet::new();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => break,
                Some(_) = connections.join_next() => {}
                accepted = self.listener.accept() => match accepted {
                    Ok((client, _)) => self.accept(client, &mut connections),
                    Err(error) => self.back_off_after(error).await,
                },
            }
        }
        // Aborting drops each connection's ConnTimers, which cancels its timers.
        connections.shutdown().await;
        // `shutdown` joins the service's threads and waits for callbacks already running:
        // on the blocking pool, so no runtime thread stalls meanwhile.
        let timers = self.shared.timers.clone();
        if let Err(error) = tokio::task::spawn_blocking(move || timers.shutdown()).await {
            tracing::warn!("timer service shutdown did not finish: {error}");
        }
        Report {
            stats: self.shared.timers.stats(),
            counters: self.counters(),
        }
    }

    /// Starts the idle timer here rather than in the connection's task, so it counts from
    /// the accept, not from whenever a busy runtime first polls the task. A connection over
    /// `max_connections` is closed (dropped) at once, before it costs an upstream descriptor.
    fn accept(&self, client: TcpStream, connections: &mut JoinSet<()>) {
        let counters = &self.shared.counters;
        counters.accepted.fetch_add(1, Ordering::Relaxed);
        let open = counters.open.load(Ordering::Relaxed);
        if open >= self.shared.limits.max_connections as u64 {
            tracing::debug!("refusing a connection: {open} open, the most allowed");
            counters.refused.fetch_add(1, Ordering::Relaxed);
            return;
        }
        match ConnTimers::start(&self.shared.timers, self.shared.limits, counters) {
            Ok(conn) => {
                let open = OpenConnection::new(counters);
                connections.spawn(serve(client, conn, Arc::clone(&self.shared), open));
            }
            Err(error) => {
                tracing::warn!("refusing a connection, no idle timer: {error}");
                counters.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Accept fails when the process is out of file descriptors: wait instead of spinning.
    /// The pending connection stays queued, so the next `accept` fails at once too; the wait
    /// is all that keeps this loop off the CPU. When the service refuses the sleep (a full
    /// ring, or shut down), or drops it unrun, tokio's own timer waits instead.
    async fn back_off_after(&self, error: io::Error) {
        self.shared
            .counters
            .accept_errors
            .fetch_add(1, Ordering::Relaxed);
        tracing::warn!("accept failed: {error}");
        if let Err(refused) = self.shared.timers.sleep(ACCEPT_BACK_OFF).await {
            tracing::debug!("back-off on tokio's timer: {refused}");
            tokio::time::sleep(ACCEPT_BACK_OFF).await;
        }
    }
}

/// A TCP socket of `addr`'s family.
fn socket_for(addr: SocketAddr) -> io::Result<TcpSocket> {
    if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
}

fn listen_on(addr: SocketAddr, limits: &Limits) -> io::Result<TcpListener> {
    let socket = socket_for(addr)?;
    // Lets a restarted proxy bind over TIME_WAIT sockets; a live listener still makes it fail.
    socket.set_reuseaddr(true)?;
    // Accepted sockets inherit both (see `Args::client_send_buffer`, `Args::relay_buffer`);
    // the receive buffer is set before `listen`, as it sets the window the handshake offers.
    if let Some(bytes) = limits.client_send_buffer {
        socket.set_send_buffer_size(bytes)?;
    }
    if let Some(bytes) = limits.relay_buffer {
        socket.set_recv_buffer_size(bytes)?;
    }
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

async fn check_upstream(timers: &TimerService, addr: SocketAddr) -> Result<(), StartError> {
    match timers
        .timeout(UPSTREAM_CHECK, TcpStream::connect(addr))
        .await
    {
        Ok(Ok(_probe)) => Ok(()),
        Ok(Err(source)) => Err(StartError::Upstream { addr, source }),
        Err(wheel_shard::Elapsed::Deadline) => Err(StartError::UpstreamSilent {
            addr,
            limit: UPSTREAM_CHECK,
        }),
        Err(wheel_shard::Elapsed::TimerFailed(error)) => Err(StartError::Upstream {
            addr,
            source: io::Error::other(error),
        }),
    }
}

/// The timer service config: the file if given, then `WHEEL_*` overrides.
pub fn load_config(path: Option<&Path>) -> Result<Config, ConfigError> {
    let config = match path {
        Some(path) => Config::from_file(path)?,
        None => Config::default(),
    };
    config.with_env()
}

/// The Ctrl-C summary.
pub fn print_report(report: &Report) {
    let (stats, counters) = (&report.stats, &report.counters);
    let count = |c: &AtomicU64| c.load(Ordering::Relaxed);
    println!(
        "connections: accepted {}, refused over max-connections {}, closed idle {}, \
         closed on request timeout {}, closed by a peer {}, failed {}, cut by the stop {}, \
         still open {}, accept errors {}, idle deadlines pushed back {}",
        count(&counters.accepted),
        count(&counters.refused),
        count(&counters.closed_idle),
        count(&counters.closed_request_timeout),
        count(&counters.closed_normally),
        count(&counters.failed),
        count(&counters.closed_by_stop),
        count(&counters.open),
        count(&counters.accept_errors),
        count(&counters.idle_pushed_back),
    );
    println!(
        "timers: scheduled {}, fired {}, cancelled {}, rejected {}, pending {}, tick-thread wake-ups {}",
        stats.scheduled, stats.fired, stats.cancelled, stats.rejected, stats.pending, stats.wakeups
    );
    let l = &stats.lateness;
    println!(
        "lateness over {} runs: p50 {:?}, p90 {:?}, p99 {:?}, p99.9 {:?}, max {:?}",
        l.count, l.p50, l.p90, l.p99, l.p999, l.max
    );
}

async fn run(args: Args) -> Result<(), StartError> {
    let timers = TimerService::new(load_config(args.config.as_deref())?)?;
    let limits = Limits {
        idle: args.idle,
        request_timeout: args.request_timeout,
        max_connections: args.max_connections,
        client_send_buffer: Some(args.client_send_buffer).filter(|&bytes| bytes > 0),
        relay_buffer: Some(args.relay_buffer).filter(|&bytes| bytes > 0),
    };
    let proxy = Proxy::bind(args.listen, args.upstream, limits, timers).await?;
    let local = proxy.local_addr().map_err(|source| StartError::Listen {
        addr: args.listen,
        source,
    })?;
    println!(
        "idle_proxy listening on {local}, upstream {}",
        args.upstream
    );
    let report = proxy.run_until(ctrl_c()).await;
    print_report(&report);
    Ok(())
}

/// Completes on Ctrl-C. If the handler cannot be installed, never completes (the process
/// then ends only by a signal's default action) rather than stopping at once.
async fn ctrl_c() {
    if let Err(error) = tokio::signal::ctrl_c().await {
        tracing::warn!("cannot listen for Ctrl-C: {error}");
        std::future::pending::<()>().await;
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("idle_proxy: cannot start the tokio runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("idle_proxy: {error}");
            ExitCode::FAILURE
        }
    }
}
