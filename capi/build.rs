//! Gives `libedgetam.so` the soname `libedgetam.so.<major>` on Linux, so programs linked against
//! it record that name and `scripts/install-capi.sh` can install the usual symlink chain.

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libedgetam.so.{major}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
