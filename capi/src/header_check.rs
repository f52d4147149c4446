//! The committed `include/edgetam.h` must be what cbindgen makes of these sources: this test
//! fails (in CI) when it is stale, and `EDGETAM_BLESS=1` rewrites it.

use std::path::Path;

#[test]
fn header_is_up_to_date() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
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
