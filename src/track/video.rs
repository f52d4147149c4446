//! `edgetam track --input` of a video file, camera, URI or GStreamer description: GStreamer
//! decodes on its own threads, a reader thread hands each frame to the frame-queue pipeline
//! (the same one a folder of frames goes through, encoder-ahead included) and this thread
//! writes the results and feeds the output video's encoder, which runs on a thread of its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use anyhow::anyhow;
use edgetam::pipeline::Error as PipelineError;

use super::*;
use crate::video::decode::{Next, SourceKind, VideoSource};
use crate::video::encode::{Encoder, Format};

/// A prompt waiting for its frame.
pub(super) struct Scheduled {
    timed: TimedSpec,
    prompt: ObjectPrompt,
    done: bool,
}

impl Scheduled {
    /// `object 2 at t=2.5 s` / `object 1 on frame 7`.
    fn describe(&self) -> String {
        let spec = &self.timed.spec;
        match self.timed.t {
            Some(t) => format!("object {} at t={t} s", spec.obj),
            None => format!("object {} on frame {}", spec.obj, spec.frame),
        }
    }
}

/// The prompts by frame index or time, checked against the source (coordinates and mask sizes
/// against its frame size, times against its length) before the model is loaded.
pub(super) struct Schedule(Vec<Scheduled>);

impl Schedule {
    pub(super) fn new(specs: &[TimedSpec], source: &VideoSource, label: &str) -> Result<Self> {
        let (w, h) = (source.width, source.height);
        let mut scheduled: Vec<Scheduled> = Vec::new();
        for s in specs {
            let o = s.spec.obj;
            if let (Some(t), Some(d)) = (s.t, source.duration) {
                if t >= d.as_secs_f64() {
                    bail!(
                        "the prompt for object {o} is at t={t} s, but {label} is {:.3} s long \
                         (no frame at or after it)",
                        d.as_secs_f64()
                    );
                }
            }
            if s.t.is_none()
                && scheduled.iter().any(|x| {
                    x.timed.t.is_none()
                        && x.timed.spec.obj == o
                        && x.timed.spec.frame == s.spec.frame
                })
            {
                bail!(
                    "object {o} has two prompts on frame {}: give its box and points in one \
                     --prompt",
                    s.spec.frame
                );
            }
            let prompt = object_prompt(&s.spec, w, h, &format!("the frames of {label}"))?;
            scheduled.push(Scheduled {
                timed: s.clone(),
                prompt,
                done: false,
            });
        }
        Ok(Self(scheduled))
    }

    /// The prompts that go on frame `f` shown at `pts`: its `frame=` ones and the `t=` ones
    /// whose time has come.
    fn due(&mut self, f: usize, pts: Option<Duration>) -> Result<Vec<(u32, ObjectPrompt)>> {
        let mut due: Vec<(u32, ObjectPrompt)> = Vec::new();
        for s in self.0.iter_mut().filter(|s| !s.done) {
            let obj = s.timed.spec.obj;
            let now = match s.timed.t {
                Some(t) => pts.is_some_and(|p| p.as_secs_f64() >= t),
                None => s.timed.spec.frame == f,
            };
            if now {
                if due.iter().any(|(o, _)| *o == obj) {
                    bail!(
                        "object {} has two prompts on frame {f} ({} lands there too): give its \
                         box and points in one --prompt",
                        obj,
                        s.describe()
                    );
                }
                s.done = true;
                due.push((obj, s.prompt.clone()));
            }
        }
        Ok(due)
    }

    /// The prompts whose frame never came.
    pub(super) fn pending(&self) -> Vec<String> {
        self.0
            .iter()
            .filter(|s| !s.done)
            .map(Scheduled::describe)
            .collect()
    }
}

/// Why the reader stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    /// The source ended.
    Eos,
    /// --max-frames or --duration.
    Limit,
    /// Ctrl-C or an error on the writing side.
    Halted,
}

/// What the reader thread did.
pub(super) struct Fed {
    pub(super) frames: usize,
    pub(super) last_pts: Option<Duration>,
    pub(super) end: End,
    pub(super) schedule: Schedule,
}

impl Fed {
    /// Prompts whose frame never came: an error when the source ended, else a warning (the run
    /// was stopped before); then why the run stopped early, if it did.
    pub(super) fn check(
        &self,
        label: &str,
        interrupted: bool,
        warn: impl Fn(&str),
    ) -> Result<Option<String>> {
        let pending = self.schedule.pending();
        if !pending.is_empty() {
            let at = self
                .last_pts
                .map(|t| format!(", the last at t={:.3} s", t.as_secs_f64()))
                .unwrap_or_else(|| ", without timestamps".into());
            let why = format!(
                "no frame for the prompt of {} ({label} gave {} frames{at})",
                pending.join(", "),
                self.frames
            );
            if self.end == End::Eos {
                bail!("{why}");
            }
            warn(&format!("warning: {why}"));
        }
        Ok(match self.end {
            End::Halted if interrupted => Some(format!("Ctrl-C after {} frames", self.frames)),
            End::Limit => Some(format!(
                "--max-frames / --duration reached after {} frames",
                self.frames
            )),
            _ => None,
        })
    }
}

/// The reader thread: frames from the source into the pipeline, each frame's prompts first,
/// until the source ends, a limit is reached or `halt` is set.
pub(super) fn feed(
    source: &VideoSource,
    pipeline: &dyn Feed,
    mut schedule: Schedule,
    jobs: mpsc::Sender<InFlight>,
    halt: &AtomicBool,
    limits: (Option<u64>, Option<f64>),
) -> Result<Fed> {
    let (max_frames, duration) = limits;
    let (mut f, mut first, mut last_pts) = (0usize, None, None);
    let end = loop {
        if halt.load(Ordering::Relaxed) {
            break End::Halted;
        }
        if max_frames.is_some_and(|n| f as u64 >= n) {
            break End::Limit;
        }
        let frame = match source.next(Duration::from_millis(100))? {
            Next::Waiting => continue,
            Next::Eos => break End::Eos,
            Next::Frame(frame) => frame,
        };
        if let (Some(d), Some(pts)) = (duration, frame.pts) {
            let t0 = *first.get_or_insert(pts);
            if pts.saturating_sub(t0).as_secs_f64() >= d {
                break End::Limit;
            }
        }
        let (w, h) = (frame.img.width() as usize, frame.img.height() as usize);
        let job = InFlight {
            f,
            name: None,
            pts: frame.pts,
            img: frame.img,
        };
        for (obj, prompt) in schedule.due(f, job.pts)? {
            pipeline
                .add_prompt(obj, prompt)
                .with_context(|| format!("object {obj} on {}", job.label()))?;
        }
        let mut pushed = Frame::rgb8(job.img.as_raw(), w, h);
        if let Some(pts) = job.pts {
            pushed = pushed.with_timestamp(pts);
        }
        pipeline.push(pushed).with_context(|| job.label())?;
        last_pts = job.pts.or(last_pts);
        if jobs.send(job).is_err() {
            break End::Halted;
        }
        f += 1;
    };
    Ok(Fed {
        frames: f,
        last_pts,
        end,
        schedule,
    })
}

/// The frames a source that is not live will give (its length at its rate, at most
/// `max_frames`), for the progress bar.
pub(super) fn total_frames(source: &VideoSource, max_frames: Option<u64>) -> Option<usize> {
    match (source.duration, source.fps) {
        (Some(d), Some((n, dn))) if !source.live => {
            let frames = (d.as_secs_f64() * f64::from(n) / f64::from(dn)).round() as usize;
            Some(match max_frames {
                Some(m) => frames.min(usize::try_from(m).unwrap_or(usize::MAX)),
                None => frames,
            })
        }
        _ => None,
    }
}

/// Ctrl-C: the first finishes the run (the output video gets its EOS), a second one exits.
/// Set before an encoder starts, so that no Ctrl-C leaves its temporary file behind.
pub(super) fn ctrl_c() -> Result<Arc<AtomicBool>> {
    let interrupt = Arc::new(AtomicBool::new(false));
    let sigint = signal_hook::consts::SIGINT;
    signal_hook::flag::register_conditional_shutdown(sigint, 130, Arc::clone(&interrupt))
        .and_then(|_| signal_hook::flag::register(sigint, Arc::clone(&interrupt)))
        .context("cannot handle Ctrl-C")?;
    Ok(interrupt)
}

/// The output video's encoder at the source's size and rate (30 fps when it has none).
pub(super) fn start_encoder(path: &Path, format: Format, source: &VideoSource) -> Result<Encoder> {
    let fps = source.fps.unwrap_or((30, 1));
    Ok(Encoder::start(
        path,
        format,
        source.width,
        source.height,
        fps,
    )?)
}

/// `LABEL: 640x360, 30.00 fps, 2.00 s`.
pub(super) fn describe(source: &VideoSource, label: &str) -> String {
    let fps = source
        .fps
        .map(|(n, d)| format!(", {:.2} fps", f64::from(n) / f64::from(d)))
        .unwrap_or_default();
    format!(
        "{label}: {}x{}{fps}{}",
        source.width,
        source.height,
        match source.duration {
            Some(d) => format!(", {:.2} s", d.as_secs_f64()),
            None if source.live => ", live: until Ctrl-C, --max-frames or --duration".into(),
            None => String::new(),
        }
    )
}

pub(super) fn track_video(args: TrackArgs) -> Result<()> {
    let kind = SourceKind::parse(&args.inputs[0]);
    let label = kind.label();
    let format = args
        .output_video
        .as_deref()
        .map(Format::for_path)
        .transpose()?;
    let source = VideoSource::open(&kind)?;
    let schedule = Schedule::new(&args.prompts, &source, &label)?;
    let paths = OutPaths::of(&args);
    let outputs = args
        .out
        .as_deref()
        .map(|out| Outputs::create(&paths, out))
        .transpose()?;
    let pipeline = build_pipeline(&args, source.live)?;
    let mut sink = Sink::new(outputs, total_frames(&source, args.max_frames));
    let interrupt = ctrl_c()?;
    if let (Some(format), Some(path)) = (format, &args.output_video) {
        sink.encoder = Some(start_encoder(path, format, &source)?);
    }
    eprintln!("input: {}", describe(&source, &label));
    source.start()?;

    let halt = AtomicBool::new(false);
    let (jobs, done) = mpsc::channel::<InFlight>();
    let limits = (args.max_frames, args.duration);
    let (source_ref, pipeline_ref, halt_ref) = (&source, &pipeline, &halt);
    let (fed, looped) = std::thread::scope(|s| {
        let reader = s.spawn(move || {
            let fed = feed(source_ref, pipeline_ref, schedule, jobs, halt_ref, limits);
            pipeline_ref.finish();
            fed
        });
        let looped = (|| -> Result<bool> {
            let mut interrupted = false;
            loop {
                if !interrupted && interrupt.load(Ordering::Relaxed) {
                    interrupted = true;
                    halt.store(true, Ordering::Relaxed);
                    sink.pb.suspend(|| {
                        eprintln!("Ctrl-C: finishing the frames in flight (again to abort)")
                    });
                }
                source.check_bus()?;
                match pipeline.recv_timeout(Duration::from_millis(100)) {
                    Ok(r) => {
                        let job = done
                            .recv()
                            .map_err(|_| anyhow!("the frame reader stopped"))?;
                        sink.handle(r, job)?;
                    }
                    Err(PipelineError::Timeout(_)) => {}
                    Err(PipelineError::Closed) => return Ok(interrupted),
                    Err(e) => return Err(e.into()),
                }
            }
        })();
        if looped.is_err() {
            halt.store(true, Ordering::Relaxed);
        }
        let fed = reader
            .join()
            .map_err(|_| anyhow!("the frame reader panicked"))
            .and_then(|r| r);
        (fed, looped)
    });
    let interrupted = looped?;
    let fed = fed?;
    let stopped = fed.check(&label, interrupted, |w| {
        sink.pb.suspend(|| eprintln!("{w}"))
    })?;
    sink.finish(&paths, &label, stopped.as_deref())
}
