//! A thousand random hostile connections (each a random sequence of trickles, stalls, resets,
//! half-closes and hang-ups) leave no timer behind and are all counted. The test prints its seed;
//! `HOSTILE_PROXY_SEED=<seed>` replays it.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common;
use crate::harness::*;
use crate::idle_proxy::Limits;

/// One client's behaviour in the random test.
#[derive(Clone, Copy, Debug)]
enum Act {
    /// Connect and close at once.
    DropAtOnce,
    /// Connect and reset at once.
    ResetAtOnce,
    /// Echo `len` bytes, then hang up (or reset, when `reset`).
    Echo { len: usize, reset: bool },
    /// Ask for the stream, read `len` bytes, then close (or reset).
    Stream { len: usize, reset: bool },
    /// Echo `len` bytes for `ms` milliseconds of writing, then vanish mid-transfer.
    VanishMidway { ms: u64, reset: bool },
    /// The upstream resets after the first byte.
    UpstreamResets,
    /// The upstream closes after the first byte.
    UpstreamCloses,
    /// Send `len` bytes, half-close, read the answer the upstream gives at EOF.
    HalfClose { len: usize },
    /// The upstream answers and FINs first; the client sends more, then hangs up.
    FinFirst,
    /// Send nothing, wait for the idle close.
    Silent,
    /// Send a request the upstream never answers, wait for the request deadline.
    Unanswered,
    /// Requests answered 30 ms late, within the deadline.
    SlowEcho { requests: usize },
}

impl Act {
    fn random(rng: &mut SmallRng) -> Act {
        let reset = rng.random_bool(0.5);
        match rng.random_range(0..100) {
            0..8 => Act::DropAtOnce,
            8..16 => Act::ResetAtOnce,
            16..36 => Act::Echo {
                len: rng.random_range(1..20_000),
                reset,
            },
            36..46 => Act::Stream {
                len: rng.random_range(0..300_000),
                reset,
            },
            46..56 => Act::VanishMidway {
                ms: rng.random_range(0..30),
                reset,
            },
            56..62 => Act::UpstreamResets,
            62..68 => Act::UpstreamCloses,
            68..78 => Act::HalfClose {
                len: rng.random_range(0..20_000),
            },
            78..86 => Act::FinFirst,
            86..89 => Act::Silent,
            89..92 => Act::Unanswered,
            _ => Act::SlowEcho {
                requests: rng.random_range(1..4),
            },
        }
    }
}

/// How a random client's connection went.
#[derive(Debug)]
enum Outcome {
    /// As its act expects, or ended by an I/O error (refused over the cap, reset by design).
    Fine,
    /// Closed with no byte where a connection that ends normally always gets an answer:
    /// refused, or cut by a timer.
    LooksRefused,
    /// A broken promise: wrong data.
    Broken(String),
    /// The client could not connect (the machine's doing, out of ports say, not the proxy's):
    /// the proxy never saw it.
    NoConnect(io::ErrorKind),
}

/// Plays `act` against the proxy. An I/O error is no broken promise (the connection may have
/// been refused over the cap, or reset by design); wrong data is.
async fn play(addr: SocketAddr, act: Act, seed: u64) -> Outcome {
    play_io(addr, act, seed).await.unwrap_or(Outcome::Fine)
}

async fn play_io(addr: SocketAddr, act: Act, seed: u64) -> io::Result<Outcome> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut stream = match TcpStream::connect(addr).await {
        Ok(stream) => stream,
        Err(error) => return Ok(Outcome::NoConnect(error.kind())),
    };
    let payload = |len: usize, rng: &mut SmallRng| -> Vec<u8> {
        (0..len).map(|_| rng.random_range(b'a'..=b'z')).collect()
    };
    match act {
        Act::DropAtOnce => {}
        Act::ResetAtOnce => stream.set_zero_linger()?,
        Act::Echo { len, reset } => {
            let message = payload(len, &mut rng);
            stream.write_all(&[command::ECHO]).await?;
            let (mut read, mut write) = stream.split();
            let mut back = vec![0u8; len];
            let (sent, got) = tokio::join!(write.write_all(&message), read.read_exact(&mut back));
            sent?;
            got?;
            if back != message {
                return Ok(Outcome::Broken(format!("{act:?}: the echo differs")));
            }
            if reset {
                stream.set_zero_linger()?;
            } else {
                stream.shutdown().await?;
                until_closed(&mut stream).await?;
            }
        }
        Act::Stream { len, reset } => {
            stream.write_all(&[command::STREAM]).await?;
            let mut buf = vec![0u8; 64 * 1024];
            let mut got = 0;
            while got < len {
                let n = stream.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                if buf[..n].iter().any(|&b| b != b'z') {
                    return Ok(Outcome::Broken(format!(
                        "{act:?}: foreign bytes in the stream"
                    )));
                }
                got += n;
            }
            if reset {
                stream.set_zero_linger()?;
            }
        }
        Act::VanishMidway { ms, reset } => {
            stream.write_all(&[command::ECHO]).await?;
            let chunk = payload(4096, &mut rng);
            let until = Instant::now() + Duration::from_millis(ms);
            while Instant::now() < until {
                stream.write_all(&chunk).await?;
                tokio::task::yield_now().await;
            }
            if reset {
                stream.set_zero_linger()?;
            }
        }
        Act::UpstreamResets | Act::UpstreamCloses => {
            let first = match act {
                Act::UpstreamResets => command::RESET,
                _ => command::CLOSE,
            };
            stream.write_all(&[first]).await?;
            if until_closed(&mut stream).await? != 0 {
                return Ok(Outcome::Broken(format!(
                    "{act:?}: data from a closing upstream"
                )));
            }
        }
        Act::HalfClose { len } => {
            let message = payload(len, &mut rng);
            stream.write_all(&[command::AT_EOF]).await?;
            stream.write_all(&message).await?;
            stream.shutdown().await?;
            let mut answer = Vec::new();
            stream.read_to_end(&mut answer).await?;
            if answer.is_empty() && !message.is_empty() {
                return Ok(Outcome::LooksRefused);
            }
            if answer != message {
                return Ok(Outcome::Broken(format!("{act:?}: the answer differs")));
            }
        }
        Act::FinFirst => {
            stream.write_all(&[command::FIN_FIRST]).await?;
            let mut bye = Vec::new();
            stream.read_to_end(&mut bye).await?;
            if bye.is_empty() {
                return Ok(Outcome::LooksRefused);
            }
            if bye != b"bye" {
                return Ok(Outcome::Broken(format!("{act:?}: got {bye:?}")));
            }
            stream.write_all(b"late").await?;
            stream.shutdown().await?;
            until_closed(&mut stream).await?;
        }
        Act::Silent => {
            until_closed(&mut stream).await?;
        }
        Act::Unanswered => {
            stream.write_all(&[command::SILENT]).await?;
            stream.write_all(b"anyone?").await?;
            until_closed(&mut stream).await?;
        }
        Act::SlowEcho { requests } => {
            stream.write_all(&[command::SLOW_ECHO, 3]).await?;
            for n in 0..requests {
                let message = format!("request {n}");
                stream.write_all(message.as_bytes()).await?;
                let mut back = vec![0u8; message.len()];
                stream.read_exact(&mut back).await?;
                if back != message.as_bytes() {
                    return Ok(Outcome::Broken(format!("{act:?}: the answer differs")));
                }
            }
            stream.shutdown().await?;
            until_closed(&mut stream).await?;
        }
    }
    Ok(Outcome::Fine)
}

/// A thousand connections from 32 tasks with random behaviours at random moments (seeded; the
/// seed is printed), against a proxy with short deadlines and a cap of 24 connections. Promise:
/// no connection outlives its deadlines, no echo is corrupted, every connection accepted is
/// counted in exactly one way, and once all have closed the service holds no timer: each one
/// scheduled fired or was cancelled. Stopping then returns promptly.
#[test]
fn a_thousand_random_hostile_connections_leave_no_timer_and_are_all_counted() {
    hostile(Duration::from_secs(40), || {
        const CONNECTIONS: usize = 1000;
        const TASKS: usize = 32;
        let seed = std::env::var("HOSTILE_PROXY_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64)
            });
        println!("random hostile connections: HOSTILE_PROXY_SEED={seed}");
        let mut rng = SmallRng::seed_from_u64(seed);
        let plan: Vec<(Act, u64, u64)> = (0..CONNECTIONS)
            .map(|_| {
                let act = Act::random(&mut rng);
                (act, rng.random_range(0..20), rng.random())
            })
            .collect();

        let upstream = Upstream::start(Mode::Scripted);
        let limits = Limits {
            request_timeout: Some(Duration::from_millis(200)),
            max_connections: 24,
            ..Limits::new(Duration::from_millis(300))
        };
        let proxy = TestProxy::start(upstream.addr, limits);
        let addr = proxy.addr;
        let started = Instant::now();
        let rt = runtime();
        let (problems, looked_refused, no_connect) =
            block_on(&rt, Duration::from_secs(30), async move {
                let chunks: Vec<Vec<(Act, u64, u64)>> = plan
                    .chunks(CONNECTIONS / TASKS + 1)
                    .map(<[_]>::to_vec)
                    .collect();
                let tasks: Vec<_> = chunks
                    .into_iter()
                    .map(|chunk| {
                        tokio::spawn(async move {
                            let (mut problems, mut looked_refused, mut no_connect) =
                                (Vec::new(), 0, Vec::new());
                            for (act, pause, seed) in chunk {
                                tokio::time::sleep(Duration::from_millis(pause)).await;
                                let limit = Duration::from_secs(5);
                                match tokio::time::timeout(limit, play(addr, act, seed)).await {
                                    Ok(Outcome::Fine) => {}
                                    Ok(Outcome::LooksRefused) => looked_refused += 1,
                                    Ok(Outcome::Broken(problem)) => problems.push(problem),
                                    Ok(Outcome::NoConnect(kind)) => no_connect.push(kind),
                                    Err(_) => {
                                        problems.push(format!("{act:?}: open after {limit:?}"))
                                    }
                                }
                            }
                            (problems, looked_refused, no_connect)
                        })
                    })
                    .collect();
                let (mut problems, mut looked_refused, mut no_connect) =
                    (Vec::new(), 0, Vec::new());
                for task in tasks {
                    let (found, refused, failed) = task.await.expect("client task");
                    problems.extend(found);
                    looked_refused += refused;
                    no_connect.extend(failed);
                }
                (problems, looked_refused, no_connect)
            });
        println!("{CONNECTIONS} clients done in {:?}", started.elapsed());
        assert!(problems.is_empty(), "seed {seed}: {problems:#?}");
        if !no_connect.is_empty() {
            println!(
                "{} clients could not connect: {no_connect:?}",
                no_connect.len()
            );
        }
        assert!(
            no_connect.len() < CONNECTIONS / 10,
            "seed {seed}: {} clients could not connect: {no_connect:?}",
            no_connect.len()
        );
        let connected = (CONNECTIONS - no_connect.len()) as u64;
        let settled = common::eventually(Duration::from_secs(5), || {
            let tally = proxy.tally();
            tally.accepted == connected && tally.open == 0
        });
        let tally = proxy.tally();
        println!("counters: {tally:?}");
        assert!(
            settled,
            "seed {seed}: {connected} connected, not all accepted and closed: {tally:?}"
        );
        assert_eq!(
            tally.ended(),
            tally.accepted,
            "seed {seed}: connections counted other than once: {tally:?}"
        );
        assert!(tally.refused > 0, "seed {seed}: the cap was never reached");
        // A connection ended normally delivered its answer: one that got none was refused, or
        // cut by a timer or an error.
        assert!(
            looked_refused <= tally.accepted - tally.normal,
            "seed {seed}: {looked_refused} connections got no answer: {tally:?}"
        );
        let stats = assert_no_timer_left(&proxy);
        println!("timers: {}", ledger(&stats));
        assert!(
            stats.scheduled >= tally.accepted - tally.refused,
            "seed {seed}: a served connection had no idle timer"
        );
        let (report, took) = proxy.stop();
        assert!(took < Duration::from_secs(2), "stopping took {took:?}");
        assert_balanced(&report.stats);
    });
}
