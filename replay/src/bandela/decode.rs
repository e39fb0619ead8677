//! Decoding the ranks' trace files for the event loop: records numbered by
//! routine ([`Rec`]) on the decoding thread, a chunk at a time.
use super::*;

/// The ranks' trace files, decoded a chunk at a time for [`Source`]; each
/// record comes with its line.
pub(super) struct RankFiles {
    /// Per rank: its reader and where it stands (a reader handed to another
    /// decoder leaves `None`, ended, behind).
    pub(super) ranks: Vec<RankState>,
    pub(super) routines: Routines,
}

/// A rank's reader, the error it met after the records handed out last, and
/// whether its stream has ended.
pub(super) type RankState = (Option<RankTrace>, Option<FormatError>, bool);

/// A rank state with no reader, ended.
pub(super) fn no_rank() -> RankState {
    (None, None, true)
}

/// Whether a rank's stream has ended and its last error been handed out.
pub(super) fn rank_ended((_, pending, done): &RankState) -> bool {
    *done && pending.is_none()
}

/// The routines a decoder has met, its own index of the shared `names`: the
/// first [`FIRST_IDS`] searched in place, then the others hashed.
pub(super) struct Routines {
    pub(super) first_ids: Vec<(String, Fid)>,
    pub(super) ids: HashMap<String, Fid>,
    pub(super) names: Names,
}

impl Routines {
    pub(super) fn new(names: Names) -> Self {
        Self {
            first_ids: Vec::new(),
            ids: HashMap::new(),
            names,
        }
    }

    /// Appends up to `max` of `rank`'s next records to `out`; an error met
    /// after some records is kept in `rank` for the next call.
    fn fill(
        &mut self,
        (trace, pending, done): &mut RankState,
        out: &mut Vec<(Rec, u64)>,
        max: usize,
    ) -> std::result::Result<(), FormatError> {
        if let Some(e) = pending.take() {
            return Err(e);
        }
        let Some(trace) = trace else {
            return Ok(());
        };
        let start = out.len();
        while !*done && out.len() - start < max {
            match trace.next_record() {
                Ok(Some(r)) => {
                    // The routine's name becomes its number here, on the
                    // decoding thread, so that no name is allocated on one
                    // thread and freed on the other, nor compared per record.
                    let rec = match r {
                        BRecord::Kernel {
                            main_fn: name,
                            kernel,
                            ..
                        } => {
                            // A trace names a few routines: the first ones
                            // are searched in place, faster than a hash.
                            let f = match self.first_ids.iter().find(|(n, _)| *n == name) {
                                Some(&(_, f)) => {
                                    trace.reuse_name(name);
                                    f
                                }
                                None => match self.ids.get(&name) {
                                    Some(&f) => {
                                        trace.reuse_name(name);
                                        f
                                    }
                                    None => {
                                        let f = intern(&self.names, &name);
                                        if self.first_ids.len() < FIRST_IDS {
                                            self.first_ids.push((name, f));
                                        } else {
                                            self.ids.insert(name, f);
                                        }
                                        f
                                    }
                                },
                            };
                            Rec::Kernel(kernel, f)
                        }
                        BRecord::Compute { seconds, caliper } => Rec::Compute { seconds, caliper },
                        BRecord::Comm { id, ranks } => Rec::Comm(Box::new((id, ranks))),
                        BRecord::CaliperPush(c) => Rec::CaliperPush(c),
                        BRecord::CaliperPop => Rec::CaliperPop,
                        BRecord::IgnoreNextCol(c) => Rec::IgnoreNextCol(c),
                    };
                    out.push((rec, trace.line()));
                }
                Ok(None) => *done = true,
                Err(e) => {
                    *done = true;
                    if out.len() == start {
                        return Err(e);
                    }
                    *pending = Some(e);
                }
            }
        }
        Ok(())
    }
}

impl Decode for RankFiles {
    type Rec = (Rec, u64);

    fn ntasks(&self) -> usize {
        self.ranks.len()
    }

    fn fill(
        &mut self,
        t: usize,
        out: &mut Vec<(Rec, u64)>,
        max: usize,
    ) -> std::result::Result<(), FormatError> {
        match self.ranks.get_mut(t) {
            Some(rank) => self.routines.fill(rank, out, max),
            None => Ok(()),
        }
    }

    fn is_done(&self, t: usize) -> bool {
        self.ranks.get(t).is_none_or(rank_ended)
    }

    /// A rank's reader is decoded by whichever thread gets to its next
    /// chunk first (docs/replay.md, "Two cores").
    fn shares_tasks() -> bool {
        true
    }

    fn fill_task(
        &mut self,
        _t: usize,
        rank: &mut RankState,
        out: &mut Vec<(Rec, u64)>,
        max: usize,
    ) -> std::result::Result<(), FormatError> {
        self.routines.fill(rank, out, max)
    }

    fn task_done(&self, _t: usize, rank: &RankState) -> bool {
        rank_ended(rank)
    }

    /// 16 records per rank at 1,024 ranks: each rank reads from its own
    /// buffered file, so a fill is cheap, and chunks of 59 (the 6 MB budget)
    /// made the one-thread replay 25 % slower by leaving the cache.
    fn sequential_budget() -> usize {
        2 << 20
    }

    type Task = RankState;

    fn take_task(&mut self, t: usize) -> Option<RankState> {
        self.ranks
            .get_mut(t)
            .map(|rank| std::mem::replace(rank, no_rank()))
    }

    fn put_task(&mut self, t: usize, state: RankState) {
        if let Some(rank) = self.ranks.get_mut(t) {
            *rank = state;
        }
    }

    fn split_off(&mut self, mine: &[bool]) -> Option<Self> {
        let mut other = RankFiles {
            ranks: (0..self.ranks.len()).map(|_| no_rank()).collect(),
            routines: Routines::new(self.routines.names.clone()),
        };
        for t in mine.iter().enumerate().filter(|(_, m)| **m).map(|(t, _)| t) {
            if let Some(task) = self.take_task(t) {
                other.put_task(t, task);
            }
        }
        Some(other)
    }
}

/// Routines the decoder looks up in place before it hashes.
pub(super) const FIRST_IDS: usize = 24;

/// A routine (`main_fn`) by its number in [`Names`].
pub(super) type Fid = u32;

/// Routine names by number, shared by the decoding thread (which numbers
/// them as it meets them) and the event loop (which needs a name only for a
/// result or a message).
pub(super) type Names = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// `name`'s number in `names`, added if new.
pub(super) fn intern(names: &Names, name: &str) -> Fid {
    let mut list = names
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match list.iter().position(|n| n == name) {
        Some(f) => f as Fid,
        None => {
            list.push(name.to_string());
            (list.len() - 1) as Fid
        }
    }
}
