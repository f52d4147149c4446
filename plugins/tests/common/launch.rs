//! The plugin as the real GStreamer tools load it: the `libgstedgetam.so` cargo built for these
//! tests, copied into a scratch folder that `GST_PLUGIN_PATH` points at (the target folder itself
//! holds other shared objects GStreamer would try to load), with a scratch `GST_REGISTRY`.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;

use super::tmp;

/// `target/<profile>`, from this test binary's path (`target/<profile>/deps/<test>-*`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>")
        .to_path_buf()
}

/// A folder holding only the plugin.
pub fn plugin_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // `cargo test` builds the cdylib into `deps/` (beside this binary) but copies it up to
        // `target/<profile>/` only on `cargo build`: take the newer of the two, so a stale
        // copy from an earlier build is never tested.
        let built = |p: PathBuf| {
            let modified = std::fs::metadata(&p).and_then(|m| m.modified()).ok()?;
            Some((modified, p))
        };
        let lib = [
            target_dir().join("deps").join("libgstedgetam.so"),
            target_dir().join("libgstedgetam.so"),
        ]
        .into_iter()
        .filter_map(built)
        .max()
        .map(|(_, p)| p)
        .unwrap_or_else(|| {
            panic!(
                "libgstedgetam.so not built in {}: run `cargo build --release -p gst-plugin-edgetam`",
                target_dir().display()
            )
        });
        let dir = tmp("plugin");
        std::fs::copy(&lib, dir.join("libgstedgetam.so")).expect("copy the plugin");
        dir
    })
    .clone()
}

/// `program args` with the plugin on `GST_PLUGIN_PATH`, a scratch registry and no inherited
/// `GST_DEBUG` / `GST_TRACERS`, to set more on before running it.
pub fn plugin_command(program: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("GST_PLUGIN_PATH", plugin_dir())
        .env("GST_REGISTRY", tmp("registry").join("registry.bin"))
        .env_remove("GST_DEBUG")
        .env_remove("GST_TRACERS");
    cmd
}

/// Runs [`plugin_command`] with `env` set.
pub fn with_plugin(program: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    run(
        plugin_command(program, args).envs(env.iter().copied()),
        program,
    )
}

/// `cmd`'s output; a tool that cannot be started fails the test with the package to install.
pub fn run(cmd: &mut Command, program: &str) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {program} (install gstreamer1.0-tools): {e}"))
}

/// A run that must fail cleanly: a non-zero status and no panic. Its [`text`], for the test to
/// look for the reason in.
pub fn failure(o: &Output) -> String {
    let all = text(o);
    assert!(!o.status.success(), "must fail: {all}");
    assert!(!all.contains("panicked"), "{all}");
    all
}

/// A command's status and output, for assertion messages.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
