//! A public call's compute threads kept at hand between its ops.
//!
//! Every op hands its tasks to the other workers and waits for them. Through `rayon::scope`
//! each hand-out is a spawn that the idle workers must notice: rayon parks a worker after a few
//! rounds of `yield_now`, and on a shared machine a yield gives the core to another process
//! until its time slice ends. The other workers then joined an op late or not at all, and a
//! frame runs several hundred ops.
//!
//! A [`Team`] holds the other workers of the pool for one public call (a frame): each spins on
//! the team's job counter, joins an op the moment it is published and takes tasks from the same
//! queue as the leader (the thread that runs the call). Only the threads change, not the tasks
//! or what each computes, so results are the same bits. An idle helper spins for [`SPIN`], then
//! yields between checks, so candle's own pool and other processes get the core back when the
//! call does serial work for long.

use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

// Poison-tolerant: the protected state stays consistent across a panic (plain counters and a
// pointer).
use crate::util::lock;

/// How long an idle helper (or a leader waiting for helpers) spins before yielding between
/// checks: longer than the serial work between most ops.
const SPIN: Duration = Duration::from_micros(100);

/// A published op: the leader's task loop, borrowed for as long as the op is open.
#[derive(Clone, Copy)]
struct JobPtr(*const (dyn Fn() + Sync + 'static));

// SAFETY: the pointee is `Sync`, and the leader keeps it alive until every helper that took the
// pointer has finished with it (`Team::run`).
unsafe impl Send for JobPtr {}

/// The op currently open for joining.
struct Slot {
    job: Option<JobPtr>,
    /// Helpers that may still join (the op's workers beyond the leader, minus those joined).
    places: usize,
    /// Helpers that joined.
    joined: usize,
}

/// The other workers of one public call, spinning for its ops.
pub(crate) struct Team {
    /// Bumped on each publish: what idle helpers spin on.
    generation: AtomicU64,
    /// Helpers finished with the current op.
    done: AtomicUsize,
    stop: AtomicBool,
    slot: Mutex<Slot>,
    /// A helper's panic, re-raised on the leader.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

thread_local! {
    /// The team this thread leads, while it is not inside one of the team's ops.
    static LEADING: Cell<Option<*const Team>> = const { Cell::new(None) };
}

/// Spins (then yields) until `ready()`.
fn wait_until(ready: impl Fn() -> bool) {
    let start = Instant::now();
    while !ready() {
        if start.elapsed() < SPIN {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

impl Team {
    fn new() -> Self {
        Self {
            generation: AtomicU64::new(0),
            done: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            slot: Mutex::new(Slot {
                job: None,
                places: 0,
                joined: 0,
            }),
            panic: Mutex::new(None),
        }
    }

    /// A helper's life: join each op published until the call ends.
    fn help(&self) {
        let mut seen = 0;
        let mut idle = Instant::now();
        while !self.stop.load(Ordering::Acquire) {
            let generation = self.generation.load(Ordering::Acquire);
            if generation == seen {
                if idle.elapsed() < SPIN {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
                continue;
            }
            seen = generation;
            let job = {
                let mut slot = lock(&self.slot);
                match slot.job {
                    Some(job) if slot.places > 0 => {
                        slot.places -= 1;
                        slot.joined += 1;
                        Some(job)
                    }
                    _ => None,
                }
            };
            if let Some(job) = job {
                // SAFETY: joined under the lock while the op was open; the leader does not end
                // the job's borrow before `done` counts this helper (`Team::run`).
                let result = catch_unwind(AssertUnwindSafe(|| unsafe { (*job.0)() }));
                if let Err(payload) = result {
                    lock(&self.panic).get_or_insert(payload);
                }
                self.done.fetch_add(1, Ordering::Release);
            }
            idle = Instant::now();
        }
    }

    /// Runs `job` on this thread and on up to `helpers` team members that join it, returning
    /// once every member that joined has finished (a member's panic is raised here).
    fn run(&self, helpers: usize, job: &(dyn Fn() + Sync)) {
        // SAFETY: only the lifetime is erased. `Close` below, on return and on unwinding alike,
        // shuts the op and waits until every helper that took the pointer is done with it, so
        // no helper dereferences it after `job`'s borrow ends.
        let ptr = JobPtr(unsafe {
            std::mem::transmute::<*const (dyn Fn() + Sync + '_), *const (dyn Fn() + Sync + 'static)>(
                job,
            )
        });
        {
            let mut slot = lock(&self.slot);
            slot.job = Some(ptr);
            slot.places = helpers;
            slot.joined = 0;
            self.done.store(0, Ordering::Relaxed);
        }
        self.generation.fetch_add(1, Ordering::Release);

        /// Shuts the op and waits for the helpers that joined it.
        struct Close<'a>(&'a Team);
        impl Drop for Close<'_> {
            fn drop(&mut self) {
                let joined = {
                    let mut slot = lock(&self.0.slot);
                    slot.job = None;
                    slot.places = 0;
                    slot.joined
                };
                wait_until(|| self.0.done.load(Ordering::Acquire) >= joined);
            }
        }
        let close = Close(self);
        // Nested ops inside the job run without the team (its members are busy with this one).
        let lead = LEADING.replace(None);
        /// Leads again once the job is over.
        struct Resume(Option<*const Team>);
        impl Drop for Resume {
            fn drop(&mut self) {
                LEADING.set(self.0);
            }
        }
        let resume = Resume(lead);
        job();
        drop(resume);
        drop(close);
        if let Some(payload) = lock(&self.panic).take() {
            resume_unwind(payload);
        }
    }
}

/// Runs `job` on the calling thread and, when it leads a team (inside [`lead`]), on up to
/// `helpers` members; `false` (nothing run) when it leads none.
pub(crate) fn run_with_team(helpers: usize, job: &(dyn Fn() + Sync)) -> bool {
    let Some(team) = LEADING.get() else {
        return false;
    };
    // SAFETY: `LEADING` holds a team only while `lead` keeps it alive on this thread's stack.
    unsafe { &*team }.run(helpers, job);
    true
}

/// Runs `f` on the calling thread (a worker of the compute pool) as the leader of a team of the
/// pool's other workers, or as it is when the pool has one thread or this thread leads already.
pub(crate) fn lead<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let threads = rayon::current_num_threads();
    if threads < 2 || LEADING.get().is_some() || rayon::current_thread_index().is_none() {
        return f();
    }
    let team = Team::new();
    /// Ends the helpers' loops (also when `f` panics), so the scope can finish.
    struct Stop<'a>(&'a Team);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.stop.store(true, Ordering::Release);
            LEADING.set(None);
        }
    }
    rayon::scope(|scope| {
        for _ in 1..threads {
            scope.spawn(|_| team.help());
        }
        let _stop = Stop(&team);
        LEADING.set(Some(&team as *const Team));
        f()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ops run inside a team cover every task once, nested ops run without it, and a task's
    /// panic reaches the caller.
    #[test]
    fn team_runs_every_task_once() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .expect("pool");
        let sums = pool.install(|| {
            lead(|| {
                (0..50)
                    .map(|n| {
                        let total = AtomicUsize::new(0);
                        let next = AtomicUsize::new(0);
                        let job = || loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            if i >= n {
                                break;
                            }
                            // A nested op inside a task runs in place.
                            assert!(!run_with_team(1, &|| {}));
                            total.fetch_add(i + 1, Ordering::Relaxed);
                        };
                        assert!(run_with_team(2, &job));
                        total.into_inner()
                    })
                    .collect::<Vec<_>>()
            })
        });
        let want: Vec<usize> = (0..50).map(|n| n * (n + 1) / 2).collect();
        assert_eq!(sums, want);
        let caught = pool.install(|| {
            catch_unwind(AssertUnwindSafe(|| {
                lead(|| {
                    let job = || panic!("task failed");
                    run_with_team(2, &job);
                })
            }))
        });
        assert!(caught.is_err());
    }
}
