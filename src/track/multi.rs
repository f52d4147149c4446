//! `edgetam track` with several `--input`: each input is a stream (numbered from 0 in the order
//! given), read on a reader thread of its own as a lone input is read (a folder in natural name
//! order, a video through GStreamer), all tracked by one [`MultiPipeline`] (one model, one
//! image-encoder thread encoding frames of several streams in one call, one tracking thread).
//! This thread writes each stream's results where that stream's outputs go ([`OutPaths`]:
//! `--out DIR/stream-N/`, `NAME.streamN.EXT`, `D.streamN.safetensors`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

use anyhow::anyhow;
use edgetam::pipeline::{Error as PipelineError, MultiPipeline, StreamId, StreamOptions};
use indicatif::MultiProgress;

use super::*;

/// One stream of the [`MultiPipeline`], as its reader feeds it.
struct StreamFeed<'a> {
    pipeline: &'a MultiPipeline,
    stream: StreamId,
}

impl Feed for StreamFeed<'_> {
    fn add_prompt(&self, obj: u32, prompt: ObjectPrompt) -> edgetam::pipeline::Result<()> {
        self.pipeline.add_prompt(self.stream, obj, prompt)
    }

    fn push(&self, frame: Frame<'_>) -> edgetam::pipeline::Result<()> {
        self.pipeline.push(self.stream, frame).map(|_| ())
    }
}

/// An input, opened and its prompts checked against it (before the model loads).
enum Source {
    Folder {
        dir: PathBuf,
        frames: Vec<PathBuf>,
        prompts: FramePrompts,
    },
    #[cfg(feature = "video")]
    Video {
        label: String,
        source: crate::video::decode::VideoSource,
    },
}

impl Source {
    fn label(&self) -> String {
        match self {
            Self::Folder { dir, .. } => dir.display().to_string(),
            #[cfg(feature = "video")]
            Self::Video { label, .. } => label.clone(),
        }
    }

    fn live(&self) -> bool {
        match self {
            Self::Folder { .. } => false,
            #[cfg(feature = "video")]
            Self::Video { source, .. } => source.live,
        }
    }
}

/// What a stream's reader thread did.
enum Read {
    /// A folder: the frames pushed, whether it was halted, the unreadable frames skipped.
    Folder {
        frames: usize,
        halted: bool,
        skipped: Vec<String>,
    },
    #[cfg(feature = "video")]
    Video(video::Fed),
}

/// Everything a stream's reader needs, moved onto its thread.
struct Reader<'a> {
    feed: StreamFeed<'a>,
    jobs: mpsc::Sender<InFlight>,
    halt: &'a AtomicBool,
    pb: ProgressBar,
    prefix: String,
    #[cfg(feature = "video")]
    schedule: Option<video::Schedule>,
}

impl Reader<'_> {
    fn run(self, source: &Source, args: &TrackArgs) -> Result<Read> {
        match source {
            Source::Folder {
                frames, prompts, ..
            } => self.folder(frames, prompts, args.fps),
            #[cfg(feature = "video")]
            Source::Video { source, .. } => {
                let schedule = self.schedule.context("no prompt schedule")?;
                let limits = (args.max_frames, args.duration);
                video::feed(source, &self.feed, schedule, self.jobs, self.halt, limits)
                    .map(Read::Video)
            }
        }
    }

    /// A folder's frames in natural name order, as `track_folder` reads them: an unreadable
    /// frame is reported and skipped unless it carries a prompt.
    fn folder(self, frames: &[PathBuf], prompts: &FramePrompts, fps: Option<f64>) -> Result<Read> {
        let rate = fps.unwrap_or(30.0);
        let (mut pushed, mut skipped) = (0, Vec::new());
        for (f, path) in frames.iter().enumerate() {
            if self.halt.load(Ordering::Relaxed) {
                return Ok(Read::Folder {
                    frames: pushed,
                    halted: true,
                    skipped,
                });
            }
            let name = file_name(path);
            let img = match read_rgb(path) {
                Ok(img) => img,
                Err(e) if !prompts.contains_key(&f) => {
                    let prefix = &self.prefix;
                    self.pb.suspend(|| {
                        eprintln!("warning: {prefix}skipping frame {f} ({name}): {e:#}")
                    });
                    skipped.push(name);
                    self.pb.inc(1);
                    continue;
                }
                Err(e) => return Err(e.context(format!("frame {f} ({name}) carries a prompt"))),
            };
            let (w, h) = (img.width() as usize, img.height() as usize);
            for (obj, prompt) in prompts.get(&f).into_iter().flatten() {
                self.feed
                    .add_prompt(*obj, prompt.clone())
                    .with_context(|| format!("object {obj} on frame {f} ({name})"))?;
            }
            self.feed
                .push(Frame::rgb8(img.as_raw(), w, h))
                .with_context(|| format!("frame {f} ({name})"))?;
            pushed += 1;
            let pts = Duration::from_secs_f64(f as f64 / rate);
            let job = InFlight {
                f,
                name: Some(name),
                pts: fps.map(|_| pts),
                img,
            };
            if self.jobs.send(job).is_err() {
                return Ok(Read::Folder {
                    frames: pushed,
                    halted: true,
                    skipped,
                });
            }
        }
        Ok(Read::Folder {
            frames: pushed,
            halted: false,
            skipped,
        })
    }
}

/// Opens input `input` and checks `specs` (its prompts) against it.
fn open(
    input: &str,
    specs: &[TimedSpec],
    args: &TrackArgs,
    #[cfg_attr(not(feature = "video"), allow(unused_variables))] schedules: &mut Vec<
        Option<video_schedule::Schedule>,
    >,
) -> Result<Source> {
    if Path::new(input).is_dir() {
        let dir = PathBuf::from(input);
        let mut frames = list_frames(&dir)?;
        frames.truncate(folder_keep(args).max(1));
        let prompts = prepare_prompts(specs, &frames, args.fps)?;
        schedules.push(None);
        return Ok(Source::Folder {
            dir,
            frames,
            prompts,
        });
    }
    #[cfg(feature = "video")]
    {
        let kind = crate::video::decode::SourceKind::parse(input);
        let label = kind.label();
        let source = crate::video::decode::VideoSource::open(&kind)?;
        schedules.push(Some(video::Schedule::new(specs, &source, &label)?));
        Ok(Source::Video { label, source })
    }
    #[cfg(not(feature = "video"))]
    {
        let _ = specs;
        not_a_folder(input)?;
        bail!("{input} is not a folder")
    }
}

/// The prompt schedule of a video input (a unit type without the `video` feature).
mod video_schedule {
    #[cfg(feature = "video")]
    pub(super) use super::video::Schedule;
    #[cfg(not(feature = "video"))]
    pub(super) struct Schedule;
}

/// The frames of a folder that are tracked: --max-frames, or --duration at --fps (30).
fn folder_keep(args: &TrackArgs) -> usize {
    match (args.max_frames, args.duration) {
        (Some(n), _) => usize::try_from(n).unwrap_or(usize::MAX),
        (None, Some(d)) => (d * args.fps.unwrap_or(30.0)).ceil() as usize,
        _ => usize::MAX,
    }
}

pub(super) fn track_multi(args: TrackArgs) -> Result<()> {
    if args.encoder_ahead == Some(false) {
        bail!(
            "--encoder-ahead off: with several --input the streams share one image-encoder \
             thread that always runs ahead of the tracking thread (outputs are the same bytes \
             either way); leave the flag out"
        );
    }
    #[cfg(feature = "video")]
    let format = args
        .output_video
        .as_deref()
        .map(crate::video::encode::Format::for_path)
        .transpose()?;
    #[cfg(not(feature = "video"))]
    if args.output_video.is_some() {
        bail!("--output-video: this edgetam was built without the `video` feature");
    }
    // Every input opened and its prompts checked before the model loads.
    let mut sources = Vec::new();
    let mut schedules = Vec::new();
    for (n, input) in args.inputs.iter().enumerate() {
        let specs: Vec<TimedSpec> = args
            .prompts
            .iter()
            .filter(|s| s.stream == n)
            .cloned()
            .collect();
        let source = open(input, &specs, &args, &mut schedules)
            .with_context(|| format!("stream {n} (--input {input})"))?;
        sources.push(source);
    }
    let paths: Vec<OutPaths> = (0..sources.len())
        .map(|n| OutPaths::for_stream(&args, n))
        .collect();
    let mut outputs = Vec::new();
    for p in &paths {
        outputs.push(
            p.out
                .as_deref()
                .map(|out| Outputs::create(p, out))
                .transpose()?,
        );
    }
    let model = Arc::new(load_model(
        &args.model,
        args.input_size.input_size,
        args.dtype,
    )?);
    let pipeline = MultiPipeline::builder(model).build()?;
    let queue = usize::try_from(args.queue).unwrap_or(usize::MAX);
    let mut ids = Vec::new();
    for source in &sources {
        let options = StreamOptions::default()
            .queue_capacity(queue)
            // As one input: files wait for the tracker, live sources drop the oldest frame.
            .drop_policy(if source.live() {
                DropPolicy::DropOldest
            } else {
                DropPolicy::Block
            })
            .resolution_change(ResolutionChange::Continue);
        ids.push(pipeline.add_stream(options)?);
    }

    let bars = MultiProgress::with_draw_target(if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    });
    #[cfg(feature = "video")]
    let interrupt = match sources.iter().any(|s| matches!(s, Source::Video { .. })) {
        true => Some(video::ctrl_c()?),
        false => None,
    };
    #[cfg(not(feature = "video"))]
    let interrupt: Option<Arc<AtomicBool>> = None;
    let mut sinks = Vec::new();
    for (n, (source, outputs)) in sources.iter().zip(outputs).enumerate() {
        let total = match source {
            Source::Folder { frames, .. } => Some(frames.len()),
            #[cfg(feature = "video")]
            Source::Video { source, .. } => video::total_frames(source, args.max_frames),
        };
        let mut sink = Sink::new(outputs, total);
        sink.pb = bars.add(sink.pb.clone());
        sink.prefix = format!("stream {n}: ");
        #[cfg(feature = "video")]
        if let (Some(format), Some(path)) = (format, &paths[n].output_video) {
            match source {
                Source::Folder { .. } => {
                    // Started on the first frame tracked (its size), at --fps (30).
                    let rate = args.fps.unwrap_or(30.0);
                    sink.video_later =
                        Some((path.clone(), format, ((rate * 1000.0).round() as i32, 1000)));
                }
                Source::Video { source, .. } => {
                    sink.encoder = Some(video::start_encoder(path, format, source)?);
                }
            }
        }
        sinks.push(sink);
    }
    for (n, source) in sources.iter().enumerate() {
        match source {
            Source::Folder { dir, frames, .. } => {
                eprintln!(
                    "stream {n}: input: {}: {} frame(s)",
                    dir.display(),
                    frames.len()
                )
            }
            #[cfg(feature = "video")]
            Source::Video { label, source } => {
                eprintln!("stream {n}: input: {}", video::describe(source, label));
                source.start()?;
            }
        }
    }

    let start = Instant::now();
    let halt = AtomicBool::new(false);
    let remaining = AtomicUsize::new(sources.len());
    let (pipeline, halt_ref, remaining, args_ref) = (&pipeline, &halt, &remaining, &args);
    let (reads, looped) = std::thread::scope(|s| {
        let mut readers = Vec::new();
        let mut done = Vec::new();
        #[cfg_attr(not(feature = "video"), allow(unused_variables))]
        for (n, (source, schedule)) in sources.iter().zip(schedules).enumerate() {
            let (jobs, jobs_done) = mpsc::channel::<InFlight>();
            done.push(jobs_done);
            let reader = Reader {
                feed: StreamFeed {
                    pipeline,
                    stream: ids[n],
                },
                jobs,
                halt: halt_ref,
                pb: sinks[n].pb.clone(),
                prefix: sinks[n].prefix.clone(),
                #[cfg(feature = "video")]
                schedule,
            };
            readers.push(s.spawn(move || {
                let read = reader.run(source, args_ref);
                if read.is_err() {
                    halt_ref.store(true, Ordering::Relaxed);
                }
                // The last reader to end ends the pipeline's input.
                if remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
                    pipeline.finish();
                }
                read
            }));
        }
        let looped = (|| -> Result<bool> {
            let mut interrupted = false;
            loop {
                if !interrupted
                    && interrupt
                        .as_ref()
                        .is_some_and(|i| i.load(Ordering::Relaxed))
                {
                    interrupted = true;
                    halt_ref.store(true, Ordering::Relaxed);
                    bars.suspend(|| {
                        eprintln!("Ctrl-C: finishing the frames in flight (again to abort)")
                    });
                }
                #[cfg(feature = "video")]
                for (n, source) in sources.iter().enumerate() {
                    if let Source::Video { source, .. } = source {
                        source.check_bus().with_context(|| format!("stream {n}"))?;
                    }
                }
                match pipeline.recv_timeout(Duration::from_millis(100)) {
                    Ok(out) => {
                        let n = ids
                            .iter()
                            .position(|id| *id == out.stream)
                            .ok_or_else(|| anyhow!("a result for unknown {}", out.stream))?;
                        let job = done[n]
                            .recv()
                            .map_err(|_| anyhow!("the frame reader of stream {n} stopped"))?;
                        sinks[n]
                            .handle(out.output, job)
                            .with_context(|| format!("stream {n}"))?;
                    }
                    Err(PipelineError::Timeout(_)) => {}
                    Err(PipelineError::Closed) => return Ok(interrupted),
                    Err(e) => return Err(e.into()),
                }
            }
        })();
        if looped.is_err() {
            halt_ref.store(true, Ordering::Relaxed);
        }
        let reads: Vec<Result<Read>> = readers
            .into_iter()
            .enumerate()
            .map(|(n, r)| {
                r.join()
                    .map_err(|_| anyhow!("the frame reader of stream {n} panicked"))
                    .and_then(|r| r.with_context(|| format!("stream {n}")))
            })
            .collect();
        (reads, looped)
    });
    let interrupted = looped?;
    let reads = reads.into_iter().collect::<Result<Vec<Read>>>()?;
    let elapsed = start.elapsed().as_secs_f64();
    // Every stream's prompts that never came to a frame are checked before any output is
    // finished (an error leaves no summary of the others).
    let mut ends = Vec::new();
    #[cfg_attr(not(feature = "video"), allow(unused_variables))]
    for (n, (read, source)) in reads.into_iter().zip(&sources).enumerate() {
        let label = source.label();
        ends.push(match read {
            Read::Folder {
                frames,
                halted,
                skipped,
            } => {
                let stopped =
                    (halted && interrupted).then(|| format!("Ctrl-C after {frames} frames"));
                (label, stopped, skipped)
            }
            #[cfg(feature = "video")]
            Read::Video(fed) => {
                let prefix = &sinks[n].prefix;
                let stopped = fed
                    .check(&label, interrupted, |w| eprintln!("{prefix}{w}"))
                    .with_context(|| format!("stream {n}"))?;
                (label, stopped, Vec::new())
            }
        });
    }
    let mut tracked = 0;
    for (n, (sink, (label, stopped, skipped))) in sinks.into_iter().zip(ends).enumerate() {
        tracked += sink.tracked;
        sink.finish(&paths[n], &label, stopped.as_deref())?;
        if !skipped.is_empty() {
            println!(
                "stream {n}: skipped {} unreadable frame(s): {}",
                skipped.len(),
                skipped.join(", ")
            );
        }
    }
    println!(
        "all {} streams: tracked {tracked} frames in {elapsed:.2} s, {:.2} fps together",
        sources.len(),
        tracked as f64 / elapsed.max(1e-9)
    );
    Ok(())
}
