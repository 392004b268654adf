//! Criterion benches of wheel-shard's hot paths through its public API: schedule, cancel and
//! reschedule into a running service, from one and from two producer threads.
//!
//! Timers are set an hour out so none fires while measured; each iteration batch cancels what
//! it scheduled (untimed), so the service does not grow across samples.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mimalloc::MiMalloc;
use wheel_shard::{Config, TimerId, TimerService};

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

/// Far enough that nothing fires during a sample.
const FAR: Duration = Duration::from_secs(3600);
const FARTHER: Duration = Duration::from_secs(7200);

fn service() -> TimerService {
    // A long saturation timeout: on a busy machine a full ring should wait, not fail a sample.
    let config = Config {
        saturation_timeout: Duration::from_secs(10),
        ..Config::default()
    };
    TimerService::new(config).expect("the config is valid")
}

/// Runs `work(share)` on `producers` threads at once (each gets its share of `iters`) and
/// returns the wall time of the slowest, with what each returned.
fn in_parallel<T: Send>(
    producers: usize,
    iters: u64,
    work: impl Fn(u64) -> T + Sync,
) -> (Duration, Vec<T>) {
    let start = Barrier::new(producers);
    let outputs: Vec<(Duration, T)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..producers as u64)
            .map(|p| {
                let share = iters * (p + 1) / producers as u64 - iters * p / producers as u64;
                let (start, work) = (&start, &work);
                scope.spawn(move || {
                    start.wait();
                    let began = Instant::now();
                    let output = work(share);
                    (began.elapsed(), output)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("producer panicked"))
            .collect()
    });
    let slowest = outputs.iter().map(|(d, _)| *d).max().unwrap_or_default();
    (slowest, outputs.into_iter().map(|(_, t)| t).collect())
}

fn schedule_many(service: &TimerService, n: u64) -> Vec<TimerId> {
    (0..n)
        .map(|_| service.schedule(FAR, || {}).expect("schedule"))
        .collect()
}

fn cancel_all(service: &TimerService, ids: &[TimerId]) {
    for id in ids {
        service.cancel(*id);
    }
}

fn schedule(c: &mut Criterion) {
    let service = service();
    let mut group = c.benchmark_group("schedule");
    group.throughput(Throughput::Elements(1));
    for producers in [1, 2] {
        group.bench_function(BenchmarkId::new("producers", producers), |b| {
            b.iter_custom(|iters| {
                let (time, ids) = in_parallel(producers, iters, |n| schedule_many(&service, n));
                ids.iter().for_each(|ids| cancel_all(&service, ids));
                time
            });
        });
    }
    group.finish();
}

/// `ids` split into one contiguous share per producer.
fn shares(ids: &[TimerId], producers: usize) -> Vec<&[TimerId]> {
    ids.chunks(ids.len().div_ceil(producers).max(1)).collect()
}

fn cancel(c: &mut Criterion) {
    let service = service();
    let mut group = c.benchmark_group("cancel");
    group.throughput(Throughput::Elements(1));
    for producers in [1, 2] {
        group.bench_function(BenchmarkId::new("producers", producers), |b| {
            b.iter_custom(|iters| {
                let ids = schedule_many(&service, iters);
                in_parallel_chunks(&shares(&ids, producers), |share| {
                    cancel_all(&service, share)
                })
            });
        });
    }
    group.finish();
}

fn reschedule(c: &mut Criterion) {
    let service = service();
    let mut group = c.benchmark_group("reschedule");
    group.throughput(Throughput::Elements(1));
    for producers in [1, 2] {
        group.bench_function(BenchmarkId::new("producers", producers), |b| {
            b.iter_custom(|iters| {
                let ids = schedule_many(&service, iters);
                let time = in_parallel_chunks(&shares(&ids, producers), |share| {
                    for id in share {
                        service.reschedule(*id, FARTHER);
                    }
                });
                cancel_all(&service, &ids);
                time
            });
        });
    }
    group.finish();
}

/// Runs `work` on each chunk in its own thread at once; the wall time of the slowest.
fn in_parallel_chunks(chunks: &[&[TimerId]], work: impl Fn(&[TimerId]) + Sync) -> Duration {
    let start = Barrier::new(chunks.len());
    std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .iter()
            .map(|chunk| {
                let (start, work) = (&start, &work);
                scope.spawn(move || {
                    start.wait();
                    let began = Instant::now();
                    work(chunk);
                    began.elapsed()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("producer panicked"))
            .max()
            .unwrap_or_default()
    })
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = schedule, cancel, reschedule
}
criterion_main!(benches);
