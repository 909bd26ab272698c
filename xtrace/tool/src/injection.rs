//! The tool library as a CUDA injection library: the driver loads `CUDA_INJECTION64_PATH` during
//! `cuInit` and calls its `InitializeInjection`. That only notes that CUDA started and starts one
//! thread, `xtrace-gpu`, which reads the `xtrace:gpu_records` semaphore every [`PERIOD`]: no CUPTI
//! call is made until a tracer raises it (xtrace attaching its probe there), so an untraced
//! process pays nothing per launch, and the device timeline starts at most one period after the
//! attach. It ends when that semaphore falls or when `xtrace:gpu_drain`'s rises: xtrace raises
//! the second when it stops, so that the last records still reach it. The watcher is started
//! again in a forked child, where it waits for the semaphore, inherited raised from a traced
//! parent, to fall before anything can start. `xtrace --inject` loads the library into a running
//! process and calls [`xtrace_inject_start`] instead.
use core::ffi::c_int;
use std::{
    panic::catch_unwind,
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use crate::{device, usdt::enabled};

/// How often the watcher reads the semaphore and, while tracing, flushes CUPTI's buffers.
pub const PERIOD: Duration = Duration::from_millis(100);

/// Set by `InitializeInjection`: CUDA started in this process.
static CUDA_STARTED: AtomicBool = AtomicBool::new(false);

/// Called by the CUDA driver during `cuInit`. Returns 1 (success), 0 when the watcher could not be
/// started.
#[no_mangle]
pub extern "C" fn InitializeInjection() -> c_int {
    catch_unwind(|| {
        if CUDA_STARTED.swap(true, Ordering::AcqRel) {
            return 1;
        }
        // SAFETY: registers a handler with no arguments, which catches its own panics.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        c_int::from(start_watcher())
    })
    .unwrap_or(0)
}

/// Called by the code `xtrace record --inject` runs in a process that was started without the
/// variable, right after it loaded this library: the driver, initialized already, will not call
/// `InitializeInjection` again, so this does what it does. Returns as `InitializeInjection` does.
#[no_mangle]
pub extern "C" fn xtrace_inject_start() -> c_int {
    InitializeInjection()
}

/// Whether `InitializeInjection` has run in this process.
pub fn cuda_started() -> bool {
    CUDA_STARTED.load(Ordering::Acquire)
}

fn start_watcher() -> bool {
    std::thread::Builder::new()
        .name("xtrace-gpu".into())
        .spawn(watch)
        .is_ok()
}

/// The forked child has none of its parent's threads, nor a CUPTI session of its own.
extern "C" fn in_child() {
    let _ = catch_unwind(|| {
        if device::forget_after_fork() {
            start_watcher();
        }
    });
}

fn watch() {
    crate::usdt::gpu_drain();
    loop {
        let traced = enabled!(xtrace_gpu_records_semaphore) && !enabled!(xtrace_gpu_drain_semaphore);
        let _ = catch_unwind(|| device::tick(traced));
        std::thread::sleep(PERIOD);
    }
}
