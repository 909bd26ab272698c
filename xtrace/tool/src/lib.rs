//! xtrace's tool library, `libxtrace_tool.so`, shipped next to the xtrace binary. A process loads
//! it as NVTX3's injection library (`NVTX_INJECTION64_PATH`), as ITT's collector
//! (`INTEL_LIBITTNOTIFY64`) and as CUDA's injection library (`CUDA_INJECTION64_PATH`, the GPU
//! device timeline: [`injection`]), or links it for the `xtrace_range_*` API. Every range, mark and
//! thread name ends in a USDT probe of provider `xtrace` ([`usdt`]), so a range costs a semaphore
//! check until xtrace attaches — even to a process started long before.
pub mod api;
mod clock;
mod cupti;
mod device;
pub mod injection;
pub mod itt;
mod names;
pub mod nvtx;
mod open;
mod records;
mod text;
pub mod usdt;

/// `mutex`, when no thread holds it. In a forked child only the forking thread lives on, so a
/// lock another thread held at the fork stays held for ever: the child takes none by waiting.
fn try_lock<T>(mutex: &std::sync::Mutex<T>) -> Option<std::sync::MutexGuard<'_, T>> {
    match mutex.try_lock() {
        Ok(guard) => Some(guard),
        Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// Runs `body`, an exported entry point's work: a panic stops here, where it gives `fallback`,
/// since one that unwound out of an `extern "C"` function would abort the application.
#[inline(always)]
fn guard<R>(fallback: R, body: impl FnOnce() -> R) -> R {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(fallback)
}
