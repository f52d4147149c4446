//! The `edgetam-ros2` binary: parses the rcl-style command line, loads the model and runs the
//! node (see `edgetam_ros2::node`).

use std::process::ExitCode;

use edgetam_ros2::args::{NodeArgs, Params};
use edgetam_ros2::node::{self, NodeError};

fn main() -> ExitCode {
    let args = match NodeArgs::parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => return fail(None, &NodeError::Args(e)),
    };
    if args.help {
        print!("{}", edgetam_ros2::usage());
        return ExitCode::SUCCESS;
    }
    let fqn = args.fully_qualified_name();
    edgetam_ros2::logging::init(&fqn, args.log_level);
    let result = Params::from_map(&args.params)
        .map_err(NodeError::Args)
        .and_then(|params| node::run(&args, &params));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(Some(&fqn), &e),
    }
}

fn fail(node: Option<&str>, e: &NodeError) -> ExitCode {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(&format!(": {s_text}"));
        }
        source = s.source();
    }
    match node {
        Some(n) => eprintln!("[FATAL] [{n}]: {text}"),
        None => eprintln!("edgetam-ros2: {text} (see --help)"),
    }
    ExitCode::from(e.exit_code() as u8)
}
