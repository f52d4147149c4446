//! The input side of a [`crate::MultiPipeline`]: one bounded queue per stream (frames and
//! commands in push order, the stream's drop policy, its stats), and the round-robin pick of
//! the next frames to run, at most one per stream per round.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::atomic::AtomicU64;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Instant;

use crossbeam_channel::Sender;
use edgetam_tracker::util::lock;
use edgetam_tracker::Frame;

use crate::error::{Error, Result};
use crate::queue::{Command, Item};
use crate::stats::{Stats, StatsCollector};
use crate::track_stage::TrackStage;
use crate::types::{DropPolicy, FrameId, FrameOutput, Outcome, StreamId, StreamOutput};

/// What the workers send to the output queue: a result, or the error that stopped them.
pub(crate) type MultiMsg = Result<StreamOutput>;

/// One entry of a stream's queue.
pub(crate) enum Entry {
    /// The stream's tracking state, ahead of everything pushed to it.
    Open(Box<TrackStage>),
    Item(Item),
}

/// What a round hands the workers.
pub(crate) enum Scheduled {
    /// A stream's commands and dropped markers up to and including its next frame.
    Segment(StreamId, Vec<Entry>),
    /// The stream was removed: its tracking state goes.
    Close(StreamId),
}

struct StreamQueue {
    entries: VecDeque<Entry>,
    /// Real frames in `entries`.
    frames: usize,
    next_id: FrameId,
    capacity: usize,
    policy: DropPolicy,
    stats: StatsCollector,
}

#[derive(Default)]
struct State {
    streams: BTreeMap<StreamId, StreamQueue>,
    /// Removed streams whose tracking state the workers still hold.
    closing: Vec<StreamId>,
    next_stream: u64,
    /// The stream served last: the next round starts after it.
    cursor: Option<StreamId>,
    finished: bool,
    cancelled: bool,
    failed: Option<String>,
}

impl State {
    fn closed(&self) -> Option<Error> {
        if let Some(m) = &self.failed {
            Some(Error::WorkerFailed(m.clone()))
        } else if self.cancelled || self.finished {
            Some(Error::Closed)
        } else {
            None
        }
    }

    fn stream(&mut self, id: StreamId) -> Result<&mut StreamQueue> {
        self.streams
            .get_mut(&id)
            .ok_or(Error::UnknownStream(id.get()))
    }

    /// Every stream, starting after the one served last.
    fn round_order(&self) -> Vec<StreamId> {
        let after = match self.cursor {
            Some(c) => Bound::Excluded(c),
            None => Bound::Unbounded,
        };
        let first = self.streams.range((after, Bound::Unbounded));
        let rest = self
            .streams
            .range(..)
            .take_while(|(id, _)| match self.cursor {
                Some(c) => **id <= c,
                None => false,
            });
        first.chain(rest).map(|(id, _)| *id).collect()
    }
}

/// The streams' queues, shared by the handle (pushes) and the encoder thread (rounds).
#[derive(Default)]
pub(crate) struct MultiShared {
    state: Mutex<State>,
    not_empty: Condvar,
    not_full: Condvar,
    /// Image-encoder calls that ran on more than one frame (tests check batching happened).
    pub(crate) batched_calls: AtomicU64,
}

impl MultiShared {
    fn wake_all(&self) {
        self.not_empty.notify_all();
        self.not_full.notify_all();
    }

    pub(crate) fn cancel(&self) {
        lock(&self.state).cancelled = true;
        self.wake_all();
    }

    pub(crate) fn finish(&self) {
        lock(&self.state).finished = true;
        self.wake_all();
    }

    pub(crate) fn fail(&self, msg: String) {
        lock(&self.state).failed.get_or_insert(msg);
        self.wake_all();
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        let s = lock(&self.state);
        s.cancelled || s.failed.is_some()
    }

    /// A new stream whose queue starts with its tracking state.
    pub(crate) fn add_stream(
        &self,
        capacity: usize,
        policy: DropPolicy,
        stage: TrackStage,
    ) -> Result<StreamId> {
        let mut s = lock(&self.state);
        if let Some(e) = s.closed() {
            return Err(e);
        }
        let id = StreamId(s.next_stream);
        s.next_stream += 1;
        let queue = StreamQueue {
            entries: VecDeque::from([Entry::Open(Box::new(stage))]),
            frames: 0,
            next_id: 0,
            capacity,
            policy,
            stats: StatsCollector::default(),
        };
        s.streams.insert(id, queue);
        drop(s);
        self.not_empty.notify_all();
        Ok(id)
    }

    /// Removes a stream, discarding what it has queued; returns its final stats.
    pub(crate) fn remove_stream(&self, id: StreamId) -> Result<Stats> {
        let mut s = lock(&self.state);
        let q = s
            .streams
            .remove(&id)
            .ok_or(Error::UnknownStream(id.get()))?;
        s.closing.push(id);
        drop(s);
        // A pusher blocked on the stream's room wakes to find it gone.
        self.wake_all();
        Ok(q.stats.snapshot())
    }

    pub(crate) fn streams(&self) -> Vec<StreamId> {
        lock(&self.state).streams.keys().copied().collect()
    }

    pub(crate) fn stats(&self, id: StreamId) -> Result<Stats> {
        Ok(lock(&self.state).stream(id)?.stats.snapshot())
    }

    /// Queues a frame on its stream under the stream's drop policy (see `queue.rs`, whose
    /// policies these are, per stream).
    pub(crate) fn push_frame(&self, id: StreamId, frame: Frame<'static>) -> Result<FrameId> {
        let mut s = lock(&self.state);
        loop {
            if let Some(e) = s.closed() {
                return Err(e);
            }
            let q = s.stream(id)?;
            if q.frames < q.capacity {
                break;
            }
            match q.policy {
                DropPolicy::Block => {
                    s = self
                        .not_full
                        .wait(s)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                DropPolicy::DropOldest => {
                    let oldest = q
                        .entries
                        .iter_mut()
                        .find(|e| matches!(e, Entry::Item(Item::Frame { .. })));
                    if let Some(Entry::Item(item)) = oldest {
                        if let Item::Frame { id, frame, .. } = item {
                            let timestamp = frame.timestamp();
                            *item = Item::Dropped { id: *id, timestamp };
                        }
                        q.frames -= 1;
                        q.stats.frames_dropped += 1;
                    }
                    break;
                }
                DropPolicy::DropNewest => {
                    let fid = q.next_id;
                    q.next_id += 1;
                    let timestamp = frame.timestamp();
                    q.entries
                        .push_back(Entry::Item(Item::Dropped { id: fid, timestamp }));
                    q.stats.pushed(Instant::now());
                    q.stats.frames_dropped += 1;
                    drop(s);
                    self.not_empty.notify_all();
                    return Ok(fid);
                }
            }
        }
        let q = s.stream(id)?;
        let fid = q.next_id;
        q.next_id += 1;
        let pushed = Instant::now();
        q.stats.pushed(pushed);
        q.entries.push_back(Entry::Item(Item::Frame {
            id: fid,
            frame,
            pushed,
        }));
        q.frames += 1;
        drop(s);
        self.not_empty.notify_all();
        Ok(fid)
    }

    pub(crate) fn push_command(&self, id: StreamId, c: Command) -> Result<()> {
        let mut s = lock(&self.state);
        if let Some(e) = s.closed() {
            return Err(e);
        }
        s.stream(id)?
            .entries
            .push_back(Entry::Item(Item::Command(c)));
        drop(s);
        self.not_empty.notify_all();
        Ok(())
    }

    /// The next round: closes first, then, in round-robin order from the stream after the one
    /// served last, each stream's entries up to and including its next frame, until
    /// `max_frames` frames are taken. Waits while nothing is queued; `None` when the pipeline
    /// stops, or is finished and drained.
    pub(crate) fn next_round(&self, max_frames: usize) -> Option<Vec<Scheduled>> {
        let mut s = lock(&self.state);
        loop {
            if s.cancelled || s.failed.is_some() {
                return None;
            }
            let mut round: Vec<Scheduled> = s.closing.drain(..).map(Scheduled::Close).collect();
            let mut frames = 0;
            for id in s.round_order() {
                if frames >= max_frames {
                    break;
                }
                let Some(q) = s.streams.get_mut(&id) else {
                    continue;
                };
                let mut taken = Vec::new();
                while let Some(e) = q.entries.pop_front() {
                    let is_frame = matches!(e, Entry::Item(Item::Frame { .. }));
                    taken.push(e);
                    if is_frame {
                        q.frames -= 1;
                        frames += 1;
                        break;
                    }
                }
                if !taken.is_empty() {
                    s.cursor = Some(id);
                    round.push(Scheduled::Segment(id, taken));
                }
            }
            if !round.is_empty() {
                drop(s);
                if frames > 0 {
                    self.not_full.notify_all();
                }
                return Some(round);
            }
            if s.finished {
                return None;
            }
            s = self
                .not_empty
                .wait(s)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Hands a stream's result out, counted in its stats; the result of a stream removed
    /// meanwhile is discarded. False once nobody reads results any more.
    pub(crate) fn emit(&self, out: &Sender<MultiMsg>, stream: StreamId, o: FrameOutput) -> bool {
        // Sent under the lock, so that nothing of a stream follows its removal's return.
        let mut s = lock(&self.state);
        let Some(q) = s.streams.get_mut(&stream) else {
            return true;
        };
        if !o.is_dropped() {
            let failed = matches!(o.outcome, Outcome::Failed(_));
            q.stats.processed(&o.timings, failed);
        }
        out.send(Ok(StreamOutput { stream, output: o })).is_ok()
    }
}
