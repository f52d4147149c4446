//! The compute threads every CPU kernel runs on: how many (one setting for candle and the
//! kernels), how tasks are handed out, and outputs written in parallel chunks without a serial
//! zeroing pass.

/// Number of worker threads for CPU kernels (shared by every custom op of the crate): the size
/// of the rayon pool the caller runs in, which is the pool candle's matrix products use too,
/// so one setting bounds the whole model. Outside any pool that is rayon's global pool
/// (`RAYON_NUM_THREADS`, else every core); inside a pool of its own (the pipeline's
/// `threads(n)`, each stage of encoder-ahead on its own cores) that pool's size.
pub(crate) fn threads() -> usize {
    rayon::current_num_threads().max(1)
}

/// Runs `f` on a worker of the compute pool (rayon's global pool) when the caller is not on one
/// already, blocking the caller until it returns; on a worker (a pipeline stage's pool, or
/// nested calls) it runs in place.
///
/// Every kernel hands its tasks to the pool with `rayon::scope`. From a thread outside the pool
/// (an application's own thread, the serial pipeline stage) each such call queues a job, wakes
/// a worker and puts the caller to sleep until it ends: a round trip through the scheduler for
/// every op, several hundred per tracked frame. Entering the pool once per public call keeps the
/// ops' scopes on workers that are already awake. Only the threads change, not the tasks or what
/// each computes, so results are the same bits.
///
/// The call then leads a team of the pool's other workers ([`super::team`]): they wait
/// for its ops spinning, instead of being woken through rayon for each one.
pub(crate) fn on_compute_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() {
        return super::team::lead(f);
    }
    rayon::scope(|_| super::team::lead(f))
}

/// How many `pause`s candle's elementwise pool threads spin after an op before parking, unless
/// `CANDLE_BARRIER_POOL_SPIN_LIMIT` says otherwise: tens of microseconds, enough to catch
/// back-to-back ops. candle 0.11's default, 25,000 (about 0.6 ms after *every* large
/// elementwise op), kept a core busy spinning beside the kernels' workers (measured in
/// BENCHMARKS.md, "candle's idle spinning").
pub const CANDLE_SPIN_LIMIT: u32 = 1000;

/// Process-wide settings of the compute threads, for the start of `main` (before any thread
/// exists: the environment is process-wide and not safe to change while other threads read it).
/// Each applies only when its variable is unset, so the user's environment wins:
///
/// * `RAYON_NUM_THREADS` := the detected core count, so that candle's matrix products stop
///   re-detecting it (reading `/proc/cpuinfo`) on every call.
/// * `CANDLE_BARRIER_POOL_SPIN_LIMIT` := [`CANDLE_SPIN_LIMIT`]: candle runs elementwise ops of
///   64 Ki values and more on a pool of its own whose idle threads otherwise spin for ~0.6 ms
///   after each op, taking a core from the kernels' workers. The pool reads it once, when
///   candle first uses it.
pub fn pin_default_threads() {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let n = candle_core::utils::get_num_threads().max(1);
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    }
    if std::env::var_os("CANDLE_BARRIER_POOL_SPIN_LIMIT").is_none() {
        std::env::set_var(
            "CANDLE_BARRIER_POOL_SPIN_LIMIT",
            CANDLE_SPIN_LIMIT.to_string(),
        );
    }
}

/// Runs `f` inside a function compiled for the widest x86 vector set in effect (AVX-512F, or
/// AVX2 + FMA), else as it is (on the portable path, where `f32::mul_add` is an instruction:
/// [`with_scalar_fma`]). The worker threads run baseline x86-64 code (SSE2); `f`'s loops
/// (inlined into that function, so write them `#[inline(always)]`) then vectorize 16 or 8
/// floats wide. Only the vector width changes: the compiler never fuses a multiply and an add
/// on its own nor reorders float sums, so with no `mul_add` in `f` the results are the same
/// bits on every path. On aarch64 NEON is baseline: `f` runs as it is, 4 floats wide.
#[inline(always)]
pub(crate) fn wide<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        use super::cpu::Isa;
        match super::cpu::in_effect() {
            Isa::Avx512 => {
                #[target_feature(enable = "avx512f")]
                unsafe fn run<R>(f: impl FnOnce() -> R) -> R {
                    f()
                }
                // SAFETY: the CPU supports AVX-512F (the ISA in effect never exceeds the CPU).
                return unsafe { run(f) };
            }
            Isa::Avx2 => {
                #[target_feature(enable = "avx2,fma")]
                unsafe fn run<R>(f: impl FnOnce() -> R) -> R {
                    f()
                }
                // SAFETY: the CPU supports AVX2 and FMA (as above).
                return unsafe { run(f) };
            }
            Isa::Portable => return with_scalar_fma(f),
            Isa::Neon => {}
        }
    }
    f()
}

/// Runs `f` where `f32::mul_add` is one instruction: inside a function compiled with FMA when
/// the CPU has it (x86), else as it is. For the portable path's scalar helpers (`exp_neg`,
/// `gelu_scalar`): baseline x86-64 code reaches the same fused multiply-add through a library
/// call per value (`fmaf`, which itself runs FMA on such a CPU), a fifth of the portable
/// path's time in the parity tests. The results are the same bits: a fused multiply-add rounds
/// once wherever it runs, and the compiler never fuses or reorders anything else. The portable
/// vectors ([`crate::kernels::simd::Portable`]) stay unfused: they never call `mul_add`.
#[inline(always)]
pub(crate) fn with_scalar_fma<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if super::cpu::has_scalar_fma() {
        #[target_feature(enable = "fma")]
        unsafe fn run<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        // SAFETY: the CPU has FMA (probed just above).
        return unsafe { run(f) };
    }
    f()
}

/// Tasks per worker an op is cut into where its work allows: tasks are handed out one by one,
/// so when the last one starts the other workers wait for about half a task, and the small maps
/// of the 512 input made only one or two tasks per worker.
pub(crate) const TASKS_PER_WORKER: usize = 8;

/// Least work per task (multiply-adds) worth a hand-out of its own: below it the second
/// worker's wake-up costs about what the split saves.
pub(crate) const MIN_TASK_MACS: usize = 1 << 21;

/// Units (rows, pixels) per task for an op over `units` units of `macs_per_unit` multiply-adds
/// each: `max`, or fewer where that leaves fewer than [`TASKS_PER_WORKER`] tasks per worker,
/// a multiple of `quantum` (the register tile's rows, or a packed panel's columns) and at least
/// [`MIN_TASK_MACS`] of work. Only how the work is cut changes, never what each output sums.
pub(crate) fn units_per_task(
    units: usize,
    max: usize,
    quantum: usize,
    macs_per_unit: usize,
) -> usize {
    let quantum = quantum.max(1);
    let wanted = units.div_ceil(TASKS_PER_WORKER * threads());
    let least = MIN_TASK_MACS.div_ceil(macs_per_unit.max(1));
    let per = wanted.max(least).next_multiple_of(quantum);
    per.clamp(1, max.max(1))
}

/// Runs `work` on every task on up to `workers` threads (the caller's included), handing the
/// tasks out one by one (the machine is shared, so a static split would leave cores idle), with
/// per-worker scratch made by `scratch` (buffers reused across tasks).
pub(crate) fn run_tasks_with<T: Send, S>(
    tasks: Vec<T>,
    workers: usize,
    scratch: impl Fn() -> S + Sync,
    work: impl Fn(&mut S, T) + Sync,
) {
    let workers = workers.clamp(1, tasks.len().max(1));
    let queue = std::sync::Mutex::new(tasks.into_iter());
    let run = || {
        let mut s = scratch();
        loop {
            // A poisoned lock means another worker panicked; stop taking work.
            let next = match queue.lock() {
                Ok(mut it) => it.next(),
                Err(_) => None,
            };
            let Some(task) = next else { break };
            work(&mut s, task);
        }
    };
    if workers == 1 {
        run();
        return;
    }
    // Inside a public call the team's members join (see `on_compute_pool`).
    if super::team::run_with_team(workers - 1, &run) {
        return;
    }
    // rayon's pool (the one candle's ops use, sized by `RAYON_NUM_THREADS`) keeps its threads:
    // no thread start per call.
    rayon::scope(|scope| {
        for _ in 1..workers {
            scope.spawn(|_| run());
        }
        run();
    });
}

/// A new `len`-float output, filled chunk by chunk (`chunk` floats each, the last one shorter)
/// by `work(chunk_index, chunk)` on up to `threads()` workers.
///
/// Each worker zeroes its chunk right before `work` sees it, instead of `vec![0; len]` zeroing
/// the whole buffer on the calling thread first: with freed buffers kept in the heap
/// (`instrument::allocator`) that up-front `memset` ran serial and out of cache (BENCHMARKS.md, "Kernel notes").
/// `work` sees zeros, as with `vec!`.
pub(crate) fn output_in_chunks(
    len: usize,
    chunk: usize,
    work: impl Fn(usize, &mut [f32]) + Sync,
) -> Vec<f32> {
    output_in_chunks_with(len, chunk, || (), |_, i, c| work(i, c))
}

/// `vec![0f32; len]`, zeroed by the workers in parallel chunks: for the ops' multi-MiB outputs
/// the serial `memset` of a `calloc` that reuses freed heap memory (`instrument::allocator`) left
/// the other cores idle.
pub(crate) fn zeroed(len: usize) -> Vec<f32> {
    output_in_chunks(len, 1 << 16, |_, _| {})
}

/// An output of `entries` blocks of `rows x width` values cut into tasks of at most
/// `rows_per_task` rows that never straddle two blocks: `(entry, first_row, chunk)` (the
/// attention ops' query tiles).
pub(crate) fn row_tiles(
    out: &mut [f32],
    rows: usize,
    width: usize,
    rows_per_task: usize,
) -> Vec<(usize, usize, &mut [f32])> {
    let per = rows_per_task.max(1);
    let mut tasks = Vec::new();
    if rows * width == 0 {
        return tasks;
    }
    for (entry, block) in out.chunks_mut(rows * width).enumerate() {
        for (t, chunk) in block.chunks_mut(per * width).enumerate() {
            tasks.push((entry, t * per, chunk));
        }
    }
    tasks
}

/// `w` output values at `p` as not-yet-written floats, for ops whose output is allocated without
/// zeroing (every element written once by its task) and written through raw row pointers.
///
/// # Safety
/// `p .. p + w` must lie inside the output's allocation and be written by this task only.
pub(crate) unsafe fn uninit_row<'a>(p: *mut f32, w: usize) -> &'a mut [std::mem::MaybeUninit<f32>] {
    // SAFETY: per the caller; `MaybeUninit<f32>` has `f32`'s layout.
    unsafe { std::slice::from_raw_parts_mut(p.cast::<std::mem::MaybeUninit<f32>>(), w) }
}

/// [`output_in_chunks`] with per-worker scratch made by `scratch`.
pub(crate) fn output_in_chunks_with<S>(
    len: usize,
    chunk: usize,
    scratch: impl Fn() -> S + Sync,
    work: impl Fn(&mut S, usize, &mut [f32]) + Sync,
) -> Vec<f32> {
    let mut out: Vec<f32> = Vec::with_capacity(len);
    let tasks: Vec<(usize, &mut [std::mem::MaybeUninit<f32>])> = out.spare_capacity_mut()[..len]
        .chunks_mut(chunk.max(1))
        .enumerate()
        .collect();
    run_tasks_with(tasks, threads(), scratch, |s, (i, c)| {
        c.fill(std::mem::MaybeUninit::new(0.0));
        // SAFETY: every element of `c` was initialized just above; `MaybeUninit<f32>` has
        // `f32`'s layout.
        let c = unsafe { std::slice::from_raw_parts_mut(c.as_mut_ptr().cast::<f32>(), c.len()) };
        work(s, i, c);
    });
    // SAFETY: the chunks cover `0..len` and each was zeroed by its task; `run_tasks_with` returns
    // only after every task ran (a panicking task propagates before this line).
    unsafe { out.set_len(len) };
    out
}

#[cfg(test)]
mod tests {
    use super::on_compute_pool;

    /// From a thread outside any pool the work moves onto a worker of the global pool; on a
    /// worker of another pool (a pipeline stage's) it stays where it is.
    #[test]
    fn compute_runs_on_a_pool_worker() -> Result<(), rayon::ThreadPoolBuildError> {
        let outside = std::thread::spawn(|| {
            (
                rayon::current_thread_index(),
                on_compute_pool(rayon::current_thread_index),
            )
        })
        .join();
        assert!(matches!(outside, Ok((None, Some(_)))), "{outside:?}");
        let stage = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
        let (pool_size, ran_on) = stage.install(|| {
            (
                rayon::current_num_threads(),
                on_compute_pool(rayon::current_num_threads),
            )
        });
        assert_eq!((pool_size, ran_on), (1, 1));
        Ok(())
    }
}
