//! `--max-connections` and the accept loop: a flood beyond the cap is refused at once and the cap
//! frees up (a client reconnecting after a close is not refused), refusals are counted, a full
//! ring refuses a connection at once instead of blocking the accept loop, and accept errors
//! (out of descriptors) back off without spinning.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser as _;
use tokio::net::TcpStream;
use wheel_shard::{Config, TimerService};

use crate::harness::*;
use crate::idle_proxy::{Args, Limits, Proxy};
use crate::redis_harness::*;
use crate::{common, idle_proxy, LOOPBACK};

/// A flood of 200 connects from 20 tasks at a proxy with `--max-connections 8`, all 8 taken.
/// Promise: each extra one is closed at once and counted as refused, before it costs an
/// upstream connection; the 8 keep working throughout; once some close, their places are
/// served again, and the cap still holds.
#[test]
fn a_flood_beyond_max_connections_is_refused_at_once_and_the_cap_frees_up() {
    hostile(Duration::from_secs(20), || {
        let upstream = Upstream::start(Mode::Scripted);
        let limits = Limits {
            max_connections: 8,
            ..Limits::new(Duration::from_secs(10))
        };
        let proxy = TestProxy::start(upstream.addr, limits);
        let addr = proxy.addr;
        let rt = runtime();
        block_on(&rt, Duration::from_secs(15), async {
            let mut served = Vec::new();
            for n in 0..8 {
                let mut stream = scripted(addr, &[command::ECHO]).await;
                round_trip(&mut stream, format!("served {n}").as_bytes()).await;
                served.push(stream);
            }
            let flood: Vec<_> = (0..20)
                .map(|_| {
                    tokio::spawn(async move {
                        for _ in 0..10 {
                            let mut extra = connect(addr).await;
                            let started = Instant::now();
                            let closed = closed_within(&mut extra, AT_ONCE).await;
                            assert!(closed, "an extra connection stayed open");
                            assert!(started.elapsed() < AT_ONCE);
                        }
                    })
                })
                .collect();
            // The served ones keep working while the flood goes on.
            for round in 0..5 {
                for stream in &mut served {
                    round_trip(stream, format!("during {round}").as_bytes()).await;
                }
            }
            for task in flood {
                task.await.expect("flood task");
            }
            let refused = until(Duration::from_secs(5), || proxy.tally().refused == 200).await;
            assert!(refused, "{:?}", proxy.tally());
            // Four hang up: four places free up.
            for stream in served.drain(..4) {
                hang_up(stream).await;
            }
            let freed = until(Duration::from_secs(5), || proxy.tally().open == 4).await;
            assert!(
                freed,
                "closed connections still hold their places: {:?}",
                proxy.tally()
            );
            for n in 0..4 {
                let mut stream = scripted(addr, &[command::ECHO]).await;
                round_trip(&mut stream, format!("again {n}").as_bytes()).await;
                served.push(stream);
            }
            let mut extra = connect(addr).await;
            assert!(
                closed_within(&mut extra, AT_ONCE).await,
                "a ninth connection was served"
            );
            for stream in served {
                hang_up(stream).await;
            }
        });
        expect_tally(
            &proxy,
            Tally {
                accepted: 8 + 200 + 4 + 1,
                refused: 201,
                normal: 12,
                ..Tally::default()
            },
        );
        // The startup probe and the 12 served: none for a refused one. (The probe's connect
        // returns before the upstream counts it, so the count settles now.)
        common::eventually(Duration::from_secs(2), || upstream.accepted() >= 13);
        assert_eq!(
            upstream.accepted(),
            1 + 12,
            "refused connections cost an upstream connection"
        );
        assert_no_timer_left(&proxy);
        proxy.stop();
    });
}

/// With `--max-connections 1` and the machine loaded (spinning threads, twice the cores), a
/// client whose connection the proxy ended (its upstream reset it) reconnects the moment it
/// sees the close, a thousand times. Promise: the cap counts open connections, so a connection
/// the proxy has closed holds no place and the reconnect is served, never refused.
#[test]
fn a_client_reconnecting_after_the_proxy_closed_it_is_not_refused_over_the_cap() {
    hostile(Duration::from_secs(30), || {
        let upstream = Upstream::start(Mode::Scripted);
        let limits = Limits {
            max_connections: 1,
            ..Limits::new(Duration::from_secs(5))
        };
        let proxy = TestProxy::start(upstream.addr, limits);
        let load = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let cores = std::thread::available_parallelism().map_or(2, usize::from);
        let hogs: Vec<_> = (0..2 * cores)
            .map(|_| {
                let load = Arc::clone(&load);
                std::thread::spawn(move || {
                    while load.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        let rt = runtime();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            block_on(&rt, Duration::from_secs(25), async {
                for _ in 0..1000 {
                    let mut stream = scripted(proxy.addr, &[command::RESET]).await;
                    until_closed(&mut stream).await.expect("the close");
                }
            })
        }));
        load.store(false, Ordering::Relaxed);
        for hog in hogs {
            hog.join().expect("load thread");
        }
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
        let settled = common::eventually(Duration::from_secs(5), || {
            let tally = proxy.tally();
            tally.accepted == 1000 && tally.open == 0
        });
        let tally = proxy.tally();
        println!("1000 reconnects after the proxy's close: {tally:?}");
        assert!(settled, "{tally:?}");
        assert_eq!(tally.ended(), 1000, "{tally:?}");
        assert_eq!(
            tally.refused, 0,
            "reconnects refused over the cap after the proxy had closed their predecessor"
        );
    });
}

#[test]
fn connections_over_max_connections_are_refused_and_counted() {
    let _serial = serial();
    let streamer = Streamer::start(0);
    let limits = Limits {
        max_connections: 3,
        ..Limits::new(Duration::from_secs(30))
    };
    let proxy = RunningProxy::start(streamer.addr, limits);
    let counters = Arc::clone(&proxy.counters);
    let count = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let addr = proxy.addr;
    client_runtime().block_on(async {
        let body = async {
            let mut served = Vec::new();
            for _ in 0..3 {
                served.push(TcpStream::connect(addr).await.expect("connect"));
            }
            let all_open = || count(&counters.open) == 3;
            while !all_open() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            for _ in 0..2 {
                let mut refused = TcpStream::connect(addr).await.expect("connect");
                assert!(
                    closed_soon(&mut refused).await,
                    "a fourth connection is served"
                );
            }
            for open in &mut served {
                assert!(!closed_soon(open).await, "a served connection was closed");
            }
            // A closed connection makes room for a new one.
            drop(served.pop());
            while count(&counters.open) != 2 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let mut again = TcpStream::connect(addr).await.expect("connect");
            assert!(!closed_soon(&mut again).await, "refused with room to spare");
            served.push(again);
            served
        };
        tokio::time::timeout(Duration::from_secs(30), body)
            .await
            .expect("the clients finish within 30 s")
    });
    let report = proxy.stop();
    let counters = &report.counters;
    assert_eq!(count(&counters.refused), 2);
    assert_eq!(
        count(&counters.accepted),
        6,
        "refused ones are accepted first"
    );
    assert_eq!(count(&counters.failed), 0);
    assert_eq!(count(&counters.open), 0, "stopping closes the rest");
}

#[test]
fn max_connections_and_the_send_buffer_have_defaults_and_zero_connections_is_refused() {
    let base = [
        "idle_proxy",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        "127.0.0.1:6379",
        "--idle",
        "30s",
    ];
    let args = Args::try_parse_from(base).expect("valid arguments");
    assert_eq!(args.max_connections, idle_proxy::DEFAULT_MAX_CONNECTIONS);
    assert_eq!(
        args.client_send_buffer,
        idle_proxy::DEFAULT_CLIENT_SEND_BUFFER
    );
    let given = [
        &base[..],
        &["--max-connections", "500", "--client-send-buffer", "0"],
    ]
    .concat();
    let args = Args::try_parse_from(given).expect("valid arguments");
    assert_eq!((args.max_connections, args.client_send_buffer), (500, 0));
    let zero = [&base[..], &["--max-connections", "0"]].concat();
    let error = Args::try_parse_from(zero).expect_err("0 connections accepted");
    assert!(error.to_string().contains("at least 1"), "{error}");
}

#[test]
fn a_full_ring_refuses_a_connection_at_once_instead_of_blocking_the_accept_loop() {
    let _serial = serial();
    let streamer = Streamer::start(0);
    let timers = common::service_with_a_small_ring(Duration::from_secs(4), Duration::from_secs(30));
    let idle = Limits::new(Duration::from_secs(30));
    let proxy = RunningProxy::start_with(streamer.addr, idle, timers.clone());
    common::fill_the_ring(&timers);
    let started = Instant::now();
    let closed = client_runtime().block_on(async {
        let mut client = TcpStream::connect(proxy.addr).await.expect("connect");
        closed_soon(&mut client).await
    });
    let took = started.elapsed();
    let report = proxy.stop();
    assert!(
        closed,
        "not refused at once with the ring full (after {took:?}): the accept loop waited for room"
    );
    assert_eq!(report.counters.failed.load(Ordering::Relaxed), 1);
}

// The accept-error test lowers the descriptor limit with util-linux's `prlimit`: Linux only.

/// Set in the child process of the accept-error test.
#[cfg(target_os = "linux")]
const OUT_OF_DESCRIPTORS_CHILD: &str = "IDLE_PROXY_TEST_OUT_OF_DESCRIPTORS";

/// Lowers this process's open-file limit (soft) so that the next descriptor it opens fails
/// with EMFILE: the limit becomes the lowest free descriptor number. A descriptor another
/// thread closes in between (a thread of the runtime or of the service that read a file as it
/// started) leaves a hole below the limit; the holes are opened and returned, to be held
/// while the test runs.
#[cfg(target_os = "linux")]
fn run_out_of_descriptors() -> Vec<std::fs::File> {
    use std::os::fd::AsRawFd;
    let lowest_free = std::fs::File::open("/dev/null")
        .expect("open /dev/null")
        .as_raw_fd();
    let pid = std::process::id().to_string();
    let status = Command::new("prlimit")
        .args(["--pid", &pid, &format!("--nofile={lowest_free}:")])
        .status()
        .expect("run prlimit");
    assert!(status.success(), "prlimit failed: {status}");
    let holes: Vec<_> = std::iter::from_fn(|| std::fs::File::open("/dev/null").ok())
        .take(1024)
        .collect();
    assert!(holes.len() < 1024, "the limit does not hold");
    assert!(
        std::fs::File::open("/dev/null").is_err(),
        "a descriptor could still be opened"
    );
    holes
}

#[test]
#[cfg(target_os = "linux")]
fn accept_errors_back_off_without_spinning_when_the_service_is_shut_down() {
    if std::env::var_os(OUT_OF_DESCRIPTORS_CHILD).is_some() {
        return accept_errors_out_of_descriptors();
    }
    // The descriptor limit is per process: lowering it here would fail the tests running
    // alongside. A child process runs this test alone.
    let _serial = serial();
    let exe = std::env::current_exe().expect("the test binary");
    let name = &common::exact_test_name(
        "accept_errors_back_off_without_spinning_when_the_service_is_shut_down",
    );
    let out = run_bounded(
        Command::new(exe)
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .env(OUT_OF_DESCRIPTORS_CHILD, "1"),
        Duration::from_secs(60),
    );
    let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    println!("{said}");
    assert!(out.status.success(), "the child failed: {said}");
    assert!(
        said.contains("accept failed"),
        "the child never ran out: {said}"
    );
}

/// The child's part: the proxy's accept fails (EMFILE) with a shut-down timer service, which
/// refuses the back-off's sleep; the accept loop must still wait between attempts.
#[cfg(target_os = "linux")]
fn accept_errors_out_of_descriptors() {
    // The upstream is a listener that never accepts: the proxy's upstream check connects (the
    // kernel completes the handshake) and no thread of this process holds, then closes, a
    // descriptor for it. A `Streamer` closes its end of the check's connection whenever its
    // threads get to it, which under load can be after the limit is lowered: the freed
    // descriptor then lets the proxy accept the client, and nothing is left to fail.
    let upstream = StdListener::bind((LOOPBACK, 0)).expect("bind the upstream");
    let upstream_addr = upstream.local_addr().expect("local addr");
    let window = Duration::from_secs(1);
    let (errors, accepted) = client_runtime().block_on(async {
        let timers = TimerService::new(Config::default()).expect("timer service");
        let listen = SocketAddr::from((LOOPBACK, 0));
        let limits = Limits::new(Duration::from_secs(30));
        let proxy = Proxy::bind(listen, upstream_addr, limits, timers.clone())
            .await
            .expect("proxy binds");
        let addr = proxy.local_addr().expect("local addr");
        let counters = proxy.counters();
        timers.shutdown();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let proxy = tokio::spawn(proxy.run_until(async { stopped.await.unwrap_or(()) }));
        // Its descriptor is taken now; connecting needs none.
        let client = tokio::net::TcpSocket::new_v4().expect("client socket");
        let _holes = run_out_of_descriptors();
        let _client = client.connect(addr).await.expect("connect");
        tokio::time::sleep(window).await;
        let errors = counters.accept_errors.load(Ordering::Relaxed);
        let accepted = counters.accepted.load(Ordering::Relaxed);
        let _ = stop.send(());
        proxy.await.expect("the proxy stops");
        (errors, accepted)
    });
    // The back-off is 50 ms: about 20 in a second. A spinning loop makes millions.
    println!("accept failed {errors} times in {window:?}");
    assert!(
        errors >= 2,
        "{errors} accept errors ({accepted} accepted): the test did not run out of descriptors"
    );
    assert!(
        errors <= 60,
        "{errors} accept errors in {window:?}: the loop spins"
    );
}
