//! NVTX3 injection: NVTX loads this library from `NVTX_INJECTION64_PATH` at a process's first NVTX
//! call (once per NVTX instance: each library built with the NVTX3 headers has its own) and calls
//! `InitializeInjectionNvtx2`, which fills the instance's function slots through the export
//! table of callbacks. Slots left alone become no-ops.
//!
//! Handles are ours to define: a domain handle and a registered-string handle are each a pointer
//! to a NUL-terminated copy of the name, kept for the life of the process, so the tracer can read
//! a message whatever form it came in. Wide strings are converted to UTF-8 only while traced.
use core::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::{
    cell::Cell,
    ffi::CString,
    sync::atomic::{AtomicU64, Ordering},
};

use crate::{
    open,
    text::{cstr, interned},
    usdt::{self, enabled, Source},
};

type Fn = unsafe extern "C" fn();
type GetExportTable = unsafe extern "C" fn(u32) -> *const c_void;
type GetModuleFunctionTable = unsafe extern "C" fn(c_int, *mut *mut *mut Option<Fn>, *mut c_uint) -> c_int;

/// `NvtxExportTableCallbacks`.
#[repr(C)]
struct Callbacks {
    struct_size: usize,
    get_module_function_table: Option<GetModuleFunctionTable>,
}

/// `NVTX_ETID_CALLBACKS`.
const EXPORT_TABLE_CALLBACKS: u32 = 1;
/// `NVTX_CB_MODULE_CORE` and `NVTX_CB_MODULE_CORE2`.
const MODULE_CORE: c_int = 1;
const MODULE_CORE2: c_int = 5;

/// `nvtxEventAttributes_t` (version 3, 48 bytes) up to its message.
#[repr(C)]
struct EventAttributes {
    version: u16,
    size: u16,
    category: u32,
    color_type: i32,
    color: u32,
    payload_type: i32,
    reserved0: i32,
    payload: u64,
    message_type: i32,
    message: *const c_void,
}

const MESSAGE_ASCII: i32 = 1;
const MESSAGE_UNICODE: i32 = 2;
const MESSAGE_REGISTERED: i32 = 3;

/// A wide (UTF-32 on Linux) string as UTF-8 bytes.
///
/// # Safety
/// `text` is null or NUL-terminated.
unsafe fn wide(text: *const i32) -> Option<CString> {
    if text.is_null() {
        return None;
    }
    let mut out = String::new();
    for i in 0.. {
        // SAFETY: within the NUL-terminated string, as the caller promised.
        let unit = unsafe { *text.add(i) };
        if unit == 0 || out.len() >= 256 {
            break;
        }
        out.push(char::from_u32(unit as u32).unwrap_or(char::REPLACEMENT_CHARACTER));
    }
    CString::new(out).ok()
}

/// The message of an event's attributes; None when absent or of an unknown type.
///
/// # Safety
/// `attr` is null or points to attributes whose message is as its type says.
unsafe fn message(attr: *const EventAttributes) -> Option<CString> {
    // SAFETY: as the caller promised; `size` says how much of the struct the caller filled.
    let attr = unsafe { attr.as_ref()? };
    if usize::from(attr.size) < core::mem::size_of::<EventAttributes>() {
        return None;
    }
    match attr.message_type {
        // A registered string is one of our interned names.
        // SAFETY: NUL-terminated by the caller (ASCII) or by us (registered).
        MESSAGE_ASCII | MESSAGE_REGISTERED => unsafe { cstr(attr.message.cast()) }.map(CStr::to_owned),
        // SAFETY: NUL-terminated wide string.
        MESSAGE_UNICODE => unsafe { wide(attr.message.cast()) },
        _ => None,
    }
}

/// The domain's name (null handle: the default domain).
///
/// # Safety
/// `domain` is null or a handle from [`domain_create_a`].
unsafe fn domain<'a>(domain: *const c_void) -> Option<&'a CStr> {
    // SAFETY: our handles are interned NUL-terminated names.
    unsafe { cstr(domain.cast()) }
}

thread_local! {
    /// Push/pop nesting level of this thread (what NVTX's push and pop return).
    static LEVEL: Cell<c_int> = const { Cell::new(0) };
}

fn push_level() -> c_int {
    LEVEL.with(|l| {
        let level = l.get();
        l.set(level + 1);
        level
    })
}

/// The level of the range a pop ends, or -1 (NVTX's negative error) when none is open.
fn pop_level() -> c_int {
    LEVEL.with(|l| {
        let level = l.get() - 1;
        if level < 0 {
            return -1;
        }
        l.set(level);
        level
    })
}

/// Range ids: unique in the process, never 0.
fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

unsafe extern "C" fn mark_a(text: *const c_char) {
    crate::guard((), || {
        if enabled!(xtrace_mark_semaphore) {
            // SAFETY: NVTX passes a NUL-terminated string.
            usdt::mark(Source::Nvtx, None, unsafe { cstr(text) });
        }
    })
}

unsafe extern "C" fn mark_w(text: *const i32) {
    crate::guard((), || {
        if enabled!(xtrace_mark_semaphore) {
            // SAFETY: NVTX passes a NUL-terminated wide string.
            usdt::mark(Source::Nvtx, None, unsafe { wide(text) }.as_deref());
        }
    })
}

unsafe extern "C" fn mark_ex(attr: *const EventAttributes) {
    crate::guard((), || {
        // SAFETY: forwarded from NVTX.
        unsafe { domain_mark_ex(core::ptr::null(), attr) }
    })
}

unsafe extern "C" fn domain_mark_ex(d: *const c_void, attr: *const EventAttributes) {
    crate::guard((), || {
        if enabled!(xtrace_mark_semaphore) {
            // SAFETY: handles and attributes from NVTX.
            let (d, m) = unsafe { (domain(d), message(attr)) };
            usdt::mark(Source::Nvtx, d, m.as_deref());
        }
    })
}

unsafe extern "C" fn range_push_a(text: *const c_char) -> c_int {
    crate::guard(-1, || {
        if open::push_wanted() {
            // SAFETY: NVTX passes a NUL-terminated string.
            open::push(Source::Nvtx, None, unsafe { cstr(text) });
        }
        push_level()
    })
}

unsafe extern "C" fn range_push_w(text: *const i32) -> c_int {
    crate::guard(-1, || {
        if open::push_wanted() {
            // SAFETY: NVTX passes a NUL-terminated wide string.
            open::push(Source::Nvtx, None, unsafe { wide(text) }.as_deref());
        }
        push_level()
    })
}

unsafe extern "C" fn range_push_ex(attr: *const EventAttributes) -> c_int {
    crate::guard(-1, || {
        // SAFETY: forwarded from NVTX.
        unsafe { domain_range_push_ex(core::ptr::null(), attr) }
    })
}

unsafe extern "C" fn domain_range_push_ex(d: *const c_void, attr: *const EventAttributes) -> c_int {
    crate::guard(-1, || {
        if open::push_wanted() {
            // SAFETY: handles and attributes from NVTX.
            let (d, m) = unsafe { (domain(d), message(attr)) };
            open::push(Source::Nvtx, d, m.as_deref());
        }
        push_level()
    })
}

extern "C" fn range_pop() -> c_int {
    crate::guard(-1, || {
        // SAFETY: the default domain.
        unsafe { domain_range_pop(core::ptr::null()) }
    })
}

unsafe extern "C" fn domain_range_pop(d: *const c_void) -> c_int {
    crate::guard(-1, || {
        if open::pop_wanted() {
            // SAFETY: a handle from NVTX.
            open::pop(Source::Nvtx, unsafe { domain(d) });
        }
        pop_level()
    })
}

unsafe extern "C" fn range_start_a(text: *const c_char) -> u64 {
    crate::guard(0, || {
        let id = next_id();
        if enabled!(xtrace_range_start_semaphore) {
            // SAFETY: NVTX passes a NUL-terminated string.
            usdt::range_start(Source::Nvtx, None, unsafe { cstr(text) }, id);
        }
        id
    })
}

unsafe extern "C" fn range_start_w(text: *const i32) -> u64 {
    crate::guard(0, || {
        let id = next_id();
        if enabled!(xtrace_range_start_semaphore) {
            // SAFETY: NVTX passes a NUL-terminated wide string.
            usdt::range_start(Source::Nvtx, None, unsafe { wide(text) }.as_deref(), id);
        }
        id
    })
}

unsafe extern "C" fn range_start_ex(attr: *const EventAttributes) -> u64 {
    crate::guard(0, || {
        // SAFETY: forwarded from NVTX.
        unsafe { domain_range_start_ex(core::ptr::null(), attr) }
    })
}

unsafe extern "C" fn domain_range_start_ex(d: *const c_void, attr: *const EventAttributes) -> u64 {
    crate::guard(0, || {
        let id = next_id();
        if enabled!(xtrace_range_start_semaphore) {
            // SAFETY: handles and attributes from NVTX.
            let (d, m) = unsafe { (domain(d), message(attr)) };
            usdt::range_start(Source::Nvtx, d, m.as_deref(), id);
        }
        id
    })
}

extern "C" fn range_end(id: u64) {
    crate::guard((), || {
        if enabled!(xtrace_range_end_semaphore) {
            usdt::range_end(Source::Nvtx, id);
        }
    })
}

extern "C" fn domain_range_end(_domain: *const c_void, id: u64) {
    crate::guard((), || {
        range_end(id);
    })
}

unsafe extern "C" fn name_os_thread_a(tid: u32, name: *const c_char) {
    crate::guard((), || {
        if enabled!(xtrace_thread_name_semaphore) {
            // SAFETY: NVTX passes a NUL-terminated string.
            usdt::thread_name(Source::Nvtx, u64::from(tid), unsafe { cstr(name) });
        }
    })
}

unsafe extern "C" fn name_os_thread_w(tid: u32, name: *const i32) {
    crate::guard((), || {
        if enabled!(xtrace_thread_name_semaphore) {
            // SAFETY: NVTX passes a NUL-terminated wide string.
            usdt::thread_name(Source::Nvtx, u64::from(tid), unsafe { wide(name) }.as_deref());
        }
    })
}

unsafe extern "C" fn domain_create_a(name: *const c_char) -> *const c_char {
    crate::guard(core::ptr::null(), || {
        // SAFETY: NVTX passes a NUL-terminated string.
        unsafe { cstr(name) }.map_or(core::ptr::null(), interned)
    })
}

unsafe extern "C" fn domain_create_w(name: *const i32) -> *const c_char {
    crate::guard(core::ptr::null(), || {
        // SAFETY: NVTX passes a NUL-terminated wide string.
        unsafe { wide(name) }.map_or(core::ptr::null(), |n| interned(&n))
    })
}

unsafe extern "C" fn register_string_a(_domain: *const c_void, text: *const c_char) -> *const c_char {
    crate::guard(core::ptr::null(), || {
        // SAFETY: as domain_create_a.
        unsafe { domain_create_a(text) }
    })
}

unsafe extern "C" fn register_string_w(_domain: *const c_void, text: *const i32) -> *const c_char {
    crate::guard(core::ptr::null(), || {
        // SAFETY: as domain_create_w.
        unsafe { domain_create_w(text) }
    })
}

/// The callbacks installed per module: (callback id, function).
fn callbacks(module: c_int) -> Vec<(usize, Fn)> {
    // SAFETY (all transmutes): each is an `extern "C"` function pointer; NVTX calls it through the
    // slot's own signature, which is the one the callback id names.
    macro_rules! f {
        ($f:expr) => {
            unsafe { core::mem::transmute::<*const (), Fn>($f as *const ()) }
        };
    }
    match module {
        MODULE_CORE => vec![
            (1, f!(mark_ex)),
            (2, f!(mark_a)),
            (3, f!(mark_w)),
            (4, f!(range_start_ex)),
            (5, f!(range_start_a)),
            (6, f!(range_start_w)),
            (7, f!(range_end)),
            (8, f!(range_push_ex)),
            (9, f!(range_push_a)),
            (10, f!(range_push_w)),
            (11, f!(range_pop)),
            (14, f!(name_os_thread_a)),
            (15, f!(name_os_thread_w)),
        ],
        MODULE_CORE2 => vec![
            (1, f!(domain_mark_ex)),
            (2, f!(domain_range_start_ex)),
            (3, f!(domain_range_end)),
            (4, f!(domain_range_push_ex)),
            (5, f!(domain_range_pop)),
            (10, f!(register_string_a)),
            (11, f!(register_string_w)),
            (12, f!(domain_create_a)),
            (13, f!(domain_create_w)),
        ],
        _ => Vec::new(),
    }
}

/// NVTX3's entry point: fills this NVTX instance's CORE and CORE2 slots. Returns 1 (success)
/// when the export table of callbacks is there, 0 otherwise (NVTX then turns every call into a
/// no-op).
///
/// # Safety
/// Called by NVTX with its `getExportTable` function.
#[no_mangle]
pub unsafe extern "C" fn InitializeInjectionNvtx2(get_export_table: Option<GetExportTable>) -> c_int {
    crate::guard(0, || {
        let Some(get_export_table) = get_export_table else {
            return 0;
        };
        // SAFETY: NVTX's export table function and the table it returns.
        let table = unsafe { get_export_table(EXPORT_TABLE_CALLBACKS) }.cast::<Callbacks>();
        // SAFETY: null or a valid table of at least `struct_size` bytes.
        let Some(table) = (unsafe { table.as_ref() }) else {
            return 0;
        };
        if table.struct_size < core::mem::size_of::<Callbacks>() {
            return 0;
        }
        let Some(get_module) = table.get_module_function_table else {
            return 0;
        };
        for module in [MODULE_CORE, MODULE_CORE2] {
            let (mut slots, mut size): (*mut *mut Option<Fn>, c_uint) = (core::ptr::null_mut(), 0);
            // SAFETY: NVTX's function, with out-pointers to our locals.
            if unsafe { get_module(module, &mut slots, &mut size) } == 0 || slots.is_null() {
                continue;
            }
            for (id, callback) in callbacks(module) {
                if id >= size as usize {
                    continue;
                }
                // SAFETY: `slots` has `size` entries, each null or the address of a function slot.
                unsafe {
                    let slot = *slots.add(id);
                    if !slot.is_null() {
                        *slot = Some(callback);
                    }
                }
            }
        }
        1
    })
}

#[cfg(test)]
mod tests {
    /// Push returns the level of the range it starts, pop the level of the one it ends: 0 for
    /// the outermost, and NVTX's negative error for a pop with none open.
    #[test]
    fn levels_as_nvtx_says() {
        assert_eq!(super::pop_level(), -1);
        assert_eq!((super::push_level(), super::push_level()), (0, 1));
        assert_eq!((super::pop_level(), super::pop_level()), (1, 0));
        assert_eq!(super::pop_level(), -1);
        assert_eq!(super::push_level(), 0);
    }
}
