//! The proxy in front of a real `redis-server`, driven by clients nobody on this project wrote
//! (`redis-benchmark`, `redis-cli`) and by 2 000 idle connections: no request lost, idle
//! connections closed on time while busy ones stay open, an unanswered request gets its client
//! closed.
//!
//! Needs redis-server, redis-benchmark and redis-cli (`.ci/install-redis.sh`); without them the
//! tests return at once and record the skip (`tests/skip`), which `cargo xtask test` lists in its
//! summary; under CI (`CI=true`) they fail instead. Loopback only; every process started here is
//! killed on drop; every wait is bounded.

use std::io;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::idle_proxy::Limits;
use crate::redis_harness::*;

const IDLE_CONNECTIONS: usize = 2_000;

/// Connections that keep sending while the idle ones wait.
const PINGERS: usize = 10;

// ---- redis-benchmark ----

/// Runs `redis-benchmark -n 100000 -c 50 -q -t set,get` against `addr`, asserts that every
/// request succeeded, and returns the (SET, GET) requests per second.
fn benchmark(addr: SocketAddr) -> (f64, f64) {
    let port = addr.port().to_string();
    let args = [
        "-h",
        "127.0.0.1",
        "-p",
        &port,
        "-n",
        "100000",
        "-c",
        "50",
        "-q",
        "-t",
        "set,get",
    ];
    let out = run_bounded(
        Command::new("redis-benchmark").args(args),
        Duration::from_secs(180),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "redis-benchmark failed: {stdout}\n{stderr}"
    );
    assert!(
        !stdout.contains("rror") && !stderr.contains("rror"),
        "errors: {stdout}\n{stderr}"
    );
    (
        requests_per_second(&stdout, "SET"),
        requests_per_second(&stdout, "GET"),
    )
}

/// The figure of a `-q` summary line, e.g. "SET: 125313.29 requests per second, p50=...".
fn requests_per_second(report: &str, test: &str) -> f64 {
    let line = report
        .split(['\r', '\n'])
        .filter(|l| l.trim_start().starts_with(&format!("{test}: ")))
        .find(|l| l.contains("requests per second"))
        .unwrap_or_else(|| panic!("no {test} summary in {report:?}"));
    let figure = line.trim_start()[test.len() + 2..]
        .split_whitespace()
        .next()
        .expect("figure");
    figure
        .parse()
        .unwrap_or_else(|_| panic!("bad figure in {line:?}"))
}

/// Calls of `command` counted by redis since the last `CONFIG RESETSTAT`.
fn command_calls(redis: &Redis, command: &str) -> u64 {
    let info = redis.cli(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:calls=");
    let line = info
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_default();
    line.get(prefix.len()..)
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn redis_benchmark_through_the_proxy_loses_no_request() {
    let _serial = serial();
    if !redis_tools_present() {
        return;
    }
    let redis = Redis::start();
    let (set, get) = benchmark(redis.addr);
    println!("redis-benchmark direct:       SET {set:.0} rps, GET {get:.0} rps");

    redis.cli(&["CONFIG", "RESETSTAT"]);
    let limits = Limits {
        request_timeout: Some(Duration::from_secs(5)),
        ..Limits::new(Duration::from_secs(10))
    };
    let proxy = RunningProxy::start(redis.addr, limits);
    let (set, get) = benchmark(proxy.addr);
    println!(
        "redis-benchmark through proxy: SET {set:.0} rps, GET {get:.0} rps ({} build)",
        build()
    );
    assert_eq!(
        command_calls(&redis, "set"),
        100_000,
        "every SET reached redis"
    );
    assert_eq!(
        command_calls(&redis, "get"),
        100_000,
        "every GET reached redis"
    );

    let report = proxy.stop();
    let count = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    assert_eq!(count(&report.counters.closed_idle), 0);
    assert_eq!(count(&report.counters.closed_request_timeout), 0);
    assert_eq!(report.stats.fired, 0, "no idle or request timer fired");
    assert_eq!(report.stats.rejected, 0);
    assert!(
        report.stats.cancelled >= 100_000,
        "each answered request cancels its deadline"
    );
}

// ---- idle connections ----

/// Connects (at most `permits` connects in flight), then waits for the proxy to close the
/// connection. Returns how long that took from just *before* connect: the proxy's idle timer
/// cannot start earlier, so a result under the idle timeout means the proxy closed early.
/// (Measured from when connect returned, a busy client runtime could notice the connect after
/// the proxy accepted it.) It overstates the lateness by the connect time.
async fn open_until_closed(
    addr: SocketAddr,
    permits: Arc<tokio::sync::Semaphore>,
) -> io::Result<IdleClose> {
    let permit = permits.acquire_owned().await.expect("semaphore open");
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr).await?;
    let connect = started.elapsed();
    drop(permit);
    let mut byte = [0u8; 1];
    match stream.read(&mut byte).await {
        Ok(0) => {}
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
        Ok(_) => return Err(io::Error::other("an idle connection received data")),
        Err(e) => return Err(e),
    }
    let open = started.elapsed();
    Ok(IdleClose { connect, open })
}

/// One idle connection's times, from just before its connect.
struct IdleClose {
    /// Until connect returned.
    connect: Duration,
    /// Until the proxy closed it.
    open: Duration,
}

async fn expect_reply(stream: &mut TcpStream, expected: &[u8]) -> io::Result<()> {
    let mut got = vec![0u8; expected.len()];
    stream.read_exact(&mut got).await?;
    if got != expected {
        let got = String::from_utf8_lossy(&got).into_owned();
        return Err(io::Error::other(format!("unexpected reply {got:?}")));
    }
    Ok(())
}

/// A connection through the proxy that has answered its first PING.
async fn pinger(addr: SocketAddr) -> io::Result<TcpStream> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(b"PING\r\n").await?;
    expect_reply(&mut stream, b"+PONG\r\n").await?;
    Ok(stream)
}

/// Sends PING every `every` for `busy`, each answered; then goes quiet and returns how long
/// after the last PONG the proxy closed the connection.
async fn ping_then_idle(
    mut stream: TcpStream,
    every: Duration,
    busy: Duration,
) -> io::Result<Duration> {
    let start = Instant::now();
    let mut last = start;
    while start.elapsed() < busy {
        tokio::time::sleep(every).await;
        stream.write_all(b"PING\r\n").await?;
        expect_reply(&mut stream, b"+PONG\r\n").await?;
        last = Instant::now();
    }
    let mut byte = [0u8; 1];
    match stream.read(&mut byte).await? {
        0 => Ok(last.elapsed()),
        _ => Err(io::Error::other("unexpected data after PONG")),
    }
}

/// A subscriber to channel "news" through the proxy, and a publisher connected directly.
async fn subscribe(proxy: SocketAddr, redis: SocketAddr) -> io::Result<(TcpStream, TcpStream)> {
    let mut subscriber = TcpStream::connect(proxy).await?;
    subscriber.write_all(b"SUBSCRIBE news\r\n").await?;
    let confirmed = b"*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n";
    expect_reply(&mut subscriber, confirmed).await?;
    let publisher = TcpStream::connect(redis).await?;
    Ok((subscriber, publisher))
}

/// The subscriber only ever receives (the proxy only writes to it): it must stay open while
/// the publisher publishes every `every` for `busy`.
async fn receive_while_published(
    (mut subscriber, mut publisher): (TcpStream, TcpStream),
    every: Duration,
    busy: Duration,
) -> io::Result<()> {
    let message = b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$4\r\ntick\r\n";
    let start = Instant::now();
    while start.elapsed() < busy {
        tokio::time::sleep(every).await;
        publisher.write_all(b"PUBLISH news tick\r\n").await?;
        // ":0" here would mean the proxy closed the subscriber's upstream connection.
        expect_reply(&mut publisher, b":1\r\n").await?;
        expect_reply(&mut subscriber, message).await?;
    }
    Ok(())
}

/// What the clients of the idle test saw.
struct IdleOutcome {
    idle: Vec<io::Result<IdleClose>>,
    pingers_quiet_for: Vec<io::Result<Duration>>,
    subscriber: io::Result<()>,
}

/// Sets up the busy connections first (so none of their connects competes with the burst of
/// idle ones), then opens the idle connections and waits for every client to finish.
async fn run_idle_clients(proxy: SocketAddr, redis: SocketAddr, idle: Duration) -> IdleOutcome {
    let (every, busy) = (idle / 4, idle * 5 / 2);
    let mut pingers = Vec::new();
    for _ in 0..PINGERS {
        pingers.push(pinger(proxy).await.expect("a pinger connects"));
    }
    let channel = subscribe(proxy, redis)
        .await
        .expect("the subscriber subscribes");

    let permits = Arc::new(tokio::sync::Semaphore::new(64));
    let idle_tasks: Vec<_> = (0..IDLE_CONNECTIONS)
        .map(|_| tokio::spawn(open_until_closed(proxy, Arc::clone(&permits))))
        .collect();
    let pingers: Vec<_> = pingers
        .into_iter()
        .map(|stream| tokio::spawn(ping_then_idle(stream, every, busy)))
        .collect();
    let subscriber = tokio::spawn(receive_while_published(channel, every, busy));
    let mut outcome = IdleOutcome {
        idle: Vec::new(),
        pingers_quiet_for: Vec::new(),
        subscriber: subscriber.await.expect("subscriber task"),
    };
    for task in idle_tasks {
        outcome.idle.push(task.await.expect("idle task"));
    }
    for task in pingers {
        outcome
            .pingers_quiet_for
            .push(task.await.expect("pinger task"));
    }
    outcome
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

#[test]
fn idle_connections_close_on_time_and_busy_ones_stay_open() {
    let _serial = serial();
    if !redis_tools_present() {
        return;
    }
    // Client sockets and the proxy's two per connection live in this process.
    ensure_open_files(3 * IDLE_CONNECTIONS as u64 + 1_000);
    let redis = Redis::start();
    let idle = Duration::from_secs(2);
    // What "closed on time" allows past the idle timeout, as the client sees it from before
    // its connect. Generous, as 2 000 connections close at about the same moment: on a loaded
    // 2-core machine the slowest has read up to 740 ms (with a 1 s timeout). Still under the
    // timeout, so a connection kept open for a second idle period fails; the virtual-time test
    // checks that the timeout itself is exact.
    let slack = idle * 3 / 4;
    let proxy = RunningProxy::start(redis.addr, Limits::new(idle));
    let clients = run_idle_clients(proxy.addr, redis.addr, idle);
    let outcome = client_runtime()
        .block_on(async { tokio::time::timeout(Duration::from_secs(60), clients).await })
        .expect("the clients finish within 60 s");
    // Stopped (and its report printed) before any assertion, for the diagnosis.
    let report = proxy.stop();

    outcome
        .subscriber
        .expect("the subscriber stays open while it receives");
    let open_for: Vec<IdleClose> = outcome
        .idle
        .into_iter()
        .map(|close| close.expect("an idle connection"))
        .collect();
    let mut lateness: Vec<Duration> = open_for
        .iter()
        .map(|close| {
            let open = close.open;
            open.checked_sub(idle)
                .unwrap_or_else(|| panic!("closed after {open:?}, before {idle:?}"))
        })
        .collect();
    lateness.sort();
    let mut connect: Vec<Duration> = open_for.iter().map(|close| close.connect).collect();
    connect.sort();
    let (p50, p99, max) = (
        percentile(&lateness, 0.5),
        percentile(&lateness, 0.99),
        lateness[lateness.len() - 1],
    );
    println!(
        "{IDLE_CONNECTIONS} idle connections ({build} build), closed after the idle timeout \
         ({idle:?}) by, as the client sees it from before connect: p50 {p50:?}, p99 {p99:?}, \
         max {max:?} (connect itself took p50 {:?}, p99 {:?})",
        percentile(&connect, 0.5),
        percentile(&connect, 0.99),
        build = build(),
    );
    assert!(
        max <= slack,
        "a connection closed {max:?} after its idle timeout"
    );
    for quiet in outcome.pingers_quiet_for {
        let quiet = quiet.expect("a pinging connection stays open");
        assert!(
            quiet <= idle + slack,
            "a pinging connection closed {quiet:?} after its last PONG"
        );
    }
    let closed_idle = report.counters.closed_idle.load(Ordering::Relaxed);
    assert_eq!(
        closed_idle,
        IDLE_CONNECTIONS as u64 + PINGERS as u64,
        "idle + pinging connections closed idle"
    );
}

// ---- request deadline ----

#[test]
fn an_unanswered_request_gets_the_client_closed() {
    let _serial = serial();
    if !redis_tools_present() {
        return;
    }
    let redis = Redis::start();
    let deadline = Duration::from_millis(300);
    let limits = Limits {
        request_timeout: Some(deadline),
        ..Limits::new(Duration::from_secs(30))
    };
    let proxy = RunningProxy::start(redis.addr, limits);
    assert_eq!(redis_cli(proxy.addr, &["SET", "k", "v"]).trim(), "OK");

    // BLPOP on an empty list with no timeout: redis never answers.
    let start = Instant::now();
    let port = proxy.addr.port().to_string();
    let out = run_bounded(
        Command::new("redis-cli").args(["-h", "127.0.0.1", "-p", &port, "BLPOP", "empty", "0"]),
        Duration::from_secs(10),
    );
    let took = start.elapsed();
    let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    println!(
        "redis-cli BLPOP through the proxy ended after {took:?}: {}",
        said.trim()
    );
    assert!(
        took >= deadline,
        "closed after {took:?}, before the {deadline:?} deadline"
    );
    assert!(
        took < deadline + Duration::from_secs(2),
        "closed only after {took:?}"
    );
    let report = proxy.stop();
    assert_eq!(
        report
            .counters
            .closed_request_timeout
            .load(Ordering::Relaxed),
        1
    );
    assert_eq!(report.counters.closed_idle.load(Ordering::Relaxed), 0);
}
