//! Gives `libedgetam.so` its soname, following cargo-c's convention so that programs linked
//! against it record a name that changes exactly when the ABI may break (semver): before 1.0
//! every minor release may break it, so 0.MINOR.PATCH gets `libedgetam.so.0.MINOR`; from 1.0
//! on, `libedgetam.so.MAJOR`. `scripts/install-capi.sh` reads the soname back (readelf) for
//! its symlink chain and the CMake package.

fn main() {
    let part = |name: &str| std::env::var(name).unwrap_or_else(|_| "0".into());
    let (major, minor) = (
        part("CARGO_PKG_VERSION_MAJOR"),
        part("CARGO_PKG_VERSION_MINOR"),
    );
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        let soname = if major == "0" {
            format!("libedgetam.so.0.{minor}")
        } else {
            format!("libedgetam.so.{major}")
        };
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
