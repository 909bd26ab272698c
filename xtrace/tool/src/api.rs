//! xtrace's own range API for code that has neither NVTX nor ITT (include/xtrace_range.h): a
//! scope anyone can open and close, costing a semaphore check while no tracer is attached.
use core::ffi::c_char;

use crate::{
    open,
    text::cstr,
    usdt::{self, enabled, Source},
};

/// Where the API's semaphores are, for the header's inline check (include/xtrace_range.h): a
/// program reads `*xtrace_range_semaphores.push` (and `.pop`) before calling. Pointers rather than the
/// semaphores themselves, because a copy relocation would copy a semaphore into the executable,
/// where the kernel never raises it; copying the pointers is harmless. A push is wanted while
/// either `push` or `pop` is raised (a pop carries its range's start, kept at the push).
#[repr(C)]
pub struct Semaphores {
    pub push: *const u16,
    pub pop: *const u16,
    pub mark: *const u16,
}

// SAFETY: the pointers are never written; what they point at is only read (volatile).
unsafe impl Sync for Semaphores {}

#[no_mangle]
pub static xtrace_range_semaphores: Semaphores = Semaphores {
    push: &raw const usdt::xtrace_range_push_semaphore,
    pop: &raw const usdt::xtrace_range_pop_semaphore,
    mark: &raw const usdt::xtrace_mark_semaphore,
};

/// Opens a range named `name` on the calling thread.
///
/// # Safety
/// `name` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn xtrace_range_push(name: *const c_char) {
    crate::guard((), || {
        if open::push_wanted() {
            // SAFETY: as the caller promised.
            open::push(Source::Xtrace, None, unsafe { cstr(name) });
        }
    })
}

/// Closes the calling thread's innermost range.
#[no_mangle]
pub extern "C" fn xtrace_range_pop() {
    crate::guard((), || {
        if open::pop_wanted() {
            open::pop(Source::Xtrace, None);
        }
    })
}

/// An instant named `name`.
///
/// # Safety
/// `name` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn xtrace_mark(name: *const c_char) {
    crate::guard((), || {
        if enabled!(xtrace_mark_semaphore) {
            // SAFETY: as the caller promised.
            usdt::mark(Source::Xtrace, None, unsafe { cstr(name) });
        }
    })
}
