//! The harness of the tests in front of redis (and of those of the proxy's start-up, limits and
//! stop that need no redis): bounded child processes, a throwaway `redis-server`, and the example
//! proxy running in-process.

use std::io;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use wheel_shard::{Config, TimerService};

use crate::idle_proxy::{Counters, Limits, Proxy, Report};
use crate::LOOPBACK;

/// One lock for all the proxy's tests (see [`crate::serial`]).
pub use crate::serial;

/// What installs the redis binaries (on Debian and Ubuntu, as root; elsewhere it says what to
/// install by hand).
pub const INSTALL_REDIS: &str = "bash .ci/install-redis.sh (as root)";

/// True when the redis binaries are installed. Otherwise records the calling test as skipped,
/// with the reason and [`INSTALL_REDIS`], for `cargo xtask test`'s summary; under CI
/// (`CI=true`), where `.ci/install-redis.sh` should have installed them, it fails instead.
pub fn redis_tools_present() -> bool {
    let missing: Vec<_> = ["redis-server", "redis-benchmark", "redis-cli"]
        .into_iter()
        .filter(|tool| Command::new(tool).arg("--version").output().is_err())
        .collect();
    if missing.is_empty() {
        return true;
    }
    let reason = format!("{} not installed", missing.join(", "));
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "under CI: {reason}; install them with {INSTALL_REDIS}"
    );
    crate::skip::record(&reason, INSTALL_REDIS);
    false
}

/// A child process killed and reaped when dropped, whatever the test did.
pub struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `command` to completion, killing it and failing after `limit`.
pub fn run_bounded(command: &mut Command, limit: Duration) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
    let stdout = drain(child.stdout.take().expect("piped"));
    let stderr = drain(child.stderr.take().expect("piped"));
    let mut child = KillOnDrop(child);
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("wait on child") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "{command:?} still running after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let joined = |h: JoinHandle<Vec<u8>>| h.join().expect("reader thread");
    Output {
        status,
        stdout: joined(stdout),
        stderr: joined(stderr),
    }
}

pub fn drain(mut pipe: impl io::Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

/// Makes sure this process (and the redis-server it starts, which inherits the limit) may
/// open `needed` descriptors, raising the soft limit with util-linux `prlimit` if it is lower.
pub fn ensure_open_files(needed: u64) {
    let (soft, hard) = open_files_limit();
    if soft >= needed {
        return;
    }
    let value = if hard >= needed {
        format!("{needed}:")
    } else {
        format!("{needed}:{needed}")
    };
    let pid = std::process::id().to_string();
    let done = Command::new("prlimit")
        .args(["--pid", &pid, &format!("--nofile={value}")])
        .status();
    let (soft, hard) = open_files_limit();
    assert!(
        soft >= needed,
        "need {needed} open files, the limit is {soft} (hard {hard}) and prlimit gave {done:?}: \
         raise `ulimit -n` to {needed}"
    );
}

pub fn open_files_limit() -> (u64, u64) {
    let limits = std::fs::read_to_string("/proc/self/limits").expect("/proc/self/limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("open files line");
    let mut numbers = line
        .split_whitespace()
        .filter_map(|w| w.parse::<u64>().ok());
    (
        numbers.next().unwrap_or(u64::MAX),
        numbers.next().unwrap_or(u64::MAX),
    )
}

pub fn free_port() -> u16 {
    let listener = StdListener::bind((LOOPBACK, 0)).expect("bind a free port");
    listener.local_addr().expect("local addr").port()
}

/// A `redis-server` on a free loopback port, without persistence.
pub struct Redis {
    _process: KillOnDrop,
    pub addr: SocketAddr,
}

impl Redis {
    pub fn start() -> Redis {
        // The free port can be taken between our probe and redis' bind: try a few.
        for _ in 0..3 {
            let port = free_port();
            let process = KillOnDrop(
                Command::new("redis-server")
                    .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                    .args(["--save", "", "--appendonly", "no", "--maxclients", "10000"])
                    // The proxy opens 2 000 upstream connections in a burst; redis' default
                    // accept backlog (511) could drop SYNs and delay a connect by a second.
                    .args(["--tcp-backlog", "4096"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("start redis-server"),
            );
            let addr = SocketAddr::from((LOOPBACK, port));
            if wait_for_pong(addr, Duration::from_secs(10)) {
                return Redis {
                    _process: process,
                    addr,
                };
            }
        }
        panic!("redis-server did not answer PING on three free ports");
    }

    pub fn cli(&self, args: &[&str]) -> String {
        redis_cli(self.addr, args)
    }
}

pub fn wait_for_pong(addr: SocketAddr, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let answer = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &addr.port().to_string(), "PING"])
            .stderr(Stdio::null())
            .output();
        if answer.is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "PONG") {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

pub fn redis_cli(addr: SocketAddr, args: &[&str]) -> String {
    let port = addr.port().to_string();
    let out = run_bounded(
        Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port])
            .args(args),
        Duration::from_secs(10),
    );
    assert!(
        out.status.success(),
        "redis-cli {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The example's `Proxy` on its own 2-thread runtime; stopped (and joined) on drop.
pub struct RunningProxy {
    pub addr: SocketAddr,
    /// The proxy's live counters.
    pub counters: Arc<Counters>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<Report>>,
}

impl RunningProxy {
    pub fn start(upstream: SocketAddr, limits: Limits) -> RunningProxy {
        let timers = TimerService::new(Config::default()).expect("timer service");
        RunningProxy::start_with(upstream, limits, timers)
    }

    /// A proxy whose timers live in `timers`.
    pub fn start_with(upstream: SocketAddr, limits: Limits, timers: TimerService) -> RunningProxy {
        let (started, bound) = mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("proxy runtime");
            runtime.block_on(async move {
                let listen = SocketAddr::from((LOOPBACK, 0));
                let proxy = Proxy::bind(listen, upstream, limits, timers)
                    .await
                    .expect("proxy binds");
                let addr = proxy.local_addr().expect("local addr");
                started.send((addr, proxy.counters())).expect("test waits");
                proxy.run_until(async { stopped.await.unwrap_or(()) }).await
            })
        });
        let (addr, counters) = bound
            .recv_timeout(Duration::from_secs(10))
            .expect("proxy started");
        RunningProxy {
            addr,
            counters,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Stops the proxy (as Ctrl-C does) and returns its final report.
    pub fn stop(mut self) -> Report {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let report = self
            .thread
            .take()
            .expect("running")
            .join()
            .expect("proxy thread");
        println!("proxy on {} stopped:", self.addr);
        super::idle_proxy::print_report(&report);
        report
    }
}

impl Drop for RunningProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

pub fn client_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("client runtime")
}

/// Waits until `done` holds, for at most `limit`; says whether it did.
pub fn eventually(limit: Duration, done: impl Fn() -> bool) -> bool {
    let give_up = Instant::now() + limit;
    while !done() {
        if Instant::now() > give_up {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// An upstream that answers each connection's first byte with `bytes` bytes, written as fast
/// as the connection takes them. Stops accepting when dropped; a connection's thread ends when
/// its bytes are written or its peer closes.
pub struct Streamer {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Streamer {
    pub fn start(bytes: usize) -> Streamer {
        let listener = StdListener::bind((LOOPBACK, 0)).expect("bind the streamer");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener.local_addr().expect("local addr");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        std::thread::spawn(move || stream_to(stream, bytes));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Streamer {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

fn stream_to(mut stream: StdStream, bytes: usize) {
    let _ = stream.set_nonblocking(false);
    let mut request = [0u8; 1];
    if !matches!(stream.read(&mut request), Ok(1)) {
        return;
    }
    let chunk = vec![b'x'; 64 * 1024];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len());
        if stream.write_all(&chunk[..n]).is_err() {
            return;
        }
        left -= n;
    }
}

impl Drop for Streamer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

pub(crate) fn build() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// True when the proxy closes `stream` within 500 ms (EOF or reset); false if it stays open.
pub(crate) async fn closed_soon(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match tokio::time::timeout(Duration::from_millis(500), stream.read(&mut byte)).await {
        Err(_) => false,
        Ok(Ok(0)) => true,
        Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionReset => true,
        Ok(other) => panic!("unexpected {other:?} from the proxy"),
    }
}
