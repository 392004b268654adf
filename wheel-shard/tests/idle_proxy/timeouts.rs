//! The proxy's idle and request timeouts: a trickled request is cut at the request timeout after
//! its first byte, a silent client after idle and not by the request timeout, a client that keeps
//! talking (or reads slowly but steadily) stays open, a slow upstream is cut at the request
//! timeout, and in virtual time a connection closes at exactly its idle timeout.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wheel_shard::{Config, TimerService};

use crate::harness::*;
use crate::idle_proxy::Limits;
use crate::redis_harness::*;

// ---- slowloris ----

/// Slowloris: a request trickled a byte every 50 ms to an upstream that never answers. Promise:
/// `--request-timeout` closes it that long after its first unanswered byte (not after the
/// accept, not pushed back by the trickle), and it counts as a request timeout.
#[test]
fn a_trickled_request_is_closed_at_the_request_timeout_after_its_first_byte() {
    hostile(Duration::from_secs(15), || {
        let upstream = Upstream::start(Mode::Scripted);
        let deadline = Duration::from_millis(600);
        let limits = Limits {
            request_timeout: Some(deadline),
            ..Limits::new(Duration::from_secs(5))
        };
        let proxy = TestProxy::start(upstream.addr, limits);
        let rt = runtime();
        let (took, trickled) = block_on(&rt, Duration::from_secs(10), async {
            let stream = connect(proxy.addr).await;
            // Quiet first: the deadline runs from the first byte, not from the accept.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let (mut read, mut write) = stream.into_split();
            let trickled = Arc::new(AtomicUsize::new(0));
            let sent = Arc::clone(&trickled);
            let first_byte = Instant::now();
            let trickle = tokio::spawn(async move {
                write.write_all(&[command::SILENT]).await?;
                loop {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    write.write_all(b"x").await?;
                    sent.fetch_add(1, Ordering::SeqCst);
                }
                #[allow(unreachable_code)]
                Ok::<_, io::Error>(())
            });
            let left = until_closed(&mut read).await.expect("the close");
            let took = first_byte.elapsed();
            let trickled = trickled.load(Ordering::SeqCst);
            trickle.abort();
            assert_eq!(left, 0, "the silent upstream answered");
            (took, trickled)
        });
        assert_within("slowloris closed after its first byte", took, deadline);
        assert!(
            trickled >= 5,
            "only {trickled} bytes trickled in before the close"
        );
        ends_with(
            proxy,
            Tally {
                accepted: 1,
                request_timeout: 1,
                ..Tally::default()
            },
        );
    });
}

/// Slowloris without `--request-timeout`: a byte every 100 ms for three idle periods. Promise:
/// only `--idle` applies, so the trickle keeps it open; once the trickle stops, it is closed
/// `--idle` after the last byte, as idle.
#[test]
fn without_a_request_timeout_a_trickle_stays_open_until_it_stops_for_idle() {
    hostile(Duration::from_secs(15), || {
        let upstream = Upstream::start(Mode::Scripted);
        let idle = Duration::from_millis(500);
        let proxy = TestProxy::start(upstream.addr, Limits::new(idle));
        let rt = runtime();
        let quiet_for = block_on(&rt, Duration::from_secs(10), async {
            let stream = scripted(proxy.addr, &[command::SILENT]).await;
            let (mut read, mut write) = stream.into_split();
            let closed = tokio::spawn(async move {
                until_closed(&mut read).await.expect("the close");
                Instant::now()
            });
            let mut last = Instant::now();
            for _ in 0..15 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                last = Instant::now();
                write.write_all(b"x").await.expect("still open: trickle");
                assert!(!closed.is_finished(), "closed while the client trickled");
            }
            closed.await.expect("reader task") - last
        });
        assert_within("closed after the last trickled byte", quiet_for, idle);
        ends_with(
            proxy,
            Tally {
                accepted: 1,
                idle: 1,
                ..Tally::default()
            },
        );
    });
}

// ---- idle and busy clients ----

/// Twenty clients connect and send nothing. Promise: each is closed `--idle` after the accept
/// (measured from before connect), counted as idle, and a short `--request-timeout` does not
/// apply to a client that sent no byte.
#[test]
fn silent_clients_are_closed_after_idle_and_not_by_the_request_timeout() {
    hostile(Duration::from_secs(15), || {
        let upstream = Upstream::start(Mode::Scripted);
        let idle = Duration::from_millis(600);
        let limits = Limits {
            request_timeout: Some(Duration::from_millis(100)),
            ..Limits::new(idle)
        };
        let proxy = TestProxy::start(upstream.addr, limits);
        let addr = proxy.addr;
        let rt = runtime();
        let times = block_on(&rt, Duration::from_secs(10), async move {
            let clients: Vec<_> = (0..20)
                .map(|_| {
                    tokio::spawn(async move {
                        let before = Instant::now();
                        let mut stream = connect(addr).await;
                        let left = until_closed(&mut stream).await.expect("the close");
                        assert_eq!(left, 0, "data on a silent connection");
                        before.elapsed()
                    })
                })
                .collect();
            let mut times = Vec::new();
            for client in clients {
                times.push(client.await.expect("client task"));
            }
            times
        });
        let longest = times.iter().max().copied().unwrap_or_default();
        let shortest = times.iter().min().copied().unwrap_or_default();
        assert_within("the first silent client closed", shortest, idle);
        assert_within("the last silent client closed", longest, idle);
        ends_with(
            proxy,
            Tally {
                accepted: 20,
                idle: 20,
                ..Tally::default()
            },
        );
    });
}

/// A client that talks every 100 ms for four idle periods, each message echoed. Promise: bytes
/// moving keep it open past `--idle` and past `--request-timeout` (each answer ends its
/// request's deadline); its hang-up then ends the connection as closed by the peers.
#[test]
fn a_client_that_keeps_talking_stays_open_and_its_hang_up_is_normal() {
    hostile(Duration::from_secs(15), || {
        let upstream = Upstream::start(Mode::Scripted);
        let idle = Duration::from_millis(400);
        let limits = Limits {
            request_timeout: Some(Duration::from_millis(300)),
            ..Limits::new(idle)
        };
        let proxy = TestProxy::start(upstream.addr, limits);
        let rt = runtime();
        block_on(&rt, Duration::from_secs(10), async {
            let mut stream = scripted(proxy.addr, &[command::ECHO]).await;
            round_trip(&mut stream, b"hello").await;
            let start = Instant::now();
            let mut n = 0;
            while start.elapsed() < idle * 4 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                round_trip(&mut stream, format!("ping {n}").as_bytes()).await;
                n += 1;
            }
            hang_up(stream).await;
        });
        expect_tally(
            &proxy,
            Tally {
                accepted: 1,
                normal: 1,
                ..Tally::default()
            },
        );
        let stats = assert_no_timer_left(&proxy);
        assert_eq!(stats.fired, 0, "a timer fired: {}", ledger(&stats));
        proxy.stop();
    });
}

/// A client with a small receive buffer that asks the streamer for data and then reads it
/// `chunk` bytes every `every` for `busy`: slow, but never stalled for long. Returns the bytes
/// it read; an EOF or error before `busy` is over is an error.
async fn read_slowly(
    proxy: SocketAddr,
    chunk: usize,
    every: Duration,
    busy: Duration,
) -> io::Result<(TcpStream, usize)> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    // Small, so what the client holds unread is small and the proxy's writes block early.
    socket.set_recv_buffer_size(4096)?;
    let mut stream = socket.connect(proxy).await?;
    stream.write_all(b"x").await?;
    let start = Instant::now();
    let mut buf = vec![0u8; chunk];
    let mut read = 0;
    while start.elapsed() < busy {
        tokio::time::sleep(every).await;
        match stream.read(&mut buf).await? {
            0 => {
                let at = start.elapsed();
                return Err(io::Error::other(format!(
                    "closed after {at:?}, having read {read} bytes"
                )));
            }
            n => read += n,
        }
    }
    Ok((stream, read))
}

#[test]
fn a_slow_but_active_reader_stays_open_while_an_idle_one_closes() {
    let _serial = serial();
    let streamer = Streamer::start(64 << 20);
    let idle = Duration::from_millis(1500);
    let proxy = RunningProxy::start(streamer.addr, Limits::new(idle));
    let counters = Arc::clone(&proxy.counters);
    // 8 KiB/s: each 16 KiB buffer the proxy forwards takes the reader 2 s, longer than the idle
    // timeout, while the kernel reports the proxy's partial writes every ~6 KiB (0.75 s).
    let (chunk, every, busy) = (1024, Duration::from_millis(125), idle * 4);
    let (slow, quiet) = client_runtime()
        .block_on(async {
            let body = async {
                let idler = TcpStream::connect(proxy.addr).await?;
                let (slow, read) = read_slowly(proxy.addr, chunk, every, busy).await?;
                println!("the slow reader read {read} bytes in {busy:?}");
                Ok::<_, io::Error>((slow, idler))
            };
            tokio::time::timeout(Duration::from_secs(30), body)
                .await
                .expect("the clients finish within 30 s")
        })
        .expect("the slow reader stays open while it reads");
    let count = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    assert_eq!(
        count(&counters.closed_idle),
        1,
        "only the connection that never moved a byte closed idle"
    );
    assert_eq!(count(&counters.open), 1, "the slow reader is open");
    // Once it stops reading, the slow reader is idle too: its writes make no progress.
    assert!(
        eventually(idle + Duration::from_secs(5), || count(
            &counters.closed_idle
        ) == 2),
        "the slow reader, no longer reading, was not closed"
    );
    drop((slow, quiet));
    let report = proxy.stop();
    assert_eq!(count(&report.counters.failed), 0);
}

#[test]
fn an_idle_connection_closes_at_exactly_its_idle_timeout_in_virtual_time() {
    let _serial = serial();
    let streamer = Streamer::start(0);
    let (timers, clock) = TimerService::with_manual_clock(Config {
        shards: 2,
        executor_threads: 2,
        pin_threads: false,
        ..Config::default()
    })
    .expect("valid config");
    let idle = Duration::from_secs(30);
    let proxy = RunningProxy::start_with(streamer.addr, Limits::new(idle), timers);
    let counters = Arc::clone(&proxy.counters);
    let count = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let runtime = client_runtime();
    let mut client = runtime
        .block_on(TcpStream::connect(proxy.addr))
        .expect("connect");
    // Accepted: its idle timer runs from this virtual instant.
    assert!(eventually(Duration::from_secs(10), || count(
        &counters.open
    ) == 1));
    let real = Instant::now();
    clock.advance(idle - Duration::from_millis(1));
    assert!(
        !runtime.block_on(closed_soon(&mut client)),
        "closed before its idle timeout"
    );
    assert_eq!(count(&counters.closed_idle), 0);
    clock.advance(Duration::from_millis(1));
    assert!(
        runtime.block_on(closed_soon(&mut client)),
        "still open at its idle timeout"
    );
    assert_eq!(count(&counters.closed_idle), 1);
    assert!(
        real.elapsed() < Duration::from_secs(10),
        "30 virtual seconds took {:?} of real time",
        real.elapsed()
    );
    drop(client);
    let report = proxy.stop();
    assert_eq!(count(&report.counters.failed), 0);
}

// ---- slow upstreams ----

/// An upstream slower than `--request-timeout` and one faster. Promise: answers within the
/// deadline keep a connection open over several requests (each answer ends its deadline); a
/// request answered later than the deadline gets its client closed at the deadline, counted
/// as a request timeout.
#[test]
fn a_slow_upstream_is_cut_at_the_request_timeout_and_a_timely_one_is_not() {
    hostile(Duration::from_secs(15), || {
        let upstream = Upstream::start(Mode::Scripted);
        let deadline = Duration::from_millis(400);
        let limits = Limits {
            request_timeout: Some(deadline),
            ..Limits::new(Duration::from_secs(3))
        };
        let proxy = TestProxy::start(upstream.addr, limits);
        let rt = runtime();
        let took = block_on(&rt, Duration::from_secs(10), async {
            // Answers each read 150 ms later.
            let mut timely = scripted(proxy.addr, &[command::SLOW_ECHO, 15]).await;
            for n in 0..6 {
                round_trip(&mut timely, format!("request {n}").as_bytes()).await;
            }
            hang_up(timely).await;
            // Answers 1 s later.
            let sent = Instant::now();
            let mut late = scripted(proxy.addr, &[command::SLOW_ECHO, 100, b'?']).await;
            let left = until_closed(&mut late).await.expect("the close");
            assert_eq!(left, 0, "the late answer arrived");
            sent.elapsed()
        });
        assert_within("a request answered too late closed", took, deadline);
        ends_with(
            proxy,
            Tally {
                accepted: 2,
                normal: 1,
                request_timeout: 1,
                ..Tally::default()
            },
        );
    });
}

/// A request left unfinished, to an upstream that answers whole lines. The proxy does not
/// parse requests, so its promise (`--help`) is about bytes: `--request-timeout` closes the
/// client that long after "the first byte it sent since upstream last sent anything".
/// - `lone\n`, answered, then `tw` never finished: closed at the request timeout after the `t`.
/// - `lone\ntw` in one burst: upstream's `one\n` counts as the answer to all of it, so the
///   documented limit applies: the unfinished `tw` is left to `--idle`, counted from the answer.
#[test]
fn an_unfinished_request_is_timed_from_its_first_byte_after_the_last_answer() {
    hostile(Duration::from_secs(15), || {
        let upstream = Upstream::start(Mode::Scripted);
        let deadline = Duration::from_millis(400);
        let idle = Duration::from_millis(1500);
        let limits = Limits {
            request_timeout: Some(deadline),
            ..Limits::new(idle)
        };
        let proxy = TestProxy::start(upstream.addr, limits);
        let rt = runtime();
        let (after_answer, same_burst) = block_on(&rt, Duration::from_secs(10), async {
            let mut answer = [0u8; 4];
            let mut stream = scripted(proxy.addr, b"lone\n").await;
            stream.read_exact(&mut answer).await.expect("the answer");
            assert_eq!(&answer, b"one\n");
            let sent = Instant::now();
            stream
                .write_all(b"tw")
                .await
                .expect("the unfinished request");
            assert_eq!(until_closed(&mut stream).await.expect("the close"), 0);
            let after_answer = sent.elapsed();

            let mut stream = scripted(proxy.addr, b"lone\ntw").await;
            stream.read_exact(&mut answer).await.expect("the answer");
            assert_eq!(&answer, b"one\n");
            let answered = Instant::now();
            assert_eq!(until_closed(&mut stream).await.expect("the close"), 0);
            (after_answer, answered.elapsed())
        });
        assert_within("unfinished after the answer", after_answer, deadline);
        assert_within("unfinished in the answered burst", same_burst, idle);
        ends_with(
            proxy,
            Tally {
                accepted: 2,
                request_timeout: 1,
                idle: 1,
                ..Tally::default()
            },
        );
    });
}
