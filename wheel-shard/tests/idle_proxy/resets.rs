//! Half-closes, resets and unreachable upstreams: each ends or fails only its own connection, at
//! once where the peer said so, and leaves no timer behind.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::harness::*;
use crate::idle_proxy::Limits;
use crate::{common, LOOPBACK};

/// Half-close both ways: a client that shuts down its write side before the upstream answers
/// (which answers only at EOF), and an upstream that answers and FINs first while the client
/// still has bytes to send. Promise: the answer arrives, late bytes still reach the upstream,
/// and each connection ends as closed by the peers once both sides are done.
#[test]
fn half_closed_connections_still_deliver_and_end_normally() {
    hostile(Duration::from_secs(15), || {
        let upstream = Upstream::start(Mode::Scripted);
        let limits = Limits {
            request_timeout: Some(Duration::from_secs(3)),
            ..Limits::new(Duration::from_secs(3))
        };
        let proxy = TestProxy::start(upstream.addr, limits);
        let rt = runtime();
        block_on(&rt, Duration::from_secs(10), async {
            // The client half-closes first.
            let mut stream = scripted(proxy.addr, &[command::AT_EOF]).await;
            stream.write_all(b"a question").await.expect("send");
            stream.shutdown().await.expect("half-close");
            let mut answer = Vec::new();
            stream
                .read_to_end(&mut answer)
                .await
                .expect("the answer, then EOF");
            assert_eq!(answer, b"a question");

            // The upstream half-closes first.
            let mut stream = scripted(proxy.addr, &[command::FIN_FIRST]).await;
            let mut bye = Vec::new();
            stream.read_to_end(&mut bye).await.expect("bye, then EOF");
            assert_eq!(bye, b"bye");
            stream.write_all(b"late").await.expect("send after the FIN");
            stream.shutdown().await.expect("half-close");
            let got = until(Duration::from_secs(5), || {
                upstream.counts.after_fin.load(Ordering::SeqCst) == 4
            })
            .await;
            assert!(got, "the bytes sent after upstream's FIN did not arrive");
        });
        ends_with(
            proxy,
            Tally {
                accepted: 2,
                normal: 2,
                ..Tally::default()
            },
        );
    });
}

/// Resets mid-transfer: a client that resets while the upstream streams to it, and an upstream
/// that resets after the client's first byte, while another client talks throughout. Promise:
/// each reset ends only its own connection, promptly, counted as failed; the other client is
/// served before, between and after.
#[test]
fn resets_from_either_side_fail_only_their_own_connection() {
    hostile(Duration::from_secs(15), || {
        let upstream = Upstream::start(Mode::Scripted);
        let proxy = TestProxy::start(upstream.addr, Limits::new(Duration::from_secs(5)));
        let rt = runtime();
        block_on(&rt, Duration::from_secs(10), async {
            let mut bystander = scripted(proxy.addr, &[command::ECHO]).await;
            round_trip(&mut bystander, b"before").await;

            let mut streamed = scripted(proxy.addr, &[command::STREAM]).await;
            let mut buf = vec![0u8; 64 * 1024];
            let mut got = 0;
            while got < 256 * 1024 {
                got += streamed.read(&mut buf).await.expect("streamed bytes");
            }
            reset(streamed);
            let failed = until(AT_ONCE, || proxy.tally().failed == 1).await;
            assert!(failed, "a client's reset: {:?}", proxy.tally());
            round_trip(&mut bystander, b"between").await;

            let mut reset_by_upstream = scripted(proxy.addr, &[command::RESET]).await;
            assert!(
                closed_within(&mut reset_by_upstream, AT_ONCE).await,
                "the upstream's reset did not reach the client"
            );
            round_trip(&mut bystander, b"after").await;
            hang_up(bystander).await;
        });
        ends_with(
            proxy,
            Tally {
                accepted: 3,
                failed: 2,
                normal: 1,
                ..Tally::default()
            },
        );
    });
}

/// Clients that reset right after connecting, before a byte moved. Promise: each ends at once
/// (as failed, or as closed by the peers when the proxy saw only an EOF), none leaves a timer,
/// and the proxy keeps serving.
#[test]
fn clients_that_reset_at_once_leave_nothing_behind() {
    hostile(Duration::from_secs(15), || {
        let upstream = Upstream::start(Mode::Scripted);
        let proxy = TestProxy::start(upstream.addr, Limits::new(Duration::from_secs(5)));
        let rt = runtime();
        block_on(&rt, Duration::from_secs(10), async {
            for _ in 0..20 {
                reset(connect(proxy.addr).await);
            }
            let ended = until(Duration::from_secs(5), || {
                let tally = proxy.tally();
                tally.accepted == 20 && tally.open == 0
            })
            .await;
            assert!(ended, "resets still open: {:?}", proxy.tally());
            let mut stream = scripted(proxy.addr, &[command::ECHO]).await;
            round_trip(&mut stream, b"still serving").await;
            hang_up(stream).await;
        });
        // The client's EOF is the proxy's half-close; the connection ends just after.
        common::eventually(Duration::from_secs(5), || proxy.tally().open == 0);
        let tally = proxy.tally();
        println!("20 resets at once: {tally:?}");
        assert_eq!(tally.failed + tally.normal, 21, "{tally:?}");
        assert_eq!(tally.ended(), 21, "{tally:?}");
        assert_no_timer_left(&proxy);
        proxy.stop();
    });
}

/// Upstreams that reset, or close, every connection the moment they accept it. Promise: each
/// client is closed at once and the connection counted (a reset as failed; a close, once the
/// client hangs up too, as closed by the peers), with no timer left.
#[test]
fn upstreams_that_reset_or_close_at_once_close_their_clients_at_once() {
    hostile(Duration::from_secs(15), || {
        let rt = runtime();
        for (mode, expected) in [
            (
                Mode::ResetAtOnce,
                Tally {
                    accepted: 10,
                    failed: 10,
                    ..Tally::default()
                },
            ),
            (
                Mode::CloseAtOnce,
                Tally {
                    accepted: 10,
                    normal: 10,
                    ..Tally::default()
                },
            ),
        ] {
            let upstream = Upstream::start(mode);
            let proxy = TestProxy::start(upstream.addr, Limits::new(Duration::from_secs(5)));
            block_on(&rt, Duration::from_secs(10), async {
                for _ in 0..10 {
                    let mut stream = connect(proxy.addr).await;
                    assert!(
                        closed_within(&mut stream, AT_ONCE).await,
                        "{mode:?}: the client stayed open"
                    );
                }
            });
            expect_tally(&proxy, expected);
            assert_no_timer_left(&proxy);
            proxy.stop();
        }
    });
}

/// The upstream stops listening (connects refused) while a client is connected through it, and
/// later listens again. Promise: each new client is closed at once, counted as failed; the
/// client connected before goes on; once the upstream is back, new clients are served.
#[test]
fn an_upstream_with_nothing_listening_fails_new_clients_and_spares_old_ones() {
    hostile(Duration::from_secs(15), || {
        let mut upstream = Upstream::start(Mode::Scripted);
        let proxy = TestProxy::start(upstream.addr, Limits::new(Duration::from_secs(5)));
        let addr = proxy.addr;
        let rt = runtime();
        let mut old = block_on(&rt, Duration::from_secs(5), async move {
            let mut old = scripted(addr, &[command::ECHO]).await;
            round_trip(&mut old, b"before").await;
            old
        });
        upstream.stop_listening();
        block_on(&rt, Duration::from_secs(10), async {
            for _ in 0..5 {
                let mut refused = connect(proxy.addr).await;
                assert!(
                    closed_within(&mut refused, AT_ONCE).await,
                    "a client of an upstream with nothing listening stayed open"
                );
            }
            round_trip(&mut old, b"while nothing listens").await;
        });
        expect_tally(
            &proxy,
            Tally {
                accepted: 6,
                failed: 5,
                open: 1,
                ..Tally::default()
            },
        );
        upstream.listen_again();
        block_on(&rt, Duration::from_secs(10), async {
            let mut new = scripted(proxy.addr, &[command::ECHO]).await;
            round_trip(&mut new, b"back").await;
            round_trip(&mut old, b"still here").await;
            hang_up(new).await;
            hang_up(old).await;
        });
        ends_with(
            proxy,
            Tally {
                accepted: 7,
                failed: 5,
                normal: 2,
                ..Tally::default()
            },
        );
    });
}

/// An upstream that never accepts, its accept queue full, so the proxy's connects hang. Promise:
/// the client is still closed `--idle` after the accept, as idle (its bytes never reached an
/// upstream, so no request deadline runs); stopping the proxy with a connect hanging returns
/// promptly with no timer left.
#[test]
fn an_upstream_that_never_accepts_leaves_its_clients_to_the_idle_timer() {
    hostile(Duration::from_secs(20), || {
        let rt = runtime();
        let (listener, addr) = rt.block_on(async {
            let socket = TcpSocket::new_v4().expect("socket");
            socket.bind(SocketAddr::from((LOOPBACK, 0))).expect("bind");
            let addr = socket.local_addr().expect("addr");
            (socket.listen(1).expect("listen"), addr)
        });
        let idle = Duration::from_millis(600);
        let limits = Limits {
            request_timeout: Some(Duration::from_millis(100)),
            ..Limits::new(idle)
        };
        // Binding probes the upstream: the accept queue has room yet.
        let proxy = TestProxy::start(addr, limits);
        let (_fillers, took) = block_on(&rt, Duration::from_secs(15), async {
            // Fill the accept queue: once it is full, connects hang (their SYNs are dropped).
            let mut fillers = Vec::new();
            loop {
                match tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(addr))
                    .await
                {
                    Ok(stream) => fillers.push(stream.expect("a filler connects")),
                    Err(_) => break,
                }
                assert!(fillers.len() < 64, "the accept queue never filled");
            }
            let before = Instant::now();
            let mut stream = connect(proxy.addr).await;
            stream.write_all(b"hello?").await.expect("send");
            let left = until_closed(&mut stream).await.expect("the close");
            assert_eq!(left, 0);
            (fillers, before.elapsed())
        });
        assert_within("closed while its upstream connect hung", took, idle);
        expect_tally(
            &proxy,
            Tally {
                accepted: 1,
                idle: 1,
                ..Tally::default()
            },
        );
        let stuck = block_on(&rt, Duration::from_secs(5), async {
            let stream = connect(proxy.addr).await;
            let open = until(Duration::from_secs(2), || proxy.tally().open == 1).await;
            assert!(open, "the second client was not served");
            stream
        });
        let (report, took) = proxy.stop();
        println!("stopped with an upstream connect hanging in {took:?}");
        assert!(took < Duration::from_secs(2), "stopping took {took:?}");
        assert_balanced(&report.stats);
        drop((stuck, listener));
    });
}
