//! Lets the linker find the prebuilt `libduckdb.so` (see `scripts/setup.sh`).
//!
//! `libduckdb-sys` links `-lduckdb` but, without `DUCKDB_LIB_DIR`, adds no search path, and
//! `rust-lld` (the default linker) does not look in `/usr/local/lib`. The search path emitted
//! here propagates to every binary that depends on this crate.

const DEFAULT_LIB_DIR: &str = "/usr/local/lib";

fn main() {
    println!("cargo:rerun-if-env-changed=DUCKDB_LIB_DIR");
    if std::env::var_os("CARGO_FEATURE_BUNDLED_DUCKDB").is_some() {
        return;
    }
    let dir = std::env::var("DUCKDB_LIB_DIR").unwrap_or_else(|_| DEFAULT_LIB_DIR.to_string());
    println!("cargo:rustc-link-search=native={dir}");
}
