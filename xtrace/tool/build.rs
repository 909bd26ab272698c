//! Link flags of the tool library.
//!
//! `-z separate-loadable-segments` pads every loadable segment to its own file pages. Without it
//! lld lets the RELRO segment and the data segment share a file page, and when a process maps the
//! library while xtrace is attached (a dlopen by NVTX or ITT, or a launched command), the kernel
//! raises a USDT semaphore through the first writable mapping of that page — the RELRO one, about
//! to turn read-only — instead of `.probes` in the data segment, so the probes stay silent.
//!
//! zig's linker driver (the release's build, `cargo xtask dist` through cargo-zigbuild) refuses
//! the flag; there the release's test `tool_library_semaphores_share_no_page_with_relro`
//! (tests/tests/dist.rs) checks the layout instead.
fn main() {
    let zig = std::env::var("RUSTC_LINKER").is_ok_and(|linker| linker.contains("zigcc"));
    if !zig {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,separate-loadable-segments");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
