//! `edgetamtrack` under load, in a child process with GStreamer's leaks tracer on
//! (`GST_TRACERS=leaks`): 200 NULL -> PLAYING -> NULL cycles with buffers flowing; caps
//! renegotiated every 10 buffers while flushing seeks, prompt events, action signals and
//! property changes come from other threads at random moments (also in live mode); a worker
//! panic mid-stream, a live output thread panic, a panicking signal handler and property
//! vfunc. Nothing may deadlock (every wait has a timeout, and the parent kills a child that
//! runs too long), no panic may cross into GStreamer (each becomes an element error), and when
//! every pipeline is gone the leaks tracer must find no GstObject or mini object alive.
//!
//! `STRESS_CYCLES` (default 200) and `STRESS_SEED` change the run; `STRESS_VERBOSE=1` prints
//! every warning, tracking message and a heartbeat (run the child directly:
//! `EDGETAM_STRESS_CHILD=1 target/release/deps/stress-* --exact stress_child --ignored --nocapture`).

mod common;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{assert_nothing_alive, init, model_dir};
use gst::prelude::*;
use gstedgetam::{results, TestFault};

/// The whole child run must finish within this.
const CHILD_TIMEOUT: Duration = Duration::from_secs(900);
/// A single wait (state change, first buffer, error message) within this.
const WAIT: Duration = Duration::from_secs(60);

#[test]
fn element_under_load_leaks_nothing_and_never_hangs() {
    let exe = std::env::current_exe().expect("test binary");
    let mut child = Command::new(exe)
        .args(["--exact", "stress_child", "--ignored", "--nocapture"])
        .env("GST_TRACERS", "leaks")
        .env("GST_DEBUG", "GST_TRACER:7")
        .env("GST_DEBUG_NO_COLOR", "1")
        .env("EDGETAM_STRESS_CHILD", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child");
    // Read both pipes on threads (a full pipe would block the child).
    let read = |r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let mut r = r;
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = read(Box::new(child.stdout.take().expect("stdout")));
    let err = read(Box::new(child.stderr.take().expect("stderr")));
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s);
        }
        if start.elapsed() > CHILD_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = out.join().expect("stdout reader");
    let err = err.join().expect("stderr reader");
    let progress: Vec<&str> = out.lines().filter(|l| l.starts_with("stress:")).collect();
    let Some(status) = status else {
        panic!(
            "the child ran past {CHILD_TIMEOUT:?} (deadlock?); its last progress: {:?}",
            progress.last()
        );
    };
    let tail = |s: &str| s.lines().rev().take(60).collect::<Vec<_>>().join("\n");
    assert!(
        status.success() && out.contains("stress: done"),
        "child failed ({status}):\nstdout tail:\n{}\nstderr tail:\n{}",
        tail(&out),
        tail(&err)
    );
    assert_nothing_alive(&err);
    // The only panics are the four injected ones (each line after "panicked at" is its
    // message).
    let lines: Vec<&str> = err.lines().collect();
    let panics: Vec<&str> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains("panicked at"))
        .map(|(i, l)| lines.get(i + 1).copied().unwrap_or(l))
        .collect();
    assert!(
        panics.len() == 4 && panics.iter().all(|m| m.contains("injected test fault")),
        "unexpected panics: {panics:#?}"
    );
    for line in progress.iter().filter(|l| l.contains("summary")) {
        println!("{line}");
    }
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn f(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn seed() -> u64 {
    std::env::var("STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_2024)
}

fn launch(desc: &str) -> gst::Pipeline {
    gst::parse::launch(desc)
        .unwrap_or_else(|e| panic!("{desc}: {e}"))
        .downcast::<gst::Pipeline>()
        .expect("a pipeline")
}

/// Counts buffers leaving `element`'s src pad.
fn count_buffers(element: &gst::Element) -> Arc<AtomicU64> {
    count_buffers_on(&element.static_pad("src").expect("src pad"))
}

/// Counts buffers passing `pad`.
fn count_buffers_on(pad: &gst::Pad) -> Arc<AtomicU64> {
    let n = Arc::new(AtomicU64::new(0));
    let c = n.clone();
    pad.add_probe(gst::PadProbeType::BUFFER, move |_, _| {
        c.fetch_add(1, Ordering::SeqCst);
        gst::PadProbeReturn::Ok
    });
    n
}

/// Changes state and waits for it (a failure or a timeout fails the test).
fn set_state(p: &gst::Pipeline, state: gst::State, what: &str) {
    let r = p.set_state(state);
    assert!(r.is_ok(), "{what}: set_state({state:?}) = {r:?}");
    let (r, now, _) = p.state(gst::ClockTime::from_seconds(WAIT.as_secs()));
    assert!(
        r.is_ok() && now == state,
        "{what}: {state:?} not reached in {WAIT:?} ({r:?}, at {now:?})"
    );
}

/// Error messages waiting on the bus.
fn errors(bus: &gst::Bus) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(m) = bus.pop_filtered(&[gst::MessageType::Error]) {
        if let gst::MessageView::Error(e) = m.view() {
            out.push(format!(
                "{}: {} ({:?})",
                m.src().map(|s| s.path_string()).unwrap_or_default(),
                e.error(),
                e.debug()
            ));
        }
    }
    out
}

/// Waits until `n` is at least `at_least`; false on timeout.
fn wait_for(n: &AtomicU64, at_least: u64, timeout: Duration) -> bool {
    let start = Instant::now();
    while n.load(Ordering::SeqCst) < at_least {
        if start.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    true
}

fn model() -> String {
    model_dir().display().to_string()
}

/// Phase 1: NULL -> PLAYING -> NULL with buffers flowing, stopping at a random moment after
/// the first buffer of each cycle (mid-tracking, with buffers in flight).
fn state_cycles(rng: &mut Rng, cycles: u64) -> u64 {
    let p = launch(&format!(
        "videotestsrc pattern=ball ! video/x-raw,format=RGB,width=64,height=48,framerate=30/1 \
         ! edgetamtrack name=t model=\"{}\" prompts=\"obj=1;frame=0;box=10,10,40,40\" \
         overlay=mask ! fakesink name=sink sync=false",
        model()
    ));
    let track = p.by_name("t").expect("t");
    let sink = p.by_name("sink").expect("sink");
    let seen = count_buffers_on(&sink.static_pad("sink").expect("sink pad"));
    let bus = p.bus().expect("bus");
    let mut flowed = 0;
    for cycle in 0..cycles {
        // Settings read at start vary from cycle to cycle.
        track.set_property("encoder-ahead", cycle % 2 == 1);
        track.set_property("live-mode", cycle % 3 == 2);
        track.set_property("max-in-flight", (cycle % 4) as u32);
        let before = seen.load(Ordering::SeqCst);
        set_state(&p, gst::State::Playing, &format!("cycle {cycle}"));
        assert!(
            wait_for(&seen, before + 1, WAIT),
            "cycle {cycle}: no buffer reached the sink in {WAIT:?}"
        );
        // Stop at a random moment: often with buffers in flight in the tracker.
        std::thread::sleep(Duration::from_millis(rng.below(200)));
        set_state(&p, gst::State::Null, &format!("cycle {cycle}"));
        flowed += seen.load(Ordering::SeqCst) - before;
        let errs = errors(&bus);
        assert!(errs.is_empty(), "cycle {cycle}: {errs:?}");
        if cycle % 20 == 0 {
            println!("stress: cycles: cycle {cycle}, {flowed} buffers so far");
        }
    }
    flowed
}

const FORMATS: [&str; 5] = ["RGB", "NV12", "I420", "GRAY8", "BGRx"];
const SIZES: [(u32, u32); 3] = [(64, 48), (80, 60), (96, 72)];

/// The caps of the `i`th ten buffers: the format changes every time, the size every third
/// time (a new size resets tracking).
fn caps(i: u64, framerate: &str) -> gst::Caps {
    let (w, h) = SIZES[(i / 3) as usize % SIZES.len()];
    let format = FORMATS[i as usize % FORMATS.len()];
    format!("video/x-raw,format={format},width={w},height={h},framerate={framerate}")
        .parse()
        .expect("caps")
}

/// A random command from another thread: a signal, a prompt event (either way) or a property
/// write or read, with valid and invalid values.
fn random_command(rng: &mut Rng, track: &gst::Element, src: &gst::Element, sink: &gst::Element) {
    let obj = rng.below(4) as u32;
    let coord = |rng: &mut Rng| rng.f(-20.0, 120.0);
    // Prompts most of the time, so objects are tracked; removals and resets now and then.
    let pick = rng.below(40);
    let pick = match pick {
        0..=7 => 0,
        8..=12 => 1,
        13..=19 => 2,
        20 => 3,
        21 => 4,
        22..=24 => 5,
        25..=27 => 6,
        28..=29 => 7,
        30..=31 => 8,
        32..=33 => 9,
        34..=35 => 10,
        _ => 11,
    };
    match pick {
        0 => {
            let _: bool = track.emit_by_name(
                "add-box",
                &[&obj, &coord(rng), &coord(rng), &coord(rng), &coord(rng)],
            );
        }
        1 => {
            let points = match rng.below(3) {
                0 => format!(
                    "{},{},1;{},{},0",
                    coord(rng),
                    coord(rng),
                    coord(rng),
                    coord(rng)
                ),
                1 => "garbage;;1,2".to_string(),
                _ => String::new(),
            };
            let _: bool = track.emit_by_name("add-points", &[&obj, &points]);
        }
        2 => {
            let spec = match rng.below(3) {
                0 => format!(
                    "obj={obj};box=5,5,{},{}",
                    10 + rng.below(50),
                    10 + rng.below(40)
                ),
                1 => format!("obj={obj};point={},{},1", rng.below(64), rng.below(48)),
                _ => "obj=;box=nope".to_string(),
            };
            let _: bool = track.emit_by_name("add-prompt", &[&spec]);
        }
        3 => {
            let _: bool = track.emit_by_name("remove-object", &[&obj]);
        }
        4 => {
            let _: bool = track.emit_by_name("reset", &[]);
        }
        5 => {
            let spec = format!("obj={obj};box=2,2,30,30");
            src.send_event(results::prompt_event_downstream(&spec));
        }
        6 => {
            let spec = format!("obj={obj};point=20,20,1");
            sink.send_event(results::prompt_event_upstream(&spec));
        }
        7 => {
            let overlay = ["none", "mask", "mask+box", "contour+box"][rng.below(4) as usize];
            track.set_property_from_str("overlay", overlay);
            track.set_property("overlay-alpha", rng.f(0.0, 1.0));
        }
        8 => {
            track.set_property("max-objects", 1 + rng.below(8) as u32);
            track.set_property("encoder-ahead", rng.below(2) == 0);
        }
        9 => {
            track.set_property(
                "prompt-roi-types",
                ["", "face", "a,b"][rng.below(3) as usize],
            );
            track.set_property("min-confidence", rng.f(0.0, 1.0));
            track.set_property("match-iou", rng.f(0.0, 1.0));
            track.set_property("reseed-after", rng.below(10) as u32);
        }
        10 => {
            let prompts =
                ["obj=1;frame=3;box=1,1,20,20", "obj=1;frame=;", ""][rng.below(3) as usize];
            track.set_property("prompts", prompts);
            track.set_property("qos", rng.below(2) == 0);
        }
        _ => {
            let _: f64 = track.property("fps");
            let _: u64 = track.property("latency");
            let _: u64 = track.property("tracked");
            let _: u64 = track.property("skipped");
        }
    }
}

/// Phase 2 (and 3 in live mode): caps renegotiated every 10 buffers, flushing seeks (not
/// live) and random commands from other threads while buffers flow.
fn load(rng: &mut Rng, live: bool, buffers: u64, seconds: u64) -> (u64, u64, u64) {
    let framerate = if live { "60/1" } else { "30/1" };
    let p = launch(&format!(
        "videotestsrc name=src pattern=ball is-live={live} ! capsfilter name=cf caps=\"{}\" \
         ! edgetamtrack name=t model=\"{}\" prompts=\"obj=1;frame=0;box=10,10,40,40\" \
         post-messages=true live-mode={live} ! fakesink name=sink sync={live}",
        caps(0, framerate),
        model()
    ));
    let track = p.by_name("t").expect("t");
    let src = p.by_name("src").expect("src");
    let sink = p.by_name("sink").expect("sink");
    let cf = p.by_name("cf").expect("cf");
    // Every 10th buffer out of the capsfilter switches its caps: the next buffer renegotiates.
    let into_track = count_buffers(&cf);
    {
        let n = into_track.clone();
        // Weak: the probe lives on the capsfilter's own pad (a strong reference would be a
        // cycle, which the leaks tracer reports).
        let cf2 = cf.downgrade();
        let framerate = framerate.to_string();
        cf.static_pad("src")
            .expect("src")
            .add_probe(gst::PadProbeType::BUFFER, move |_, _| {
                let i = n.load(Ordering::SeqCst);
                if let (9, Some(cf)) = (i % 10, cf2.upgrade()) {
                    cf.set_property("caps", caps(i / 10 + 1, &framerate));
                }
                gst::PadProbeReturn::Ok
            });
    }
    let out = count_buffers(&track);
    let bus = p.bus().expect("bus");
    set_state(&p, gst::State::Playing, "load");
    let stop = Arc::new(AtomicBool::new(false));
    let seeks = Arc::new(AtomicU64::new(0));
    let commands = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    if !live {
        let (p, stop, seeks, mut rng) = (p.clone(), stop.clone(), seeks.clone(), Rng(rng.next()));
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                // A flushing seek discards the buffers in the tracker (a tracked buffer takes
                // ~0.1-0.5 s here): seeking faster than that would let nothing through.
                std::thread::sleep(Duration::from_millis(300 + rng.below(700)));
                let at = gst::ClockTime::from_mseconds(rng.below(10_000));
                let flags = gst::SeekFlags::FLUSH
                    | if rng.below(2) == 0 {
                        gst::SeekFlags::ACCURATE
                    } else {
                        gst::SeekFlags::KEY_UNIT
                    };
                if p.seek_simple(flags, at).is_ok() {
                    seeks.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    for _ in 0..2 {
        let (track, src, sink) = (track.clone(), src.clone(), sink.clone());
        let (stop, commands, mut rng) = (stop.clone(), commands.clone(), Rng(rng.next()));
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(rng.below(30)));
                random_command(&mut rng, &track, &src, &sink);
                commands.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    let start = Instant::now();
    let mut errs = Vec::new();
    // Tracked buffers that carried at least one object.
    let mut with_objects = 0u64;
    let mut warnings = 0u64;
    while (out.load(Ordering::SeqCst) < buffers || start.elapsed() < Duration::from_secs(seconds))
        && start.elapsed() < 4 * WAIT
    {
        std::thread::sleep(Duration::from_millis(20));
        if std::env::var_os("STRESS_VERBOSE").is_some() {
            println!(
                "stress: heartbeat {:.2} s: {} commands, {} buffers out",
                start.elapsed().as_secs_f64(),
                commands.load(Ordering::SeqCst),
                out.load(Ordering::SeqCst)
            );
        }
        while let Some(m) = bus.pop() {
            match m.view() {
                gst::MessageView::Error(e) => errs.push(format!("{} ({:?})", e.error(), e.debug())),
                gst::MessageView::Warning(w) => {
                    warnings += 1;
                    if warnings <= 3 || std::env::var_os("STRESS_VERBOSE").is_some() {
                        println!("stress: warning: {}", w.error());
                    }
                }
                // As an application does (gst-launch-1.0 too): the element's latency grew.
                gst::MessageView::Latency(_) => {
                    let _ = p.recalculate_latency();
                }
                gst::MessageView::Element(e) => {
                    let objects = e
                        .structure()
                        .filter(|s| s.name() == results::MESSAGE_NAME)
                        .and_then(|s| s.get::<gst::Array>("objects").ok());
                    if objects.as_ref().is_some_and(|o| !o.is_empty()) {
                        with_objects += 1;
                    }
                    if std::env::var_os("STRESS_VERBOSE").is_some() {
                        println!(
                            "stress: message frame {:?}: {} objects ({} commands so far)",
                            e.structure().and_then(|s| s.get::<u64>("frame").ok()),
                            objects.map_or(0, |o| o.len()),
                            commands.load(Ordering::SeqCst)
                        );
                    }
                }
                _ => {}
            }
        }
        if !errs.is_empty() {
            break;
        }
    }
    println!(
        "stress: load live={live}: {} buffers out after {:.1} s; stopping the helpers",
        out.load(Ordering::SeqCst),
        start.elapsed().as_secs_f64()
    );
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().expect("a helper thread panicked");
    }
    println!(
        "stress: load live={live}: helpers stopped after {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let flowed = out.load(Ordering::SeqCst);
    let tracked: u64 = track.property("tracked");
    set_state(&p, gst::State::Null, "load");
    println!(
        "stress: load live={live}: NULL after {:.1} s",
        start.elapsed().as_secs_f64()
    );
    errs.extend(errors(&bus));
    assert!(errs.is_empty(), "load (live={live}): {errs:?}");
    assert!(
        flowed >= buffers,
        "load (live={live}): {flowed} of {buffers} buffers in {:?}",
        start.elapsed()
    );
    assert!(
        with_objects > 0,
        "load (live={live}): no buffer tracked with objects"
    );
    println!(
        "stress: load live={live}: {flowed} buffers ({tracked} tracked, {with_objects} with \
         objects), {} renegotiations, {} flushing seeks, {} commands, {warnings} warnings",
        into_track.load(Ordering::SeqCst) / 10,
        seeks.load(Ordering::SeqCst),
        commands.load(Ordering::SeqCst)
    );
    (
        flowed,
        seeks.load(Ordering::SeqCst),
        commands.load(Ordering::SeqCst),
    )
}

/// Waits for an error message from `p`'s bus; its text.
fn expect_error(bus: &gst::Bus, what: &str) -> String {
    match bus.timed_pop_filtered(
        gst::ClockTime::from_seconds(WAIT.as_secs()),
        &[gst::MessageType::Error],
    ) {
        Some(m) => match m.view() {
            gst::MessageView::Error(e) => format!("{} ({:?})", e.error(), e.debug()),
            _ => unreachable!(),
        },
        None => panic!("{what}: no error message in {WAIT:?}"),
    }
}

/// A pipeline for a fault: a ball at 30 fps (live or not) through `edgetamtrack` (live mode
/// when live) into a fakesink; the pipeline, the element and the pipeline's bus.
fn fault_pipeline(live: bool) -> (gst::Pipeline, gstedgetam::EdgeTamTrack, gst::Bus) {
    let p = launch(&format!(
        "videotestsrc pattern=ball is-live={live} ! video/x-raw,format=RGB,width=64,height=48,framerate=30/1 \
         ! edgetamtrack name=t model=\"{}\" prompts=\"obj=1;frame=0;box=10,10,40,40\" \
         live-mode={live} ! fakesink sync={live}",
        model()
    ));
    let t = p
        .by_name("t")
        .expect("t")
        .downcast::<gstedgetam::EdgeTamTrack>()
        .expect("edgetamtrack");
    let bus = p.bus().expect("bus");
    (p, t, bus)
}

/// Phase 4: failures mid-stream become element errors; the pipeline still stops.
fn faults() {
    // The tracking worker panics on its 6th frame.
    let (p, t, bus) = fault_pipeline(false);
    t.inject_fault(TestFault::WorkerPanicAt(5));
    set_state(&p, gst::State::Playing, "worker fault");
    let e = expect_error(&bus, "worker fault");
    assert!(e.contains("pipeline worker failed"), "{e}");
    set_state(&p, gst::State::Null, "worker fault");
    println!("stress: worker panic mid-stream -> element error: {e}");

    // The live output thread panics.
    let (p, t, bus) = fault_pipeline(true);
    set_state(&p, gst::State::Playing, "output thread fault");
    t.inject_fault(TestFault::OutputThreadPanic);
    let e = expect_error(&bus, "output thread fault");
    assert!(e.contains("output thread panicked"), "{e}");
    set_state(&p, gst::State::Null, "output thread fault");
    println!("stress: live output thread panic -> element error: {e}");

    // A signal handler panics: FALSE and an element error, not an abort; then a property.
    let (p, t, bus) = fault_pipeline(false);
    // Buffers and EOS offered to the element after the panic: it must refuse them without
    // leaking them (the bindings' own panic guard would keep them).
    let eos = Arc::new(AtomicU64::new(0));
    {
        let eos = eos.clone();
        t.static_pad("sink").expect("sink pad").add_probe(
            gst::PadProbeType::EVENT_DOWNSTREAM,
            move |_, info| {
                if matches!(info.event().map(|e| e.type_()), Some(gst::EventType::Eos)) {
                    eos.fetch_add(1, Ordering::SeqCst);
                }
                gst::PadProbeReturn::Ok
            },
        );
    }
    let out = count_buffers(t.upcast_ref());
    set_state(&p, gst::State::Playing, "signal fault");
    t.inject_fault(TestFault::SignalPanic);
    let ok: bool = t.emit_by_name("add-box", &[&1u32, &1f64, &1f64, &9f64, &9f64]);
    assert!(!ok, "a panicking handler returns FALSE");
    let e = expect_error(&bus, "signal fault");
    assert!(e.contains("Panicked"), "{e}");
    println!("stress: signal handler panic -> element error: {e}");
    // The element refuses the next buffer; the source stops and sends EOS, which the element
    // refuses too.
    assert!(
        wait_for(&eos, 1, WAIT),
        "signal fault: no EOS after the refusal"
    );
    set_state(&p, gst::State::Null, "signal fault");
    // A restart begins from fresh state: buffers flow and are tracked again.
    let _ = errors(&bus);
    let before = out.load(Ordering::SeqCst);
    set_state(&p, gst::State::Playing, "restart after the signal fault");
    assert!(
        wait_for(&out, before + 3, WAIT),
        "no buffer left the element after the restart"
    );
    let errs = errors(&bus);
    assert!(errs.is_empty(), "restart after the signal fault: {errs:?}");
    set_state(&p, gst::State::Null, "restart after the signal fault");
    println!("stress: signal fault: buffers and EOS refused without a leak; restart tracks again");
    let (p, t, bus) = fault_pipeline(false);
    t.inject_fault(TestFault::PropertyPanic);
    t.set_property("overlay-alpha", 0.25f64);
    let e = expect_error(&bus, "property fault");
    assert!(e.contains("Panicked"), "{e}");
    println!("stress: property vfunc panic -> element error: {e}");
    set_state(&p, gst::State::Null, "property fault");
}

#[test]
#[ignore = "run by element_under_load_leaks_nothing_and_never_hangs in a child process"]
fn stress_child() {
    assert!(
        std::env::var_os("EDGETAM_STRESS_CHILD").is_some(),
        "run through element_under_load_leaks_nothing_and_never_hangs"
    );
    init();
    let mut rng = Rng(seed());
    let cycles = std::env::var("STRESS_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let start = Instant::now();
    {
        // One element holding the model the whole time: the cycles share it instead of
        // loading it 200 times (as elements of one process do).
        let keeper = launch(&format!(
            "videotestsrc num-buffers=1 ! video/x-raw,width=64,height=48 ! edgetamtrack \
             model=\"{}\" ! fakesink",
            model()
        ));
        set_state(&keeper, gst::State::Paused, "keeper");
        let t = Instant::now();
        let flowed = state_cycles(&mut rng, cycles);
        println!(
            "stress: summary: {cycles} NULL->PLAYING->NULL cycles with {flowed} buffers in {:.0} s",
            t.elapsed().as_secs_f64()
        );
        let t = Instant::now();
        let (b, s, c) = load(&mut rng, false, 300, 20);
        println!(
            "stress: summary: {b} buffers with caps renegotiated every 10, {s} flushing seeks, \
             {c} random commands from 2 threads in {:.0} s",
            t.elapsed().as_secs_f64()
        );
        let t = Instant::now();
        let (b, _, c) = load(&mut rng, true, 150, 10);
        println!(
            "stress: summary: live mode: {b} buffers with caps renegotiated every 10, {c} random \
             commands in {:.0} s",
            t.elapsed().as_secs_f64()
        );
        faults();
        set_state(&keeper, gst::State::Null, "keeper");
    }
    println!(
        "stress: summary: all phases in {:.0} s",
        start.elapsed().as_secs_f64()
    );
    // Every pipeline is gone: the leaks tracer reports what is still alive.
    // SAFETY: nothing of GStreamer is used after this; it is the end of the process's use.
    unsafe { gst::deinit() };
    println!("stress: done");
}
