//! Link flags of the tool library.
//!
//! `-z separate-loadable-segments` pads every loadable segment to its own file pages. Without it
//! lld lets the RELRO segment and the data segment share a file page, and when a process maps the
//! library while xtrace is attached (a dlopen by NVTX or ITT, or a launched command), the kernel
//! raises a USDT semaphore through the first writable mapping of that page — the RELRO one, about
//! to turn read-only — instead of `.probes` in the data segment, so the probes stay silent.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,separate-loadable-segments");
    println!("cargo:rerun-if-changed=build.rs");
}
