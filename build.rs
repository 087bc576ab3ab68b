//! Link drip's own program as a position-dependent executable on Linux
//! with glibc: start-up then relocates nothing in it (a position-
//! independent drip has about 13,000 relative relocations, and the
//! pages of `.data.rel.ro` they write are copied on write: a quarter of
//! a one-record run's page faults). The libraries, the stack and the
//! heap are still placed at random; drip's own code is not. See
//! docs/benchmarks.md, "Start-up". Elsewhere the platform's default stays.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
