// Netty HashedWheelTimer harness for `cargo xtask bench` (wheel-bench/src/systems/netty.rs).
//
// Draws the same delays as the Rust side (SplitMix64, same seed, same order), schedules them
// from the main thread in batches of 1024, measures lateness inside the callback exactly as
// the Rust Task does (callback start minus requested deadline), and prints plain
// "key value" lines on stdout, then the lateness samples as "lateness <ns> <count>" rows
// (values kept to 4 significant digits) for the Rust side to load into an HdrHistogram.
// The measured round is bracketed by "measuring start" and "measuring end" lines, printed as
// it starts and ends, so the Rust side's host stall probe watches that round only.
//
// Usage: java NettyBench timers=N spread_ns=N seed=N scenario=fire|rpc|slow|idle tick_ns=N
//        ticks_per_wheel=N warmup=N idle_ms=N

import io.netty.util.HashedWheelTimer;
import io.netty.util.Timeout;
import io.netty.util.TimerTask;

import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

public final class NettyBench {
    static final long GOLDEN = 0x9E3779B97F4A7C15L;
    static final long CHOICE_SALT = 0x5EEDC401CE000001L;
    static final int BATCH = 1024;
    static final int CLOCK_EVERY = 64;
    static final long RPC_CANCEL_PER_10000 = 9000;
    static final long SLOW_PER_10000 = 100;
    static final long SLOW_BLOCK_MS = 10;

    /** SplitMix64, identical to wheel-bench/src/delays.rs. */
    static final class SplitMix64 {
        long state;

        SplitMix64(long seed) {
            state = seed;
        }

        long next() {
            state += GOLDEN;
            long z = state;
            z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
            z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
            return z ^ (z >>> 31);
        }

        /** Uniform in [0, bound): the high 64 bits of the unsigned 128-bit product. */
        long below(long bound) {
            long x = next();
            return Math.multiplyHigh(x, bound) + ((x >> 63) & bound);
        }
    }

    /** What the callbacks of one round record; written by the single worker thread only. */
    static final class Record {
        final long[] lateness;
        int latenessCount;
        final long[] blocked;
        int blockedCount;
        final long[] seen;
        long duplicates;
        long early;
        final AtomicLong fired = new AtomicLong();

        Record(int timers) {
            lateness = new long[timers];
            blocked = new long[timers / 20 + 64];
            seen = new long[(timers + 63) / 64];
        }

        void record(int index, long deadline, boolean blocks) {
            long start = System.nanoTime();
            long late = start - deadline;
            if (late < 0) {
                early++;
                late = 0;
            }
            if (blocks) {
                blocked[blockedCount++] = late;
            } else {
                lateness[latenessCount++] = late;
            }
            long bit = 1L << (index & 63);
            if ((seen[index >>> 6] & bit) != 0) {
                duplicates++;
            }
            seen[index >>> 6] |= bit;
            fired.lazySet(fired.get() + 1);
        }
    }

    static final class Callback implements TimerTask {
        final Record record;
        final int index;
        final long deadline;
        final boolean blocks;

        Callback(Record record, int index, long deadline, boolean blocks) {
            this.record = record;
            this.index = index;
            this.deadline = deadline;
            this.blocks = blocks;
        }

        @Override
        public void run(Timeout timeout) throws InterruptedException {
            record.record(index, deadline, blocks);
            if (blocks) {
                Thread.sleep(SLOW_BLOCK_MS);
            }
        }
    }

    static Map<String, String> args;

    static long arg(String key) {
        String value = args.get(key);
        if (value == null) {
            throw new IllegalArgumentException("missing argument " + key + "=");
        }
        return Long.parseLong(value);
    }

    static Thread worker;

    static HashedWheelTimer newTimer() {
        return new HashedWheelTimer(r -> {
            Thread t = new Thread(r, "netty-wheel");
            t.setDaemon(true);
            worker = t;
            return t;
        }, arg("tick_ns"), TimeUnit.NANOSECONDS, (int) arg("ticks_per_wheel"), false);
    }

    public static void main(String[] argv) throws Exception {
        args = new HashMap<>();
        for (String a : argv) {
            int eq = a.indexOf('=');
            args.put(a.substring(0, eq), a.substring(eq + 1));
        }
        String scenario = args.get("scenario");
        if (scenario.equals("idle")) {
            idle();
            return;
        }
        for (int i = 0; i < arg("warmup"); i++) {
            round(scenario, false);
        }
        System.gc();
        round(scenario, true);
    }

    static void idle() throws InterruptedException {
        HashedWheelTimer timer = newTimer();
        timer.start();
        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        long cpu0 = threads.getThreadCpuTime(worker.getId());
        Thread.sleep(arg("idle_ms"));
        long cpu1 = threads.getThreadCpuTime(worker.getId());
        timer.stop();
        System.out.println("cpu_ns " + (cpu1 - cpu0));
    }

    static void round(String scenario, boolean measured) throws InterruptedException {
        int timers = (int) arg("timers");
        long spread = arg("spread_ns");
        long seed = arg("seed");
        boolean rpc = scenario.equals("rpc");
        boolean slow = scenario.equals("slow");
        SplitMix64 delays = new SplitMix64(seed);
        SplitMix64 choices = new SplitMix64(seed ^ CHOICE_SALT);
        Record record = new Record(timers);
        Cancels cancels = new Cancels(timers);
        HashedWheelTimer timer = newTimer();
        timer.start();
        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        long cpu0 = threads.getThreadCpuTime(worker.getId());
        long[] gc0 = gcTotals();

        long scheduleNs = 0, maxDeadline = 0;
        List<Timeout> keptTimeouts = new ArrayList<>();
        List<Integer> keptIndices = new ArrayList<>();
        List<Timeout> prevTimeouts = new ArrayList<>();
        List<Integer> prevIndices = new ArrayList<>();
        if (measured) {
            System.out.println("measuring start");
            System.out.flush();
        }
        long producerCpu0 = threads.getCurrentThreadCpuTime();
        long started = System.nanoTime();
        for (int start = 0; start < timers; start += BATCH) {
            int end = Math.min(timers, start + BATCH);
            long t0 = System.nanoTime();
            long now = t0;
            for (int i = start; i < end; i++) {
                if (i % CLOCK_EVERY == 0) {
                    now = System.nanoTime();
                }
                long delay = delays.below(spread);
                boolean blocks = slow && choices.below(10000) < SLOW_PER_10000;
                boolean keep = rpc && choices.below(10000) < RPC_CANCEL_PER_10000;
                long deadline = now + delay;
                maxDeadline = Math.max(maxDeadline, deadline);
                Timeout t = timer.newTimeout(new Callback(record, i, deadline, blocks), delay, TimeUnit.NANOSECONDS);
                if (keep) {
                    keptTimeouts.add(t);
                    keptIndices.add(i);
                }
            }
            scheduleNs += System.nanoTime() - t0;
            if (rpc) {
                cancels.cancelAll(prevTimeouts, prevIndices);
                prevTimeouts.clear();
                prevIndices.clear();
                List<Timeout> swapT = prevTimeouts;
                prevTimeouts = keptTimeouts;
                keptTimeouts = swapT;
                List<Integer> swapI = prevIndices;
                prevIndices = keptIndices;
                keptIndices = swapI;
            }
        }
        if (rpc) {
            cancels.cancelAll(prevTimeouts, prevIndices);
        }
        long producerCpu = threads.getCurrentThreadCpuTime() - producerCpu0;
        long giveUp = maxDeadline + TimeUnit.SECONDS.toNanos(30);
        while (record.fired.get() + cancels.done < timers && System.nanoTime() < giveUp) {
            Thread.sleep(5);
        }
        long wall = System.nanoTime() - started;
        long cpu1 = threads.getThreadCpuTime(worker.getId());
        if (measured) {
            System.out.println("measuring end");
            System.out.flush();
        }
        long[] gc1 = gcTotals();
        int unfired = timer.stop().size();
        if (!measured) {
            return;
        }
        long fired = 0, ranAfterCancel = 0;
        for (int w = 0; w < record.seen.length; w++) {
            fired += Long.bitCount(record.seen[w]);
            ranAfterCancel += Long.bitCount(record.seen[w] & cancels.bits[w]);
        }
        System.out.println("scheduled " + timers);
        System.out.println("schedule_ns " + scheduleNs);
        System.out.println("producer_cpu_ns " + producerCpu);
        System.out.println("cancel_calls " + cancels.calls);
        System.out.println("cancel_ns " + cancels.nanos);
        System.out.println("cancelled " + cancels.done);
        System.out.println("fired " + fired);
        System.out.println("duplicates " + record.duplicates);
        System.out.println("early " + record.early);
        System.out.println("unfired " + unfired);
        System.out.println("ran_after_cancel " + ranAfterCancel);
        System.out.println("cpu_ns " + (cpu1 - cpu0));
        System.out.println("gc_count " + (gc1[0] - gc0[0]));
        System.out.println("gc_ms " + (gc1[1] - gc0[1]));
        System.out.println("wall_ns " + wall);
        printSamples("lateness", record.lateness, record.latenessCount);
        printSamples("blocked", record.blocked, record.blockedCount);
    }

    /** The rpc scenario's cancels: counts, time, and which timers were cancelled. */
    static final class Cancels {
        long calls, done, nanos;
        final long[] bits;

        Cancels(int timers) {
            bits = new long[(timers + 63) / 64];
        }

        /** Cancels every timeout of a batch; index k of `indices` is timeout k's timer number. */
        void cancelAll(List<Timeout> timeouts, List<Integer> indices) {
            long c0 = System.nanoTime();
            for (int k = 0; k < timeouts.size(); k++) {
                calls++;
                if (timeouts.get(k).cancel()) {
                    done++;
                    int index = indices.get(k);
                    bits[index >>> 6] |= 1L << (index & 63);
                }
            }
            nanos += System.nanoTime() - c0;
        }
    }

    static long[] gcTotals() {
        long count = 0, ms = 0;
        for (GarbageCollectorMXBean gc : ManagementFactory.getGarbageCollectorMXBeans()) {
            count += Math.max(0, gc.getCollectionCount());
            ms += Math.max(0, gc.getCollectionTime());
        }
        return new long[] {count, ms};
    }

    /** Sorted samples, each kept to 4 significant digits, as "name value count" rows. */
    static void printSamples(String name, long[] samples, int count) {
        long[] sorted = Arrays.copyOf(samples, count);
        Arrays.sort(sorted);
        StringBuilder out = new StringBuilder();
        int i = 0;
        while (i < count) {
            long key = fourDigits(sorted[i]);
            int j = i;
            while (j < count && fourDigits(sorted[j]) == key) {
                j++;
            }
            out.append(name).append(' ').append(key).append(' ').append(j - i).append('\n');
            i = j;
        }
        System.out.print(out);
    }

    static long fourDigits(long v) {
        long scale = 1;
        while (v / scale >= 10000) {
            scale *= 10;
        }
        return v / scale * scale;
    }
}
