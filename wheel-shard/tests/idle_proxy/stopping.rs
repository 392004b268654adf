//! Stopping the proxy: with hostile connections open it returns promptly and ends every timer,
//! aborting its task closes every connection and cancels every timer, connections cut by a stop
//! are still counted, and the runtime stays free while the service shuts down.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use wheel_shard::{Config, TimerService};

use crate::harness::*;
use crate::idle_proxy::{Limits, Proxy};
use crate::redis_harness::*;
use crate::{common, idle_proxy, LOOPBACK};

/// Opens 30 connections through the proxy at `addr`, in every state a hostile client can leave
/// one in: 10 silent, 10 trickling a request nobody answers, 5 never reading a stream, 5
/// mid-conversation with an echo unread.
async fn open_hostile_connections(addr: SocketAddr) -> Vec<TcpStream> {
    let mut streams = Vec::new();
    for _ in 0..10 {
        streams.push(connect(addr).await);
    }
    for _ in 0..10 {
        let mut stream = scripted(addr, &[command::SILENT]).await;
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: ")
            .await
            .expect("send");
        streams.push(stream);
    }
    for _ in 0..5 {
        let mut stream = connect_small(addr).await;
        stream.write_all(&[command::STREAM]).await.expect("ask");
        streams.push(stream);
    }
    for _ in 0..5 {
        let mut stream = scripted(addr, &[command::ECHO]).await;
        round_trip(&mut stream, b"mid-conversation").await;
        stream.write_all(b"unread echo").await.expect("send");
        streams.push(stream);
    }
    streams
}

/// Stops the proxy with 30 hostile connections open (see [`open_hostile_connections`]).
/// Promise: it returns promptly, closes every client, and the service ends every timer: the
/// connections' timers are cancelled (none fired, none handed back unfired).
#[test]
fn stopping_with_hostile_connections_open_returns_promptly_and_ends_every_timer() {
    hostile(Duration::from_secs(20), || {
        let upstream = Upstream::start(Mode::Scripted);
        let limits = Limits {
            request_timeout: Some(Duration::from_secs(20)),
            ..Limits::new(Duration::from_secs(30))
        };
        let proxy = TestProxy::start(upstream.addr, limits);
        let counters = Arc::clone(&proxy.counters);
        let rt = runtime();
        let mut streams = block_on(&rt, Duration::from_secs(10), async {
            let streams = open_hostile_connections(proxy.addr).await;
            let open = until(Duration::from_secs(5), || {
                counters.open.load(Ordering::SeqCst) == 30
            })
            .await;
            assert!(open, "{:?}", proxy.tally());
            streams
        });
        let (report, took) = proxy.stop();
        println!("stopped with 30 hostile connections open in {took:?}");
        idle_proxy::print_report(&report);
        assert!(took < Duration::from_secs(2), "stopping took {took:?}");
        assert_balanced(&report.stats);
        assert_eq!(report.stats.fired, 0, "{}", ledger(&report.stats));
        assert_eq!(Tally::of(&report.counters).open, 0);
        block_on(&rt, Duration::from_secs(10), async {
            for stream in &mut streams {
                let closed = tokio::time::timeout(AT_ONCE, until_closed(stream)).await;
                assert!(
                    matches!(closed, Ok(Ok(_))),
                    "a client was not closed by the stop: {closed:?}"
                );
            }
        });
    });
}

/// The other way to stop in-process: abort the task running `run_until` (its future dropped),
/// with 30 hostile connections open. Promise: dropping a connection's task cancels its timers
/// (`ConnTimers` "dropping it cancels whatever has not fired"), so every client is closed at
/// once, the listener with them, and the service, still running, holds no timer; its own
/// shutdown then has nothing to hand back.
#[test]
fn aborting_the_proxy_task_closes_every_connection_and_cancels_every_timer() {
    hostile(Duration::from_secs(20), || {
        let upstream = Upstream::start(Mode::Scripted);
        let timers = common::service();
        let proxy_runtime = runtime();
        let limits = Limits {
            request_timeout: Some(Duration::from_secs(20)),
            ..Limits::new(Duration::from_secs(30))
        };
        let listen = SocketAddr::from((LOOPBACK, 0));
        let proxy = proxy_runtime
            .block_on(Proxy::bind(listen, upstream.addr, limits, timers.clone()))
            .expect("the proxy binds");
        let addr = proxy.local_addr().expect("local addr");
        let counters = proxy.counters();
        let task = proxy_runtime.spawn(proxy.run_until(std::future::pending()));
        let rt = runtime();
        block_on(&rt, Duration::from_secs(10), async {
            let mut streams = open_hostile_connections(addr).await;
            let open = until(Duration::from_secs(5), || {
                counters.open.load(Ordering::SeqCst) == 30
            })
            .await;
            assert!(open, "{:?}", Tally::of(&counters));
            task.abort();
            for stream in &mut streams {
                let closed = tokio::time::timeout(AT_ONCE, until_closed(stream)).await;
                assert!(
                    matches!(closed, Ok(Ok(_))),
                    "a client was not closed by the abort: {closed:?}"
                );
            }
            let refused = TcpStream::connect(addr).await;
            assert!(refused.is_err(), "the listener outlived the aborted proxy");
        });
        let quiet = common::eventually(Duration::from_secs(5), || {
            timers.stats().pending == 0 && counters.open.load(Ordering::SeqCst) == 0
        });
        let stats = timers.stats();
        assert!(quiet, "timers left after the abort: {}", ledger(&stats));
        assert_balanced(&stats);
        assert_eq!(stats.fired, 0, "{}", ledger(&stats));
        assert!(
            timers.shutdown().is_empty(),
            "the service handed timers back"
        );
    });
}

/// The same 30 connections cut by a stop. Promise (`Counters`): "accepted counts every
/// connection accept returned; each ends up in exactly one of the other counts, or is still
/// open" — so after the stop, with none open, the counts add up to `accepted`.
#[test]
fn connections_cut_by_a_stop_are_still_counted() {
    hostile(Duration::from_secs(20), || {
        let upstream = Upstream::start(Mode::Scripted);
        let proxy = TestProxy::start(upstream.addr, Limits::new(Duration::from_secs(30)));
        let counters = Arc::clone(&proxy.counters);
        let rt = runtime();
        let _streams = block_on(&rt, Duration::from_secs(10), async {
            let streams = open_hostile_connections(proxy.addr).await;
            let open = until(Duration::from_secs(5), || {
                counters.open.load(Ordering::SeqCst) == 30
            })
            .await;
            assert!(open, "{:?}", proxy.tally());
            streams
        });
        let (report, _) = proxy.stop();
        let tally = Tally::of(&report.counters);
        assert_eq!(tally.accepted, 30);
        assert_eq!(tally.stopped, 30, "{tally:?}");
        assert_eq!(
            tally.ended() + tally.open,
            tally.accepted,
            "connections counted nowhere after the stop: {tally:?}"
        );
    });
}

#[test]
fn stopping_leaves_the_runtime_free_while_the_service_shuts_down() {
    let _serial = serial();
    let streamer = Streamer::start(0);
    let busy = Duration::from_millis(1500);
    // One runtime thread: if the proxy blocked it in the service's shutdown, nothing else on
    // the runtime would run meanwhile.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let longest_gap = Arc::new(std::sync::Mutex::new(Duration::ZERO));
    let stopped_in = runtime.block_on(async {
        let timers = TimerService::new(Config::default()).expect("timer service");
        let limits = Limits::new(Duration::from_secs(30));
        let listen = SocketAddr::from((LOOPBACK, 0));
        let proxy = Proxy::bind(listen, streamer.addr, limits, timers.clone())
            .await
            .expect("proxy binds");
        // A callback that is running when the proxy stops: shutdown waits for it.
        let (running, is_running) = std::sync::mpsc::channel();
        timers
            .schedule(Duration::ZERO, move || {
                let _ = running.send(());
                std::thread::sleep(busy);
            })
            .expect("scheduled");
        is_running
            .recv_timeout(Duration::from_secs(5))
            .expect("the callback runs");
        let gap = Arc::clone(&longest_gap);
        let heartbeat = tokio::spawn(async move {
            let mut last = Instant::now();
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                let mut longest = gap.lock().expect("gap");
                *longest = (*longest).max(last.elapsed());
                last = Instant::now();
            }
        });
        // The heartbeat starts beating before the proxy stops.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let started = Instant::now();
        proxy.run_until(async {}).await;
        let stopped_in = started.elapsed();
        // Lets the heartbeat note the gap a blocked thread would have left.
        tokio::time::sleep(Duration::from_millis(50)).await;
        heartbeat.abort();
        stopped_in
    });
    let longest_gap = *longest_gap.lock().expect("gap");
    println!("stopped in {stopped_in:?}; the runtime's longest pause meanwhile {longest_gap:?}");
    assert!(
        stopped_in >= busy / 2,
        "stopped in {stopped_in:?}: shutdown did not wait for the running callback"
    );
    assert!(
        longest_gap < busy / 2,
        "the runtime stood still for {longest_gap:?} while the service shut down"
    );
}
