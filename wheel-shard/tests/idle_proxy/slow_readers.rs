//! Slow readers and writers: a reader that never reads is closed after idle and pins no megabytes
//! (the proxy does not buffer on its own; what the kernel holds is bounded), and a client that
//! writes without reading is held back, then closed idle.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;

use crate::harness::*;
use crate::idle_proxy::Limits;

/// A slow reader at its worst: asks an upstream that streams without end, then never reads.
/// Promise: writes to it stop making progress and it is closed `--idle` later, as idle; the
/// proxy's own sockets hold less than [`PINNED_BOUND`] for it meanwhile ("it cannot pin
/// megabytes of memory"), and the upstream could hand over only a bounded number of bytes.
#[test]
fn a_reader_that_never_reads_is_closed_after_idle_and_pins_no_megabytes() {
    hostile(Duration::from_secs(15), || {
        let upstream = Upstream::start(Mode::Scripted);
        let idle = Duration::from_secs(1);
        let proxy = TestProxy::start(upstream.addr, Limits::new(idle));
        let counters = Arc::clone(&proxy.counters);
        let rt = runtime();
        let (took, pinned, stalled_at, drained) = block_on(&rt, Duration::from_secs(10), async {
            let mut stream = connect_small(proxy.addr).await;
            let asked = Instant::now();
            stream.write_all(&[command::STREAM]).await.expect("ask");
            // The buffers fill within milliseconds; the connection is stalled well before idle.
            tokio::time::sleep(Duration::from_millis(400)).await;
            let pinned = proxy_kernel_bytes(proxy.addr, upstream.addr);
            let closed = until(Duration::from_secs(5), || {
                counters.closed_idle.load(Ordering::SeqCst) == 1
            })
            .await;
            let took = asked.elapsed();
            assert!(
                closed,
                "a reader that never reads still open after {took:?}"
            );
            let stalled_at = upstream.counts.streamed.load(Ordering::SeqCst);
            let drained = until_closed(&mut stream).await.expect("drain");
            (took, pinned, stalled_at, drained)
        });
        println!(
            "the never-reading client was closed {took:?} after its request; stalled, the \
             proxy's sockets held {} bytes ({pinned:?}); the upstream had handed over {stalled_at} \
             bytes (most in its own send buffer); the client then drained {drained} bytes",
            pinned.total()
        );
        // Bytes flow until the buffers fill (milliseconds); then `idle` without progress.
        assert!(
            took + EARLY >= idle,
            "closed after {took:?}, before {idle:?}"
        );
        assert!(took <= idle + LATE, "closed only after {took:?}");
        assert!(
            pinned.total() < PINNED_BOUND,
            "the proxy's sockets held {pinned:?} for a client that never reads"
        );
        assert!(
            stalled_at < IN_FLIGHT_BOUND,
            "the upstream handed over {stalled_at} bytes for a client that never read"
        );
        assert!(drained < PINNED_BOUND);
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

/// A client that writes without end to an echo upstream and never reads the echoes. Promise:
/// backpressure stops it (its writes block once the buffers fill, the proxy does not queue
/// them), the stalled connection is closed `--idle` after the proxy last moved bytes for it,
/// as idle, and the bytes it got in are bounded.
///
/// The idle time runs from the proxy's last read or write, which the client cannot see: a
/// write call of the client can return without the proxy reading anything (the kernel takes
/// the bytes), and the proxy can still move bytes after the client's last write returned. So
/// the test reads the proxy's own count of moves that pushed the deadline back
/// (`idle_pushed_back`) at each poll: the last move lies between the poll before the count's
/// last change and the poll that saw it.
#[test]
fn a_client_that_writes_without_reading_is_held_back_then_closed_idle() {
    hostile(Duration::from_secs(15), || {
        let upstream = Upstream::start(Mode::Scripted);
        let idle = Duration::from_millis(500);
        let proxy = TestProxy::start(upstream.addr, Limits::new(idle));
        let counters = Arc::clone(&proxy.counters);
        let rt = runtime();
        let (quiet, written) = block_on(&rt, Duration::from_secs(10), async {
            let stream = scripted(proxy.addr, &[command::ECHO]).await;
            let (read, mut write) = stream.into_split();
            let written = Arc::new(AtomicU64::new(0));
            let count = Arc::clone(&written);
            let mut last_move = MoveSeen::new(&counters.idle_pushed_back);
            let writer = tokio::spawn(async move {
                let chunk = vec![b'w'; 64 * 1024];
                while let Ok(n) = write.write(&chunk).await {
                    count.fetch_add(n as u64, Ordering::SeqCst);
                }
            });
            let closed = until(Duration::from_secs(5), || {
                last_move.poll();
                counters.closed_idle.load(Ordering::SeqCst) == 1
            })
            .await;
            assert!(closed, "a writer that never reads still open");
            let quiet = last_move.quiet_for();
            writer.abort();
            drop(read);
            (quiet, written.load(Ordering::SeqCst))
        });
        let (at_most, at_least) = quiet;
        println!(
            "the writer that never reads got {written} bytes in; closed {at_least:?} to \
             {at_most:?} after the proxy last moved its bytes"
        );
        assert!(
            at_most + EARLY >= idle,
            "closed at most {at_most:?} after the proxy last moved bytes, before {idle:?}"
        );
        assert!(
            at_least <= idle + LATE,
            "closed at least {at_least:?} after the proxy last moved bytes"
        );
        assert!(
            written < IN_FLIGHT_BOUND,
            "the proxy took {written} bytes from a client that never read"
        );
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

/// Where a polled count last changed: the last event it counts lies between `before` (the
/// last look that saw the old value) and `seen` (the first that saw the new one).
struct MoveSeen<'a> {
    counter: &'a AtomicU64,
    count: u64,
    before: Instant,
    seen: Option<Instant>,
    last_look: Instant,
}

impl<'a> MoveSeen<'a> {
    fn new(counter: &'a AtomicU64) -> MoveSeen<'a> {
        let now = Instant::now();
        MoveSeen {
            counter,
            count: counter.load(Ordering::Acquire),
            before: now,
            seen: None,
            last_look: now,
        }
    }

    fn poll(&mut self) {
        let now = Instant::now();
        let count = self.counter.load(Ordering::Acquire);
        if count != self.count {
            self.count = count;
            self.before = self.last_look;
            self.seen = Some(now);
        }
        self.last_look = now;
    }

    /// How long the count has been still at the last poll: (at most, at least).
    fn quiet_for(&self) -> (Duration, Duration) {
        let seen = self.seen.expect("the proxy moved bytes while polled");
        (self.last_look - self.before, self.last_look - seen)
    }
}

/// A slow reader that also writes: pipelines requests to an echo upstream without end and never
/// reads an answer. Promise (`--help`, slow readers): `--client-send-buffer` bounds the kernel
/// memory a slow reader pins, "it cannot pin megabytes of memory": the proxy's own sockets hold
/// less than [`PINNED_BOUND`] for it while it is stalled.
#[test]
fn a_reader_that_never_reads_but_writes_pins_no_megabytes_in_the_proxy() {
    hostile(Duration::from_secs(15), || {
        let upstream = Upstream::start(Mode::Scripted);
        let idle = Duration::from_secs(1);
        let proxy = TestProxy::start(upstream.addr, Limits::new(idle));
        let rt = runtime();
        let pinned = block_on(&rt, Duration::from_secs(10), async {
            let stream = scripted(proxy.addr, &[command::ECHO]).await;
            let (read, mut write) = stream.into_split();
            let writer = tokio::spawn(async move {
                let chunk = vec![b'w'; 64 * 1024];
                while write.write(&chunk).await.is_ok() {}
            });
            // Stalled within milliseconds; measured well before the idle close.
            tokio::time::sleep(Duration::from_millis(400)).await;
            let pinned = proxy_kernel_bytes(proxy.addr, upstream.addr);
            writer.abort();
            drop(read);
            pinned
        });
        println!(
            "stalled, the proxy's sockets held {} bytes for the writer that never reads: \
             {pinned:?}",
            pinned.total()
        );
        assert!(
            pinned.total() < PINNED_BOUND,
            "the proxy's sockets held {} bytes for a slow reader that writes: {pinned:?}",
            pinned.total()
        );
    });
}
