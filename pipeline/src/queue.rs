//! The input queue: frames and commands in push order, bounded in frames, with the drop
//! policies; the workers pop from it and emit results through it.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use edgetam_tracker::{Frame, ObjectPrompt};

use crate::error::{Error, Result};
use crate::stats::{StageTimings, StatsCollector};
use crate::types::{DropPolicy, FrameId, FrameOutput, Outcome};

/// What the workers send to the output queue: a result, or the error that stopped them.
pub(crate) type Msg = Result<FrameOutput>;

#[derive(Debug)]
pub(crate) enum Command {
    AddPrompt(u32, ObjectPrompt),
    Remove(u32),
    Reset,
}

pub(crate) enum Item {
    Frame {
        id: FrameId,
        frame: Frame<'static>,
        pushed: Instant,
    },
    Dropped {
        id: FrameId,
        timestamp: Option<Duration>,
    },
    Command(Command),
}

struct QueueState {
    items: VecDeque<Item>,
    /// Real frames in `items` (not commands or dropped markers).
    frames: usize,
    next_id: FrameId,
    finished: bool,
    cancelled: bool,
    failed: Option<String>,
}

pub(crate) struct Shared {
    state: Mutex<QueueState>,
    not_empty: Condvar,
    not_full: Condvar,
    pub(crate) stats: Mutex<StatsCollector>,
    capacity: usize,
    policy: DropPolicy,
    #[cfg(feature = "tokio")]
    pub(crate) space: tokio::sync::Notify,
    #[cfg(feature = "tokio")]
    pub(crate) results: tokio::sync::Notify,
}

pub(crate) enum PushError {
    /// `Block` policy, queue full, and the caller does not want to wait: the frame back.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    Full(Frame<'static>),
    Failed(Error),
}

/// The poison-tolerant lock every front end uses (a worker's panic is reported as an error on
/// the output queue; the queue's state stays whole).
pub(crate) use edgetam_tracker::util::lock;

impl Shared {
    pub(crate) fn new(capacity: usize, policy: DropPolicy) -> Self {
        Self {
            state: Mutex::new(QueueState {
                items: VecDeque::new(),
                frames: 0,
                next_id: 0,
                finished: false,
                cancelled: false,
                failed: None,
            }),
            not_empty: Condvar::new(),
            not_full: Condvar::new(),
            stats: Mutex::new(StatsCollector::default()),
            capacity,
            policy,
            #[cfg(feature = "tokio")]
            space: tokio::sync::Notify::new(),
            #[cfg(feature = "tokio")]
            results: tokio::sync::Notify::new(),
        }
    }

    fn closed(s: &QueueState) -> Option<Error> {
        if let Some(m) = &s.failed {
            Some(Error::WorkerFailed(m.clone()))
        } else if s.cancelled || s.finished {
            Some(Error::Closed)
        } else {
            None
        }
    }

    fn wake_all(&self) {
        self.not_empty.notify_all();
        self.not_full.notify_all();
        #[cfg(feature = "tokio")]
        self.space.notify_waiters();
    }

    pub(crate) fn notify_results(&self) {
        #[cfg(feature = "tokio")]
        self.results.notify_waiters();
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
        lock(&self.state).cancelled
    }

    pub(crate) fn enqueue_frame(
        &self,
        frame: Frame<'static>,
        block: bool,
    ) -> std::result::Result<FrameId, PushError> {
        let mut s = lock(&self.state);
        loop {
            if let Some(e) = Self::closed(&s) {
                return Err(PushError::Failed(e));
            }
            if s.frames < self.capacity {
                break;
            }
            match self.policy {
                DropPolicy::Block if block => {
                    s = self
                        .not_full
                        .wait(s)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                DropPolicy::Block => return Err(PushError::Full(frame)),
                DropPolicy::DropOldest => {
                    let oldest = s.items.iter_mut().find(|i| matches!(i, Item::Frame { .. }));
                    if let Some(item) = oldest {
                        if let Item::Frame { id, frame, .. } = item {
                            let marker = Item::Dropped {
                                id: *id,
                                timestamp: frame.timestamp(),
                            };
                            *item = marker;
                        }
                        s.frames -= 1;
                        lock(&self.stats).frames_dropped += 1;
                    }
                    break;
                }
                DropPolicy::DropNewest => {
                    let id = s.next_id;
                    s.next_id += 1;
                    s.items.push_back(Item::Dropped {
                        id,
                        timestamp: frame.timestamp(),
                    });
                    {
                        let mut st = lock(&self.stats);
                        st.pushed(Instant::now());
                        st.frames_dropped += 1;
                    }
                    drop(s);
                    self.not_empty.notify_all();
                    return Ok(id);
                }
            }
        }
        let id = s.next_id;
        s.next_id += 1;
        let pushed = Instant::now();
        lock(&self.stats).pushed(pushed);
        s.items.push_back(Item::Frame { id, frame, pushed });
        s.frames += 1;
        drop(s);
        self.not_empty.notify_all();
        Ok(id)
    }

    pub(crate) fn enqueue_command(&self, c: Command) -> Result<()> {
        let mut s = lock(&self.state);
        if let Some(e) = Self::closed(&s) {
            return Err(e);
        }
        s.items.push_back(Item::Command(c));
        drop(s);
        self.not_empty.notify_all();
        Ok(())
    }

    /// The next item for the first worker; `None` when the pipeline stops or the input is
    /// finished and drained.
    pub(crate) fn pop(&self) -> Option<Item> {
        let mut s = lock(&self.state);
        loop {
            if s.cancelled || s.failed.is_some() {
                return None;
            }
            if let Some(item) = s.items.pop_front() {
                if matches!(item, Item::Frame { .. }) {
                    s.frames -= 1;
                    drop(s);
                    self.not_full.notify_all();
                    #[cfg(feature = "tokio")]
                    self.space.notify_waiters();
                }
                return Some(item);
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

    pub(crate) fn emit(&self, out: &Sender<Msg>, o: FrameOutput) -> bool {
        if !o.is_dropped() {
            lock(&self.stats).processed(&o.timings, matches!(o.outcome, Outcome::Failed(_)));
        }
        let ok = out.send(Ok(o)).is_ok();
        self.notify_results();
        ok
    }
}

pub(crate) fn dropped_output(id: FrameId, timestamp: Option<Duration>) -> FrameOutput {
    FrameOutput {
        id,
        timestamp,
        outcome: Outcome::Dropped,
        resolution_changed: false,
        command_errors: Vec::new(),
        timings: StageTimings::default(),
    }
}
