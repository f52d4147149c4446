//! The committed `include/edgetam.h` must be what cbindgen makes of these sources: this test
//! fails (in CI) when it is stale, and `EDGETAM_BLESS=1` rewrites it.

use std::path::Path;

#[test]
fn header_is_up_to_date() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    config.after_includes = Some(version_macros());
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let path = dir.join("include/edgetam.h");
    if std::env::var_os("EDGETAM_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write include/edgetam.h");
        return;
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/edgetam.h is stale: regenerate it with \
         `EDGETAM_BLESS=1 cargo test --release -p edgetam-capi header` and commit it"
    );
}

/// The header's version macros, from the crate's (Cargo's) version: a version bump without a
/// regenerated header fails this test.
fn version_macros() -> String {
    format!(
        "\n/* The version of this header; the loaded library's is edgetam_version() and\n \
         * edgetam_version_number(), compared by edgetam_version_compatible() below. */\n\
         #define EDGETAM_VERSION_MAJOR {major}\n\
         #define EDGETAM_VERSION_MINOR {minor}\n\
         #define EDGETAM_VERSION_PATCH {patch}\n\
         #define EDGETAM_VERSION_STRING \"{version}\"\n\
         #define EDGETAM_VERSION_NUMBER \\\n  \
         (EDGETAM_VERSION_MAJOR * 1000000 + EDGETAM_VERSION_MINOR * 1000 + EDGETAM_VERSION_PATCH)\n",
        major = env!("CARGO_PKG_VERSION_MAJOR"),
        minor = env!("CARGO_PKG_VERSION_MINOR"),
        patch = env!("CARGO_PKG_VERSION_PATCH"),
        version = env!("CARGO_PKG_VERSION"),
    )
}
