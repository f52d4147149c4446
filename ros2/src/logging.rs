//! ROS-style log lines on stderr: `[LEVEL] [unix seconds] [node]: message`. The node's own
//! messages at the chosen level (default info); other crates' (RustDDS, ros2-client: chatty
//! about fragmented large samples) only from error up unless the level is debug or trace.

use std::io::Write;
use std::sync::OnceLock;

use log::{Level, LevelFilter, Log, Metadata, Record};

struct Logger {
    node: String,
    level: LevelFilter,
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

impl Log for Logger {
    fn enabled(&self, m: &Metadata) -> bool {
        if m.target().starts_with("edgetam") {
            m.level() <= self.level
        } else {
            m.level() <= Level::Error || self.level >= LevelFilter::Debug && m.level() <= self.level
        }
    }

    fn log(&self, r: &Record) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let level = match r.level() {
            Level::Error => "ERROR",
            Level::Warn => "WARN",
            Level::Info => "INFO",
            Level::Debug | Level::Trace => "DEBUG",
        };
        let _ = writeln!(
            std::io::stderr().lock(),
            "[{level}] [{}.{:09}] [{}]: {}",
            t.as_secs(),
            t.subsec_nanos(),
            self.node,
            r.args()
        );
    }

    fn flush(&self) {}
}

/// Installs the logger once (later calls keep the first).
pub fn init(node: &str, level: LevelFilter) {
    let logger = LOGGER.get_or_init(|| Logger {
        node: node.to_string(),
        level,
    });
    if log::set_logger(logger).is_ok() {
        log::set_max_level(level.max(LevelFilter::Error));
    }
}

/// `--log-level` values as rcl spells them.
pub fn parse_level(s: &str) -> Option<LevelFilter> {
    Some(match s.to_ascii_lowercase().as_str() {
        "debug" => LevelFilter::Debug,
        "info" => LevelFilter::Info,
        "warn" | "warning" => LevelFilter::Warn,
        "error" | "fatal" => LevelFilter::Error,
        "unset" => LevelFilter::Info,
        _ => return None,
    })
}
