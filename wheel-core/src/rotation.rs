//! [`Rotation`]: one turn of a level, a ring of slots with a bitmap of the non-empty ones.
//!
//! Each slot is a FIFO list of [`Chunk`]s holding its entries inline, in
//! arrival order. Appending writes the tail chunk; taking from the front reads the head chunk;
//! a cascade takes the whole list. Nothing here chases a pointer per entry: a walk reads a
//! chunk's entries in a row before it follows a link, and starts loading the chunk after the one in
//! hand, since consecutive chunks of a slot lie anywhere in memory.
//!
//! A slot is compacted in place, in bounded steps ([`Rotation::retain_slot`]): the entries the
//! caller keeps move down towards the slot's head, in order, the chunks this empties go back
//! to the pool, and between steps the list is whole again (no hole is left for the other
//! operations to step over).

use crate::chunks::{Chunk, Chunks, NIL};
use crate::entry::Stored;

/// One slot: the first and last chunk of its list, both [`NIL`] when it is empty. Every
/// chunk in a list holds at least one live entry.
///
/// `tail_end` is a copy of the tail chunk's `end` (0 when the slot is empty), so that an
/// append reads nothing from the chunk it writes to: chunk headers sit 1 KiB apart, in a few
/// of the L1 cache's sets, and the slots a cascade spreads entries over have more tail chunks
/// than those sets hold, so a load of the header waited for the L2 on most appends.
#[derive(Clone, Copy, Debug)]
struct Slot {
    head: u32,
    tail: u32,
    tail_end: u32,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            head: NIL,
            tail: NIL,
            tail_end: 0,
        }
    }
}

/// `2^bits` slots and a bitmap of the non-empty ones.
#[derive(Clone, Debug)]
pub(crate) struct Rotation {
    slots: Box<[Slot]>,
    occupied: Box<[u64]>,
    /// How many bits of `occupied` are set.
    occupied_slots: u32,
}

/// Where [`Rotation::retain_slot`] stopped inside a slot, to go on from there next time: the
/// chunk it was reading and the next position to examine, and the chunk before it, which the
/// entries kept next fill first (each with its epoch then). A chunk whose epoch has moved on
/// went back to the pool meanwhile (taken from the front, or the slot cascaded): then the
/// entries before the position are gone too, and the compaction goes on from the slot's head.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Resume {
    prev: u32,
    prev_epoch: u32,
    chunk: u32,
    chunk_epoch: u32,
    /// The next position of `chunk` to examine. When it is above the chunk's `start`, the
    /// entries from `start` up to it were examined and kept, moved down to the chunk's front:
    /// the ones kept next go after them, in this chunk.
    offset: u32,
}

/// What one [`Rotation::retain_slot`] call did.
pub(crate) struct Retained {
    pub(crate) examined: usize,
    pub(crate) removed: usize,
    /// Where it stopped, when the budget ran out before the slot's end (or `keep` panicked).
    pub(crate) resume: Option<Resume>,
    /// The panic of a `keep` or `prefetch` call, caught so the slot is left whole: the entry
    /// it was about and those after it are kept unexamined. The caller settles its own state,
    /// then resumes the panic.
    pub(crate) panic: Option<Box<dyn std::any::Any + Send>>,
}

/// How far ahead of the entry being examined `retain_slot` hands entries to `prefetch`.
const PREFETCH_AHEAD: usize = 12;

impl Rotation {
    pub(crate) fn new(slots: usize) -> Self {
        Rotation {
            slots: vec![Slot::default(); slots].into_boxed_slice(),
            occupied: vec![0; slots.div_ceil(64)].into_boxed_slice(),
            occupied_slots: 0,
        }
    }

    /// Bytes [`Rotation::new`] allocates for `slots` slots.
    pub(crate) fn bytes(slots: usize) -> usize {
        slots * std::mem::size_of::<Slot>() + slots.div_ceil(64) * std::mem::size_of::<u64>()
    }

    /// Whether no slot holds an entry.
    pub(crate) fn is_empty(&self) -> bool {
        self.occupied_slots == 0
    }

    /// Whether `slot` holds an entry.
    pub(crate) fn is_occupied(&self, slot: usize) -> bool {
        self.occupied[slot / 64] & (1 << (slot % 64)) != 0
    }

    fn mark_occupied(&mut self, slot: usize) {
        self.occupied[slot / 64] |= 1 << (slot % 64);
        self.occupied_slots += 1;
    }

    fn mark_empty(&mut self, slot: usize) {
        self.occupied[slot / 64] &= !(1 << (slot % 64));
        self.occupied_slots -= 1;
    }

    /// The first non-empty slot at or after `from` (none when `from` is past the last slot).
    pub(crate) fn next_occupied(&self, from: usize) -> Option<usize> {
        let mut word = from / 64;
        let mut bits = self.occupied.get(word)? & (u64::MAX << (from % 64));
        loop {
            if bits != 0 {
                return Some(word * 64 + bits.trailing_zeros() as usize);
            }
            word += 1;
            bits = *self.occupied.get(word)?;
        }
    }

    /// Appends `entry` to `slot`, taking a chunk from the pool when the tail chunk is full.
    #[inline]
    pub(crate) fn push<T: Copy>(&mut self, chunks: &mut Chunks<T>, slot: usize, entry: Stored<T>) {
        let Slot { tail, tail_end, .. } = self.slots[slot];
        if tail != NIL && (tail_end as usize) < Chunk::<T>::CAPACITY {
            chunks.get_mut(tail).push_at(tail_end as usize, entry);
            self.slots[slot].tail_end = tail_end + 1;
            return;
        }
        self.push_to_new_chunk(chunks, slot, entry);
    }

    #[cold]
    fn push_to_new_chunk<T: Copy>(
        &mut self,
        chunks: &mut Chunks<T>,
        slot: usize,
        entry: Stored<T>,
    ) {
        let id = chunks.alloc();
        chunks.get_mut(id).push(entry);
        let tail = self.slots[slot].tail;
        if tail == NIL {
            self.slots[slot].head = id;
            self.mark_occupied(slot);
        } else {
            chunks.get_mut(tail).set_next(id);
        }
        self.slots[slot].tail = id;
        self.slots[slot].tail_end = 1;
    }

    /// Takes the first entry of `slot`, if any, giving its chunk back to the pool when that
    /// was the chunk's last.
    #[inline]
    pub(crate) fn pop_front<T: Copy>(
        &mut self,
        chunks: &mut Chunks<T>,
        slot: usize,
    ) -> Option<Stored<T>> {
        let head = self.slots[slot].head;
        if head == NIL {
            return None;
        }
        let chunk = chunks.get_mut(head);
        let entry = chunk
            .pop_front()
            .expect("every chunk of a slot holds an entry");
        if chunk.live().is_empty() {
            let next = self.release_head(chunks, slot);
            if next != NIL {
                // The chunk after the new head: it has a chunk's worth of entries' time to
                // arrive.
                chunks.prefetch(chunks.get(next).next());
            }
        }
        Some(entry)
    }

    /// Gives `slot`'s emptied head chunk back to the pool and returns the new head ([`NIL`]:
    /// the slot is empty now, and marked so).
    fn release_head<T: Copy>(&mut self, chunks: &mut Chunks<T>, slot: usize) -> u32 {
        let head = self.slots[slot].head;
        let next = chunks.get(head).next();
        chunks.release(head);
        self.slots[slot].head = next;
        if next == NIL {
            self.slots[slot] = Slot::default();
            self.mark_empty(slot);
        }
        next
    }

    /// Moves up to `max` entries from the front of `slot` to the end of `out`, in order, giving
    /// the chunks this empties back to the pool; returns how many it moved. One chunk at a
    /// time, so at most a chunk's worth per call: the caller places them and comes back for more.
    pub(crate) fn take_front<T: Copy>(
        &mut self,
        chunks: &mut Chunks<T>,
        slot: usize,
        max: usize,
        out: &mut Vec<Stored<T>>,
    ) -> usize {
        let head = self.slots[slot].head;
        if head == NIL || max == 0 {
            return 0;
        }
        // The early cascade comes back for the next chunk soon: start loading it.
        chunks.prefetch(chunks.get(head).next());
        let chunk = chunks.get_mut(head);
        let live = chunk.live();
        let taken = live.len().min(max);
        out.extend_from_slice(&live[..taken]);
        let (start, end) = (chunk.start() + taken, chunk.end());
        if start < end {
            chunk.set_live(start, end);
        } else {
            self.release_head(chunks, slot);
        }
        taken
    }

    /// Empties `slot` and hands over its list of chunks (the first one's id, [`NIL`] if the
    /// slot was empty): the caller walks it and gives each chunk back to the pool.
    pub(crate) fn take(&mut self, slot: usize) -> u32 {
        let Slot { head, .. } = std::mem::take(&mut self.slots[slot]);
        if head != NIL {
            self.mark_empty(slot);
        }
        head
    }

    /// Empties every slot, giving the chunks back to the pool.
    pub(crate) fn clear<T: Copy>(&mut self, chunks: &mut Chunks<T>) {
        let mut from = 0;
        while let Some(slot) = self.next_occupied(from) {
            let mut id = self.take(slot);
            while id != NIL {
                let next = chunks.get(id).next();
                chunks.release(id);
                id = next;
            }
            from = slot + 1;
        }
    }

    /// Examines up to `budget` entries of `slot`, from where `resume` says the last call on
    /// this slot stopped (or from its head), and removes those `keep` rejects; the others keep
    /// their order. With `PREFETCH`, `prefetch` sees each value about a dozen entries before
    /// `keep` does. Entries kept move down into the room the removed ones left, so the chunks
    /// this empties go back to the pool; at most one chunk's worth of entries moves beyond
    /// the ones examined. Returns where it stopped when the budget ran out inside the slot.
    ///
    /// A chunk at a time: its entries are examined in a tight loop that collects the kept ones
    /// in `kept` (room for a chunk's worth), which are then copied to their place.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn retain_slot<T: Copy, const PREFETCH: bool>(
        &mut self,
        chunks: &mut Chunks<T>,
        slot: usize,
        resume: Option<Resume>,
        budget: usize,
        kept: &mut Vec<Stored<T>>,
        prefetch: &mut impl FnMut(&T),
        keep: &mut impl FnMut(&Stored<T>) -> bool,
    ) -> Retained {
        let done = self.compact::<T, PREFETCH>(chunks, slot, resume, budget, kept, prefetch, keep);
        // The compaction moved entries into other chunks and may have made another the tail.
        let tail = self.slots[slot].tail;
        if tail != NIL {
            self.slots[slot].tail_end = chunks.get(tail).end() as u32;
        }
        done
    }

    /// The compaction [`Rotation::retain_slot`] describes; it returns from several places,
    /// so the caller takes the slot's copy of the tail's end afterwards.
    #[allow(clippy::too_many_arguments)]
    fn compact<T: Copy, const PREFETCH: bool>(
        &mut self,
        chunks: &mut Chunks<T>,
        slot: usize,
        resume: Option<Resume>,
        budget: usize,
        kept: &mut Vec<Stored<T>>,
        prefetch: &mut impl FnMut(&T),
        keep: &mut impl FnMut(&Stored<T>) -> bool,
    ) -> Retained {
        let mut done = Retained {
            examined: 0,
            removed: 0,
            resume: None,
            panic: None,
        };
        if self.slots[slot].head == NIL || budget == 0 {
            return done;
        }
        // The chunk being read, `r`, and the next position to examine there, `i`. The entries
        // kept go into `w`, the chunk before `r` (while it has room; `NIL` when `r` is the
        // head), or, once that is full, into `r` itself from its front, which
        // `own = Some((first, next))` says: positions `first..next` of `r` hold entries kept.
        let mut w = NIL;
        let mut r;
        let mut i;
        let mut own: Option<(usize, usize)> = None;
        match resume.filter(|at| chunks.get(at.chunk).epoch() == at.chunk_epoch) {
            Some(at) => {
                r = at.chunk;
                let start = chunks.get(r).start();
                i = start.max(at.offset as usize);
                if i > start {
                    own = Some((start, i));
                }
                if at.prev != NIL && chunks.get(at.prev).epoch() == at.prev_epoch {
                    debug_assert_eq!(chunks.get(at.prev).next(), r);
                    w = at.prev;
                }
            }
            None => {
                r = self.slots[slot].head;
                i = chunks.get(r).start();
            }
        }
        if PREFETCH {
            prefetch_from(chunks, r, i, PREFETCH_AHEAD.min(budget), prefetch);
        }
        loop {
            let end = chunks.get(r).end();
            let take = (end - i).min(budget - done.examined);
            kept.clear();
            // Where the loop below is: a panic of `keep` or `prefetch` there leaves entry
            // `at` and the rest of this batch unexamined, and kept.
            let mut at = 0;
            let examined = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let chunk = chunks.get(r);
                // Consecutive chunks of a slot lie anywhere: load the next one while this one
                // is examined (halves retain's time per entry at 1 M and 10 M).
                chunks.prefetch(chunk.next());
                let unread = chunk.from(i);
                // Where `prefetch` goes once past this chunk: the next one's first entries.
                let then = match chunk.next() {
                    next if PREFETCH && next != NIL => chunks.get(next).live(),
                    _ => &[],
                };
                for (k, entry) in unread[..take].iter().enumerate() {
                    at = k;
                    if PREFETCH {
                        let ahead = k + PREFETCH_AHEAD;
                        let ahead = match unread.get(ahead) {
                            Some(entry) => Some(entry),
                            None => then.get(ahead - unread.len()),
                        };
                        if let Some(ahead) = ahead {
                            prefetch(&ahead.value);
                        }
                    }
                    if keep(entry) {
                        kept.push(*entry);
                    }
                }
            }));
            if let Err(payload) = examined {
                kept.extend_from_slice(&chunks.get(r).from(i)[at..take]);
                done.panic = Some(payload);
            }
            i += take;
            done.examined += take;
            done.removed += take - kept.len();
            // The kept ones go into the room left in `w`, then into `r` from its front: below
            // `i`, among entries examined already.
            let mut rest = &kept[..];
            if own.is_none() && w != NIL {
                let chunk = chunks.get_mut(w);
                let fits = (Chunk::<T>::CAPACITY - chunk.end()).min(rest.len());
                chunk.extend(&rest[..fits]);
                rest = &rest[fits..];
            }
            if !rest.is_empty() {
                let (first, next) = own.unwrap_or((0, 0));
                chunks.get_mut(r).initialized_mut()[next..next + rest.len()].copy_from_slice(rest);
                own = Some((first, next + rest.len()));
            }
            if i < end {
                // The budget ran out inside `r`: close the gap between what was kept and what
                // is left to examine, so the slot is whole until the next call.
                let chunk = chunks.get_mut(r);
                let offset = match own {
                    Some((first, next)) => {
                        chunk.initialized_mut().copy_within(i..end, next);
                        chunk.set_live(first, next + (end - i));
                        next
                    }
                    None => {
                        chunk.set_live(i, end);
                        i
                    }
                };
                done.resume = Some(self.resume_at(chunks, w, r, offset));
                return done;
            }
            // `r` is read to its end.
            let next = chunks.get(r).next();
            match own.take() {
                Some((first, next)) => {
                    chunks.get_mut(r).set_live(first, next);
                    w = r;
                }
                None => {
                    if w == NIL {
                        self.slots[slot].head = next;
                    } else {
                        chunks.get_mut(w).set_next(next);
                    }
                    chunks.release(r);
                }
            }
            if next == NIL {
                self.slots[slot].tail = w;
                if w == NIL {
                    self.mark_empty(slot);
                }
                return done;
            }
            r = next;
            i = chunks.get(r).start();
            if done.examined == budget || done.panic.is_some() {
                done.resume = Some(self.resume_at(chunks, w, r, i));
                return done;
            }
        }
    }

    fn resume_at<T: Copy>(
        &self,
        chunks: &Chunks<T>,
        prev: u32,
        chunk: u32,
        offset: usize,
    ) -> Resume {
        Resume {
            prev,
            prev_epoch: if prev == NIL {
                0
            } else {
                chunks.get(prev).epoch()
            },
            chunk,
            chunk_epoch: chunks.get(chunk).epoch(),
            offset: offset as u32,
        }
    }

    /// The entries of `slot` in order (for tests).
    #[cfg(test)]
    pub(crate) fn entries<T: Copy>(&self, chunks: &Chunks<T>, slot: usize) -> Vec<Stored<T>> {
        let mut out = Vec::new();
        let mut id = self.slots[slot].head;
        let mut last = NIL;
        while id != NIL {
            let chunk = chunks.get(id);
            assert!(!chunk.live().is_empty(), "an empty chunk in a slot's list");
            out.extend_from_slice(chunk.live());
            last = id;
            id = chunk.next();
        }
        assert_eq!(last, self.slots[slot].tail, "the tail is the last chunk");
        if last != NIL {
            assert_eq!(
                self.slots[slot].tail_end as usize,
                chunks.get(last).end(),
                "the slot's copy of the tail's end is the tail's"
            );
        }
        assert_eq!(self.is_occupied(slot), !out.is_empty());
        out
    }

    /// Chunks `slot` holds (for tests).
    #[cfg(test)]
    pub(crate) fn chunk_count<T: Copy>(&self, chunks: &Chunks<T>, slot: usize) -> usize {
        let mut count = 0;
        let mut id = self.slots[slot].head;
        while id != NIL {
            count += 1;
            id = chunks.get(id).next();
        }
        count
    }
}

/// Hands the values of up to `count` entries, from position `at` of chunk `chunk` on, to
/// `prefetch`, following the list into the next chunks as needed.
fn prefetch_from<T: Copy>(
    chunks: &Chunks<T>,
    mut chunk: u32,
    mut at: usize,
    mut count: usize,
    prefetch: &mut impl FnMut(&T),
) {
    while count > 0 && chunk != NIL {
        let c = chunks.get(chunk);
        for entry in c.from(at).iter().take(count) {
            prefetch(&entry.value);
            count -= 1;
        }
        chunk = c.next();
        if chunk != NIL {
            at = chunks.get(chunk).start();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type E = Stored<u64>;

    const CHUNK: usize = Chunk::<u64>::CAPACITY;

    fn entry(n: u64) -> E {
        Stored::new(n, n)
    }

    /// A rotation with `n` entries 0..n in slot 5.
    fn filled(n: u64) -> (Rotation, Chunks<u64>) {
        let mut rotation = Rotation::new(64);
        let mut chunks = Chunks::default();
        for v in 0..n {
            rotation.push(&mut chunks, 5, entry(v));
        }
        (rotation, chunks)
    }

    /// Runs `retain_slot` on slot 5 in calls of `budget` until the slot is done, and returns
    /// the values examined.
    fn retain_all(
        rotation: &mut Rotation,
        chunks: &mut Chunks<u64>,
        budget: usize,
        keep: impl Fn(u64) -> bool,
    ) -> Vec<u64> {
        let mut seen = Vec::new();
        let mut resume = None;
        loop {
            let done = rotation.retain_slot::<u64, false>(
                chunks,
                5,
                resume,
                budget,
                &mut Vec::new(),
                &mut |_| {},
                &mut |e: &E| {
                    let v = e.value;
                    seen.push(v);
                    keep(v)
                },
            );
            assert!(done.examined <= budget);
            match done.resume {
                Some(at) => resume = Some(at),
                None => return seen,
            }
            // Whole between calls: in order, no empty chunk, the tail right.
            rotation.entries(chunks, 5);
        }
    }

    #[test]
    fn bitmap_search_spans_words() {
        let mut rotation = Rotation::new(256);
        let mut chunks = Chunks::default();
        assert_eq!(rotation.next_occupied(0), None);
        rotation.push(&mut chunks, 200, entry(1));
        rotation.push(&mut chunks, 3, entry(2));
        assert_eq!(rotation.next_occupied(0), Some(3));
        assert_eq!(rotation.next_occupied(4), Some(200));
        assert_eq!(rotation.next_occupied(201), None);
        assert_eq!(rotation.next_occupied(256), None);
        assert_eq!(rotation.pop_front(&mut chunks, 200), Some(entry(1)));
        assert_eq!(rotation.next_occupied(4), None);
        assert_eq!(rotation.pop_front(&mut chunks, 3), Some(entry(2)));
        assert!(rotation.is_empty());
        assert_eq!(
            chunks.spare(),
            chunks.total(),
            "every chunk back in the pool"
        );
    }

    #[test]
    fn a_slot_is_fifo_across_chunks() {
        let n = 3 * CHUNK as u64 + 5;
        let (mut rotation, mut chunks) = filled(n);
        assert_eq!(rotation.chunk_count(&chunks, 5), 4);
        for v in 0..n {
            assert_eq!(rotation.pop_front(&mut chunks, 5), Some(entry(v)));
            if v == CHUNK as u64 {
                assert_eq!(rotation.chunk_count(&chunks, 5), 3, "a used-up chunk goes");
            }
        }
        assert_eq!(rotation.pop_front(&mut chunks, 5), None);
        assert!(!rotation.is_occupied(5));
    }

    #[test]
    fn retain_in_one_go_keeps_order_and_frees_chunks() {
        let n = 10 * CHUNK as u64;
        let (mut rotation, mut chunks) = filled(n);
        let seen = retain_all(&mut rotation, &mut chunks, usize::MAX, |v| v % 3 == 0);
        assert_eq!(seen, (0..n).collect::<Vec<_>>());
        let left: Vec<u64> = rotation
            .entries(&chunks, 5)
            .iter()
            .map(|e| e.value)
            .collect();
        assert_eq!(left, (0..n).filter(|v| v % 3 == 0).collect::<Vec<_>>());
        assert_eq!(
            rotation.chunk_count(&chunks, 5),
            left.len().div_ceil(CHUNK),
            "packed"
        );
    }

    #[test]
    fn retain_in_small_steps_examines_each_entry_once() {
        // Under Miri, which checks every entry that `retain_all` reads back after each
        // step, budgets below, at and past a chunk, over three chunks and a bit.
        let (budgets, strides, n): (&[usize], &[u64], u64) = if cfg!(miri) {
            (
                &[1, 5, CHUNK, CHUNK + 1],
                &[1, 3, 1000],
                2 * CHUNK as u64 + 9,
            )
        } else {
            (
                &[1, 2, 5, CHUNK - 1, CHUNK, CHUNK + 1, 100],
                &[1, 2, 3, 7, 1000],
                4 * CHUNK as u64 + 9,
            )
        };
        for &budget in budgets {
            for &stride in strides {
                let (mut rotation, mut chunks) = filled(n);
                let seen = retain_all(&mut rotation, &mut chunks, budget, |v| v % stride == 0);
                assert_eq!(seen, (0..n).collect::<Vec<_>>(), "budget {budget}");
                let left: Vec<u64> = rotation
                    .entries(&chunks, 5)
                    .iter()
                    .map(|e| e.value)
                    .collect();
                let expected: Vec<u64> = (0..n).filter(|v| v % stride == 0).collect();
                assert_eq!(left, expected, "budget {budget}, stride {stride}");
                assert!(rotation.chunk_count(&chunks, 5) <= expected.len().div_ceil(CHUNK) + 1);
            }
        }
    }

    #[test]
    fn removing_everything_empties_the_slot() {
        let (mut rotation, mut chunks) = filled(2 * CHUNK as u64 + 1);
        retain_all(&mut rotation, &mut chunks, 7, |_| false);
        assert!(rotation.is_empty());
        assert_eq!(rotation.entries(&chunks, 5), []);
        assert_eq!(chunks.spare(), chunks.total());
        rotation.push(&mut chunks, 5, entry(1));
        assert_eq!(rotation.entries(&chunks, 5), [entry(1)]);
    }

    /// Between two steps of a compaction, the slot is used: taken from the front (past the
    /// compaction's chunk, or into it), appended to. Every entry still comes out once, in order.
    #[test]
    fn a_compaction_survives_pops_and_pushes_between_steps() {
        for pops in [0, 3, CHUNK, CHUNK + 10, 3 * CHUNK] {
            let n = 5 * CHUNK as u64;
            let (mut rotation, mut chunks) = filled(n);
            let mut examined = Vec::new();
            let mut record = |v: u64| {
                examined.push(v);
                v.is_multiple_of(2)
            };
            let first = rotation.retain_slot::<u64, false>(
                &mut chunks,
                5,
                None,
                2 * CHUNK + 10,
                &mut Vec::new(),
                &mut |_| {},
                &mut |e: &E| record(e.value),
            );
            let mut out = Vec::new();
            for _ in 0..pops {
                out.push(rotation.pop_front(&mut chunks, 5).unwrap().value);
            }
            for v in n..n + 10 {
                rotation.push(&mut chunks, 5, entry(v));
            }
            let second = rotation.retain_slot::<u64, false>(
                &mut chunks,
                5,
                first.resume,
                usize::MAX,
                &mut Vec::new(),
                &mut |_| {},
                &mut |e: &E| record(e.value),
            );
            assert!(second.resume.is_none());
            out.extend(rotation.entries(&chunks, 5).iter().map(|e| e.value));
            // After the first step: the even ones of what it examined, then the rest as it was.
            let step = 2 * CHUNK as u64 + 10;
            let after_first: Vec<u64> = (0..n).filter(|v| *v >= step || v % 2 == 0).collect();
            let mut expected = after_first[..pops].to_vec();
            expected.extend(
                after_first[pops..]
                    .iter()
                    .copied()
                    .chain(n..n + 10)
                    .filter(|v| v % 2 == 0),
            );
            assert_eq!(out, expected, "{pops} pops");
            let unique: std::collections::BTreeSet<_> = examined.iter().collect();
            assert_eq!(unique.len(), examined.len(), "{pops} pops: examined twice");
        }
    }

    #[test]
    fn prefetch_runs_ahead_of_keep() {
        let (mut rotation, mut chunks) = filled(3 * CHUNK as u64);
        let fetched = std::cell::RefCell::new(Vec::new());
        let mut kept = Vec::new();
        let done = rotation.retain_slot::<u64, true>(
            &mut chunks,
            5,
            None,
            usize::MAX,
            &mut Vec::new(),
            &mut |&v| fetched.borrow_mut().push(v),
            &mut |e: &E| {
                let v = e.value;
                kept.push((v, fetched.borrow().len()));
                true
            },
        );
        assert_eq!(done.examined, 3 * CHUNK);
        assert_eq!(
            fetched.into_inner(),
            (0..3 * CHUNK as u64).collect::<Vec<_>>()
        );
        for &(v, fetched_then) in &kept {
            let expected = (v as usize + 1 + PREFETCH_AHEAD).min(3 * CHUNK);
            assert_eq!(fetched_then, expected, "value {v}");
        }
    }
}
