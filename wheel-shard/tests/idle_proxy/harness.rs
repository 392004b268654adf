//! The harness of the tests against hostile clients and upstreams, without redis: the example's
//! `Proxy` on a runtime of its own, its timers in a small `TimerService` the test keeps a handle
//! to ([`TestProxy`]); an upstream written here ([`Upstream`]): a tokio server on a runtime of its
//! own whose behaviour each connection picks with its first byte (echo, never answer, answer
//! slowly, answer whole lines only, answer only at EOF, answer and FIN first, stream without end,
//! reset, close), or that resets or closes every connection at once, or never accepts, or stops
//! listening; and clients, tokio sockets on the test's runtime that trickle, stall, never read,
//! half-close, reset, reconnect at once and flood.
//!
//! A close is checked against its deadline: never before it less [`EARLY`], never after it plus
//! [`LATE`] (the VM stalls and a timer may fire a tick late). What a slow reader pins is read from
//! the kernel's own accounts (`/proc/net/tcp`: the send and receive queues of the proxy's
//! sockets). Each test runs under [`hostile`], alone and bounded.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::runtime::Runtime;
use wheel_shard::{Stats, TimerService};

use crate::idle_proxy::{Counters, Limits, Proxy, Report};
use crate::{common, LOOPBACK};

/// How much earlier than its deadline a close may be seen. The service never fires early and
/// every measurement starts before the proxy can start its timer, so this is only a margin.
pub(crate) const EARLY: Duration = Duration::from_millis(10);

/// How much later than its deadline a close may be seen: the VM stalls, a timer fires a tick
/// late, the proxy's task and the client's read take their turn.
pub(crate) const LATE: Duration = Duration::from_secs(1);

/// How long "closed at once" may take.
pub(crate) const AT_ONCE: Duration = Duration::from_secs(1);

/// How long the proxy may take to stop.
pub(crate) const STOP_LIMIT: Duration = Duration::from_secs(5);

/// Every kernel buffer a slow client could fill on loopback, and then some: what a proxy that
/// does not buffer on its own may hold in flight for one connection. An unbounded proxy
/// reaches it within a second; the upstream offers without end.
pub(crate) const IN_FLIGHT_BOUND: u64 = 64 << 20;

// ---- running the tests ----

/// Runs a test's `body` alone (tests measure time) on a thread of its own; fails the test if it
/// has not returned within `limit` (a hang), and re-raises its panic if it panicked.
pub(crate) fn hostile<T: Send + 'static>(
    limit: Duration,
    body: impl FnOnce() -> T + Send + 'static,
) -> T {
    let _serial = crate::serial();
    let (done, result) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let _ = done.send(body());
    });
    match result.recv_timeout(limit) {
        Ok(value) => value,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("the test did not finish within {limit:?}: something hung")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match thread.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the body returned without sending"),
        },
    }
}

/// The clients' runtime.
pub(crate) fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("client runtime")
}

/// Runs `body` on `runtime`, failing the test if it has not finished within `limit`.
pub(crate) fn block_on<F: std::future::Future>(
    runtime: &Runtime,
    limit: Duration,
    body: F,
) -> F::Output {
    runtime
        .block_on(async { tokio::time::timeout(limit, body).await })
        .unwrap_or_else(|_| panic!("the clients did not finish within {limit:?}"))
}

/// Polls `condition` every 5 ms (without blocking the runtime) for up to `limit`.
pub(crate) async fn until(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let give_up = Instant::now() + limit;
    while !condition() {
        if Instant::now() > give_up {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    true
}

pub(crate) fn assert_within(what: &str, took: Duration, deadline: Duration) {
    println!("{what}: {took:?} (deadline {deadline:?})");
    assert!(
        took + EARLY >= deadline,
        "{what}: after {took:?}, before its deadline {deadline:?}"
    );
    assert!(
        took <= deadline + LATE,
        "{what}: only after {took:?}, its deadline was {deadline:?}"
    );
}

// ---- the proxy ----

/// The example's `Proxy` on a 2-thread runtime of its own, its timers in `timers`. Dropping it
/// stops it without waiting.
pub(crate) struct TestProxy {
    pub(crate) addr: SocketAddr,
    pub(crate) counters: Arc<Counters>,
    pub(crate) timers: TimerService,
    pub(crate) stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub(crate) report: mpsc::Receiver<Report>,
}

impl TestProxy {
    /// A proxy in front of `upstream` whose timers live in a small service of their own.
    pub(crate) fn start(upstream: SocketAddr, limits: Limits) -> TestProxy {
        TestProxy::start_with(upstream, limits, common::service())
    }

    pub(crate) fn start_with(
        upstream: SocketAddr,
        limits: Limits,
        timers: TimerService,
    ) -> TestProxy {
        let (bound, is_bound) = mpsc::channel();
        let (reported, report) = mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = timers.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("proxy runtime");
            runtime.block_on(async move {
                let listen = SocketAddr::from((LOOPBACK, 0));
                let proxy = match Proxy::bind(listen, upstream, limits, service).await {
                    Ok(proxy) => proxy,
                    Err(error) => {
                        let _ = bound.send(Err(error.to_string()));
                        return;
                    }
                };
                let addr = proxy.local_addr().expect("local addr");
                let _ = bound.send(Ok((addr, proxy.counters())));
                let report = proxy.run_until(async { stopped.await.unwrap_or(()) }).await;
                let _ = reported.send(report);
            });
        });
        let (addr, counters) = is_bound
            .recv_timeout(Duration::from_secs(10))
            .expect("the proxy starts within 10 s")
            .unwrap_or_else(|error| panic!("the proxy did not start: {error}"));
        TestProxy {
            addr,
            counters,
            timers,
            stop: Some(stop),
            report,
        }
    }

    pub(crate) fn tally(&self) -> Tally {
        Tally::of(&self.counters)
    }

    /// Stops the proxy as Ctrl-C does; fails if it has not stopped within [`STOP_LIMIT`].
    /// Returns its report and how long it took.
    pub(crate) fn stop(mut self) -> (Report, Duration) {
        let started = Instant::now();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let report = self
            .report
            .recv_timeout(STOP_LIMIT)
            .unwrap_or_else(|_| panic!("the proxy did not stop within {STOP_LIMIT:?}"));
        (report, started.elapsed())
    }
}

/// The proxy's counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) accepted: u64,
    pub(crate) refused: u64,
    pub(crate) idle: u64,
    pub(crate) request_timeout: u64,
    pub(crate) normal: u64,
    pub(crate) failed: u64,
    pub(crate) stopped: u64,
    pub(crate) open: u64,
    pub(crate) accept_errors: u64,
}

impl Tally {
    pub(crate) fn of(c: &Counters) -> Tally {
        let n = |c: &AtomicU64| c.load(Ordering::SeqCst);
        Tally {
            accepted: n(&c.accepted),
            refused: n(&c.refused),
            idle: n(&c.closed_idle),
            request_timeout: n(&c.closed_request_timeout),
            normal: n(&c.closed_normally),
            failed: n(&c.failed),
            stopped: n(&c.closed_by_stop),
            open: n(&c.open),
            accept_errors: n(&c.accept_errors),
        }
    }

    /// Connections that ended one way or another.
    pub(crate) fn ended(&self) -> u64 {
        self.refused + self.idle + self.request_timeout + self.normal + self.failed + self.stopped
    }
}

/// The end of a test: the counters settle at `expected`, no timer is left in the service, and
/// the proxy stops.
pub(crate) fn ends_with(proxy: TestProxy, expected: Tally) {
    expect_tally(&proxy, expected);
    assert_no_timer_left(&proxy);
    proxy.stop();
}

/// Waits (up to 5 s) for the proxy's counters to read `expected`; fails with what they read.
pub(crate) fn expect_tally(proxy: &TestProxy, expected: Tally) {
    let settled = common::eventually(Duration::from_secs(5), || proxy.tally() == expected);
    assert!(
        settled,
        "counters: expected {expected:?}, got {:?}",
        proxy.tally()
    );
}

/// One line of the ledger of `stats`.
pub(crate) fn ledger(stats: &Stats) -> String {
    format!(
        "scheduled {}, fired {}, cancelled {}, pending {}, rejected {}, panicked {}, strays {}",
        stats.scheduled,
        stats.fired,
        stats.cancelled,
        stats.pending,
        stats.rejected,
        stats.panicked,
        stats.strays
    )
}

/// Asserts the ledger balances with nothing left: every timer scheduled fired or was
/// cancelled (none pending, none handed back unfired by a shutdown), none refused.
pub(crate) fn assert_balanced(stats: &Stats) {
    let line = ledger(stats);
    assert_eq!(stats.pending, 0, "timers left pending: {line}");
    assert_eq!(
        stats.scheduled,
        stats.fired + stats.cancelled,
        "scheduled timers neither fired nor cancelled: {line}"
    );
    assert_eq!(
        (stats.rejected, stats.panicked, stats.strays),
        (0, 0, 0),
        "{line}"
    );
}

/// Once every connection has closed: waits (up to 5 s) for the proxy's service to have no
/// timer pending, then checks its ledger balances. Returns the stats.
pub(crate) fn assert_no_timer_left(proxy: &TestProxy) -> Stats {
    let quiet = common::eventually(Duration::from_secs(5), || proxy.timers.stats().pending == 0);
    let stats = proxy.timers.stats();
    assert!(
        quiet,
        "timers still pending 5 s after the last close: {}",
        ledger(&stats)
    );
    assert_balanced(&stats);
    stats
}

// ---- the upstream ----

/// What the upstream does with each connection it accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The connection's first byte picks its behaviour (see [`upstream_connection`]).
    Scripted,
    /// Resets the connection as soon as it is accepted (all but the first: the proxy's probe).
    ResetAtOnce,
    /// Closes the connection (FIN) as soon as it is accepted.
    CloseAtOnce,
}

/// First bytes of a scripted upstream connection.
pub(crate) mod command {
    /// Echo every byte until EOF, then FIN.
    pub const ECHO: u8 = b'e';
    /// Read everything, answer nothing.
    pub const SILENT: u8 = b's';
    /// Write without end, as fast as the connection takes it.
    pub const STREAM: u8 = b'z';
    /// Reset the connection.
    pub const RESET: u8 = b'r';
    /// Close the connection (FIN).
    pub const CLOSE: u8 = b'c';
    /// Read until EOF, then echo it all and FIN.
    pub const AT_EOF: u8 = b'h';
    /// The next byte is a delay in 10 ms units: echo each read that much later.
    pub const SLOW_ECHO: u8 = b'w';
    /// Answer "bye" and FIN at once, then count what still comes in until EOF.
    pub const FIN_FIRST: u8 = b'f';
    /// Echo each complete line (ending in '\n'); an unfinished line waits for its end.
    pub const LINES: u8 = b'l';
}

/// What the upstream saw.
#[derive(Default)]
pub(crate) struct UpstreamCounts {
    pub(crate) accepted: AtomicU64,
    /// Bytes the STREAM connections handed to the kernel.
    pub(crate) streamed: AtomicU64,
    /// Bytes FIN_FIRST connections received after their FIN.
    pub(crate) after_fin: AtomicU64,
}

/// A tokio upstream on a runtime of its own.
pub(crate) struct Upstream {
    pub(crate) addr: SocketAddr,
    pub(crate) mode: Mode,
    pub(crate) counts: Arc<UpstreamCounts>,
    pub(crate) runtime: Option<Runtime>,
    pub(crate) acceptor: Option<tokio::task::JoinHandle<()>>,
}

impl Upstream {
    pub(crate) fn start(mode: Mode) -> Upstream {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("upstream runtime");
        let listener = runtime
            .block_on(TcpListener::bind((LOOPBACK, 0)))
            .expect("bind the upstream");
        let addr = listener.local_addr().expect("local addr");
        let counts = Arc::<UpstreamCounts>::default();
        let acceptor = runtime.spawn(accept_loop(listener, mode, Arc::clone(&counts)));
        Upstream {
            addr,
            mode,
            counts,
            runtime: Some(runtime),
            acceptor: Some(acceptor),
        }
    }

    pub(crate) fn runtime(&self) -> &Runtime {
        self.runtime.as_ref().expect("running")
    }

    /// Closes the listener (connects are refused from now on); connections already accepted
    /// go on. Not to be called from inside a runtime.
    pub(crate) fn stop_listening(&mut self) {
        if let Some(acceptor) = self.acceptor.take() {
            acceptor.abort();
            let _ = self.runtime().block_on(acceptor);
        }
    }

    /// Listens on the same address again.
    pub(crate) fn listen_again(&mut self) {
        // std's bind sets SO_REUSEADDR, so the connections still open on the port do not stop it.
        let listener = std::net::TcpListener::bind(self.addr).expect("listen on the port again");
        listener.set_nonblocking(true).expect("non-blocking");
        let _context = self.runtime().enter();
        let listener = TcpListener::from_std(listener).expect("tokio listener");
        let counts = Arc::clone(&self.counts);
        self.acceptor = Some(
            self.runtime()
                .spawn(accept_loop(listener, self.mode, counts)),
        );
    }

    pub(crate) fn accepted(&self) -> u64 {
        self.counts.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

pub(crate) async fn accept_loop(listener: TcpListener, mode: Mode, counts: Arc<UpstreamCounts>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let index = counts.accepted.fetch_add(1, Ordering::SeqCst);
                let counts = Arc::clone(&counts);
                tokio::spawn(async move {
                    let _ = upstream_connection(stream, mode, index, &counts).await;
                });
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Serves the upstream's `index`-th connection (from 0: the proxy's startup probe).
pub(crate) async fn upstream_connection(
    mut stream: TcpStream,
    mode: Mode,
    index: u64,
    counts: &UpstreamCounts,
) -> io::Result<()> {
    match mode {
        // The probe is spared: reset before its connect returns, it fails the proxy's start.
        Mode::ResetAtOnce if index == 0 => return Ok(()),
        Mode::ResetAtOnce => return stream.set_zero_linger(),
        Mode::CloseAtOnce => return Ok(()),
        Mode::Scripted => {}
    }
    let mut first = [0u8; 1];
    if stream.read(&mut first).await? == 0 {
        return Ok(()); // the proxy's startup probe
    }
    let mut buf = vec![0u8; 64 * 1024];
    match first[0] {
        command::ECHO => loop {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                return stream.shutdown().await;
            }
            stream.write_all(&buf[..n]).await?;
        },
        command::SILENT => while stream.read(&mut buf).await? > 0 {},
        command::STREAM => {
            buf.fill(b'z');
            loop {
                let n = stream.write(&buf).await?;
                counts.streamed.fetch_add(n as u64, Ordering::SeqCst);
            }
        }
        command::RESET => stream.set_zero_linger()?,
        command::CLOSE => {}
        command::AT_EOF => {
            let mut all = Vec::new();
            stream.read_to_end(&mut all).await?;
            stream.write_all(&all).await?;
            stream.shutdown().await?;
        }
        command::SLOW_ECHO => {
            let mut tens = [0u8; 1];
            stream.read_exact(&mut tens).await?;
            let delay = Duration::from_millis(10 * u64::from(tens[0]));
            loop {
                let n = stream.read(&mut buf).await?;
                if n == 0 {
                    return stream.shutdown().await;
                }
                tokio::time::sleep(delay).await;
                stream.write_all(&buf[..n]).await?;
            }
        }
        command::FIN_FIRST => {
            stream.write_all(b"bye").await?;
            stream.shutdown().await?;
            loop {
                let n = stream.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                counts.after_fin.fetch_add(n as u64, Ordering::SeqCst);
            }
        }
        command::LINES => {
            let mut pending = Vec::new();
            loop {
                let n = stream.read(&mut buf).await?;
                if n == 0 {
                    return stream.shutdown().await;
                }
                pending.extend_from_slice(&buf[..n]);
                if let Some(end) = pending.iter().rposition(|&b| b == b'\n') {
                    let lines: Vec<u8> = pending.drain(..=end).collect();
                    stream.write_all(&lines).await?;
                }
            }
        }
        other => return Err(io::Error::other(format!("unknown command {other}"))),
    }
    Ok(())
}

// ---- clients ----

pub(crate) fn is_reset(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}

/// Reads until the peer closes (EOF or a reset); returns the bytes read meanwhile.
pub(crate) async fn until_closed(stream: &mut (impl AsyncRead + Unpin)) -> io::Result<u64> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0;
    loop {
        match stream.read(&mut buf).await {
            Ok(0) => return Ok(total),
            Ok(n) => total += n as u64,
            Err(error) if is_reset(&error) => return Ok(total),
            Err(error) => return Err(error),
        }
    }
}

/// True when `stream` is closed within `limit` with nothing read; false if it stays open.
/// Data from the proxy fails the test.
pub(crate) async fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let mut byte = [0u8; 1];
    match tokio::time::timeout(limit, stream.read(&mut byte)).await {
        Err(_) => false,
        Ok(Ok(0)) => true,
        Ok(Err(error)) if is_reset(&error) => true,
        Ok(other) => panic!("expected a close, got {other:?}"),
    }
}

pub(crate) async fn connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect(addr).await.expect("connect")
}

/// A connection through the proxy whose upstream behaves as `first` says.
pub(crate) async fn scripted(addr: SocketAddr, first: &[u8]) -> TcpStream {
    let mut stream = connect(addr).await;
    stream.write_all(first).await.expect("send the command");
    stream
}

/// Sends `message` and expects it back.
pub(crate) async fn round_trip(stream: &mut TcpStream, message: &[u8]) {
    stream.write_all(message).await.expect("send");
    let mut back = vec![0u8; message.len()];
    stream.read_exact(&mut back).await.expect("the echo");
    assert_eq!(back, message, "the echo differs");
}

/// Ends a connection cleanly: shuts down the write side and reads until the proxy closes.
pub(crate) async fn hang_up(mut stream: TcpStream) {
    stream.shutdown().await.expect("shutdown");
    let left = until_closed(&mut stream).await.expect("the close");
    assert_eq!(left, 0, "data after the echoes");
}

/// Resets `stream` (SO_LINGER 0, then close).
pub(crate) fn reset(stream: TcpStream) {
    stream.set_zero_linger().expect("SO_LINGER");
    drop(stream);
}

/// A socket whose receive buffer is small, so the proxy's writes to it block early.
pub(crate) async fn connect_small(addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    socket.connect(addr).await.expect("connect")
}

/// Most bytes the proxy's own sockets may hold for one slow reader: the help promises that
/// "it cannot pin megabytes of memory".
pub(crate) const PINNED_BOUND: u64 = 1 << 20;

/// What the kernel holds for the proxy's own established sockets, by queue.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Pinned {
    /// Send and receive queues of the sockets accepted from clients.
    pub(crate) client_send: u64,
    pub(crate) client_receive: u64,
    /// Send and receive queues of the sockets connected to the upstream.
    pub(crate) upstream_send: u64,
    pub(crate) upstream_receive: u64,
}

impl Pinned {
    pub(crate) fn total(&self) -> u64 {
        self.client_send + self.client_receive + self.upstream_send + self.upstream_receive
    }
}

/// Bytes the kernel holds in the send and receive queues of the proxy's own established
/// sockets: those accepted on `proxy`'s port and those connected to `upstream`'s. Read from
/// `/proc/net/tcp` (Linux, IPv4 loopback: every socket of these tests).
pub(crate) fn proxy_kernel_bytes(proxy: SocketAddr, upstream: SocketAddr) -> Pinned {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("read /proc/net/tcp");
    let hex = |text: &str| u64::from_str_radix(text, 16).ok();
    let port = |address: &str| hex(address.rsplit(':').next()?);
    let (proxy, upstream) = (u64::from(proxy.port()), u64::from(upstream.port()));
    let mut pinned = Pinned::default();
    for line in table.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let parsed = (|| {
            let (local, remote) = (port(fields.get(1)?)?, port(fields.get(2)?)?);
            let (send, receive) = fields.get(4)?.split_once(':')?;
            Some((
                local,
                remote,
                *fields.get(3)? == "01",
                hex(send)?,
                hex(receive)?,
            ))
        })();
        let Some((local, remote, established, send, receive)) = parsed else {
            continue;
        };
        if !established {
            continue;
        }
        if local == proxy {
            pinned.client_send += send;
            pinned.client_receive += receive;
        } else if remote == upstream && local != upstream {
            pinned.upstream_send += send;
            pinned.upstream_receive += receive;
        }
    }
    pinned
}
