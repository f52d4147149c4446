//! Start and stop: the settings checked, the model loaded or shared, the tracking pipeline
//! built, commands sent before the start applied; at the stop the threads joined.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use edgetam_pipeline::Pipeline;
use edgetam_tracker::util::lock;
use edgetam_tracker::{Backend, ModelSpec};
use gst::subclass::prelude::*;

use super::imp::{EdgeTamTrack, CAT};
use super::prompts::{self, Command, Objects};
use super::settings::Settings;
use super::shared_model::{self, ModelKey};
use super::state::{StartError, State};
use super::timing::{Qos, Stats};
use super::{PromptSource, TestFault};

impl EdgeTamTrack {
    pub(super) fn settings(&self) -> Settings {
        lock(&self.settings).clone()
    }

    pub(super) fn load(&self, settings: &Settings) -> Result<State, StartError> {
        let name = settings.model.clone().ok_or(StartError::NoModel)?;
        let precision = settings.precision;
        let input_size = (settings.input_size != 0).then_some(settings.input_size as usize);
        let spec = ModelSpec::new(&name)
            .device(settings.device.as_str())
            .precision(precision.into())
            .input_size(input_size);
        // The settings (EDGETAM_ISA, input size, device, precision) are checked before a
        // download or a load, and before another element's model is shared.
        spec.check()
            .map_err(|e| StartError::of_settings(&name, e))?;
        // A hub repository id (owner/name) is fetched into the Hugging Face cache (or found there).
        let spec = spec.resolve().map_err(|source| StartError::Model {
            path: name.clone(),
            source,
        })?;
        let path = spec.path().map(Path::to_path_buf).unwrap_or_default();
        if !path.exists() {
            return Err(StartError::MissingModel {
                path: path.display().to_string(),
            });
        }
        let scheduled = prompts::schedule(
            settings.prompts.as_deref().unwrap_or(""),
            &edgetam_pipeline::read_mask,
        )?;
        if settings.prompt_source == PromptSource::Analytics && !cfg!(feature = "v1_24") {
            return Err(StartError::NoAnalytics);
        }
        let key = ModelKey::new(&path, &settings.device, precision, input_size);
        let t = Instant::now();
        let (model, shared) = shared_model::get_or_load(key, || {
            spec.load()
                .map(|loaded| loaded.model)
                .map_err(|e| StartError::of_settings(&path.display().to_string(), e))
        })?;
        gst::info!(
            CAT,
            imp = self,
            "{} {} in {:.2} s on {}",
            if shared { "shares" } else { "loaded" },
            path.display(),
            t.elapsed().as_secs_f64(),
            Backend::of(model.device()),
        );
        let max_in_flight = settings.in_flight();
        let mut builder = Pipeline::builder(model)
            // Room for the buffers in flight and for those a flush left behind.
            .queue_capacity(2 * max_in_flight)
            .encoder_ahead(settings.encoder_ahead);
        if let Some(TestFault::WorkerPanicAt(at)) =
            self.take_fault(|f| matches!(f, TestFault::WorkerPanicAt(_)))
        {
            builder = builder.track_hook(Arc::new(move |id| {
                if id == at {
                    panic!("injected test fault: the tracking worker panics on frame {id}");
                }
            }));
        }
        let pipeline = builder.build().map_err(StartError::Pipeline)?;
        Ok(State {
            pipeline: Arc::new(pipeline),
            info: None,
            buffers: 0,
            scheduled,
            objects: Objects::default(),
            pending: VecDeque::new(),
            ready: HashMap::new(),
            in_flight: 0,
            max_in_flight,
            discard: HashSet::new(),
            last: None,
            draining: false,
            in_transit: 0,
        })
    }

    pub(super) fn start_tracking(&self) -> Result<(), gst::ErrorMessage> {
        let settings = self.settings();
        let mut state = self.load(&settings).map_err(|e| {
            let kind = match e {
                StartError::NoModel
                | StartError::Device(_)
                | StartError::Precision(_)
                | StartError::Prompts(_)
                | StartError::NoAnalytics => gst::ResourceError::Settings,
                StartError::MissingModel { .. } => gst::ResourceError::NotFound,
                _ => gst::ResourceError::OpenRead,
            };
            gst::error_msg!(kind, ("{e}"))
        })?;
        let early: Vec<Command> = std::mem::take(&mut *lock(&self.early));
        let max = settings.max_objects as usize;
        let refused: Vec<_> = early
            .into_iter()
            .map(|c| state.objects.apply(&state.pipeline, c, max, 0))
            .collect();
        *lock(&self.stats) = Stats::default();
        *lock(&self.qos) = Qos::default();
        *lock(&self.upstream) = gst::ClockTime::ZERO;
        self.flushing.store(false, Ordering::SeqCst);
        *lock(&self.state) = Some(state);
        for r in refused {
            self.warn_refused(r);
        }
        if settings.live_mode {
            self.start_output_thread()?;
        }
        gst::info!(CAT, imp = self, "started");
        Ok(())
    }

    pub(super) fn stop_tracking(&self) -> Result<(), gst::ErrorMessage> {
        self.flushing.store(true, Ordering::SeqCst);
        self.stop_output_thread();
        // Dropping the pipeline stops and joins its threads.
        let state = lock(&self.state).take();
        drop(state);
        gst::info!(CAT, imp = self, "stopped");
        Ok(())
    }
}
