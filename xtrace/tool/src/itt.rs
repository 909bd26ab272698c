//! Intel ITT collector: ittnotify's static part (compiled into every ITT user) loads this library
//! from `INTEL_LIBITTNOTIFY64` at its first call and hands it `__itt_api_init`, which binds the
//! static part's function pointers: ours for what we trace, the static part's no-op for the rest.
//!
//! Domains and string handles are the public structs: we allocate them (with a nonzero `flags`,
//! else the callers' macros skip every call), but those created before the collector was loaded
//! belong to the static part, so only their public fields are read.
use core::ffi::{c_char, c_int, c_void, CStr};
use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex,
    },
};

use crate::{
    open,
    text::{cstr, interned},
    usdt::{self, enabled, Source},
};

/// `__itt_domain`.
#[repr(C)]
pub struct Domain {
    flags: c_int,
    name_a: *const c_char,
    name_w: *const c_void,
    extra1: c_int,
    extra2: *mut c_void,
    next: *mut Domain,
}

/// `__itt_string_handle`.
#[repr(C)]
pub struct StringHandle {
    str_a: *const c_char,
    str_w: *const c_void,
    extra1: c_int,
    extra2: *mut c_void,
    next: *mut StringHandle,
}

/// `__itt_id`, passed by value (in memory on x86-64).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Id {
    d1: u64,
    d2: u64,
    d3: u64,
}

/// `__itt_api_info`: one entry of the static part's function list (ends at a null name).
#[repr(C)]
struct ApiInfo {
    name: *const c_char,
    func_ptr: *mut *const c_void,
    init_func: *const c_void,
    null_func: *const c_void,
    group: c_int,
}

/// Where `api_list_ptr` sits in `__itt_global` (x86-64, ittnotify 3.x).
const API_LIST_OFFSET: usize = 120;

/// A domain's name.
///
/// # Safety
/// `d` is null or an `__itt_domain`.
unsafe fn domain_name<'a>(d: *const Domain) -> Option<&'a CStr> {
    // SAFETY: as the caller promised.
    unsafe { d.as_ref().and_then(|d| cstr(d.name_a)) }
}

/// Objects created by name, kept for the life of the process; the same name gives the same one.
fn created<T>(
    table: &Mutex<Option<HashMap<Vec<u8>, usize>>>,
    name: &CStr,
    make: impl FnOnce(*const c_char) -> T,
) -> *mut T {
    let mut table = table.lock().unwrap_or_else(|e| e.into_inner());
    let table = table.get_or_insert_with(HashMap::new);
    let address = *table
        .entry(name.to_bytes().to_vec())
        .or_insert_with(|| Box::into_raw(Box::new(make(interned(name)))) as usize);
    address as *mut T
}

/// # Safety
/// `name` is null or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn __itt_domain_create(name: *const c_char) -> *mut Domain {
    crate::guard(core::ptr::null_mut(), || {
        static DOMAINS: Mutex<Option<HashMap<Vec<u8>, usize>>> = Mutex::new(None);
        // SAFETY: as the caller promised.
        let Some(name) = (unsafe { cstr(name) }) else {
            return core::ptr::null_mut();
        };
        created(&DOMAINS, name, |name_a| Domain {
            flags: 1,
            name_a,
            name_w: core::ptr::null(),
            extra1: 0,
            extra2: core::ptr::null_mut(),
            next: core::ptr::null_mut(),
        })
    })
}

/// # Safety
/// `name` is null or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn __itt_string_handle_create(name: *const c_char) -> *mut StringHandle {
    crate::guard(core::ptr::null_mut(), || {
        static STRINGS: Mutex<Option<HashMap<Vec<u8>, usize>>> = Mutex::new(None);
        // SAFETY: as the caller promised.
        let Some(name) = (unsafe { cstr(name) }) else {
            return core::ptr::null_mut();
        };
        created(&STRINGS, name, |str_a| StringHandle {
            str_a,
            str_w: core::ptr::null(),
            extra1: 0,
            extra2: core::ptr::null_mut(),
            next: core::ptr::null_mut(),
        })
    })
}

/// # Safety
/// `d` is an `__itt_domain`, `name` null or an `__itt_string_handle`.
#[no_mangle]
pub unsafe extern "C" fn __itt_task_begin(d: *const Domain, _id: Id, _parent: Id, name: *const StringHandle) {
    crate::guard((), || {
        if open::push_wanted() {
            // SAFETY: as the caller promised.
            let (domain, name) = unsafe { (domain_name(d), name.as_ref().and_then(|n| cstr(n.str_a))) };
            open::push(Source::Itt, domain, name);
        }
    })
}

/// # Safety
/// `d` is an `__itt_domain`.
#[no_mangle]
pub unsafe extern "C" fn __itt_task_end(d: *const Domain) {
    crate::guard((), || {
        if open::pop_wanted() {
            // SAFETY: as the caller promised.
            open::pop(Source::Itt, unsafe { domain_name(d) });
        }
    })
}

/// A start/end range's key: the domain's address and the ITT id.
type OpenKey = (usize, u64, u64, u64);

/// Start/end ranges open by (domain, ITT id): our range ids, so the end finds its start.
static OPEN: Mutex<Option<HashMap<OpenKey, u64>>> = Mutex::new(None);

/// Opens a start/end range named `name` for (domain, id), while traced.
fn start(d: *const Domain, id: Id, name: Option<&CStr>) {
    if !enabled!(xtrace_range_start_semaphore) {
        return;
    }
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let range = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    open.get_or_insert_with(HashMap::new)
        .insert((d as usize, id.d1, id.d2, id.d3), range);
    drop(open);
    // SAFETY: `d` is an `__itt_domain` (the caller's promise).
    usdt::range_start(Source::Itt, unsafe { domain_name(d) }, name, range);
}

/// Ends the range [`start`] opened for (domain, id), if it did.
fn end(d: *const Domain, id: Id) {
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    let range = open
        .as_mut()
        .and_then(|o| o.remove(&(d as usize, id.d1, id.d2, id.d3)));
    drop(open);
    if let Some(range) = range {
        if enabled!(xtrace_range_end_semaphore) {
            usdt::range_end(Source::Itt, range);
        }
    }
}

/// # Safety
/// `d` is an `__itt_domain`, `name` null or an `__itt_string_handle`.
#[no_mangle]
pub unsafe extern "C" fn __itt_task_begin_overlapped(
    d: *const Domain,
    id: Id,
    _parent: Id,
    name: *const StringHandle,
) {
    crate::guard((), || {
        // SAFETY: as the caller promised.
        start(d, id, unsafe { name.as_ref().and_then(|n| cstr(n.str_a)) });
    })
}

/// # Safety
/// `d` is an `__itt_domain`.
#[no_mangle]
pub unsafe extern "C" fn __itt_task_end_overlapped(d: *const Domain, id: Id) {
    crate::guard((), || {
        end(d, id);
    })
}

/// The id of a frame call (null: the domain's one frame at a time).
///
/// # Safety
/// `id` is null or an `__itt_id`.
unsafe fn frame_id(id: *const Id) -> Id {
    // SAFETY: as the caller promised.
    unsafe { id.as_ref() }
        .copied()
        .unwrap_or(Id { d1: 0, d2: 0, d3: 0 })
}

/// # Safety
/// `d` is an `__itt_domain`, `id` null or an `__itt_id`.
#[no_mangle]
pub unsafe extern "C" fn __itt_frame_begin_v3(d: *const Domain, id: *const Id) {
    crate::guard((), || {
        // SAFETY: as the caller promised.
        start(d, unsafe { frame_id(id) }, Some(c"frame"));
    })
}

/// # Safety
/// `d` is an `__itt_domain`, `id` null or an `__itt_id`.
#[no_mangle]
pub unsafe extern "C" fn __itt_frame_end_v3(d: *const Domain, id: *const Id) {
    crate::guard((), || {
        // SAFETY: as the caller promised.
        end(d, unsafe { frame_id(id) });
    })
}

/// # Safety
/// `name` is null or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn __itt_thread_set_name(name: *const c_char) {
    crate::guard((), || {
        if enabled!(xtrace_thread_name_semaphore) {
            // SAFETY: as the caller promised.
            usdt::thread_name(Source::Itt, 0, unsafe { cstr(name) });
        }
    })
}

/// Ours for an ITT function name, if we trace it.
fn ours(name: &[u8]) -> Option<*const c_void> {
    let f: *const c_void = match name {
        b"__itt_domain_create" => __itt_domain_create as *const c_void,
        b"__itt_string_handle_create" => __itt_string_handle_create as *const c_void,
        b"__itt_task_begin" => __itt_task_begin as *const c_void,
        b"__itt_task_end" => __itt_task_end as *const c_void,
        b"__itt_task_begin_overlapped" => __itt_task_begin_overlapped as *const c_void,
        b"__itt_task_end_overlapped" => __itt_task_end_overlapped as *const c_void,
        b"__itt_frame_begin_v3" => __itt_frame_begin_v3 as *const c_void,
        b"__itt_frame_end_v3" => __itt_frame_end_v3 as *const c_void,
        b"__itt_thread_set_name" => __itt_thread_set_name as *const c_void,
        _ => return None,
    };
    Some(f)
}

/// The static part's entry point into a collector: binds every function of its list.
///
/// # Safety
/// `global` is the static part's `__itt_global`.
#[no_mangle]
pub unsafe extern "C" fn __itt_api_init(global: *mut c_void, _groups: c_int) {
    crate::guard((), || {
        if global.is_null() {
            return;
        }
        // SAFETY: `__itt_global`'s layout: the list pointer at API_LIST_OFFSET.
        let mut entry = unsafe { *global.cast::<u8>().add(API_LIST_OFFSET).cast::<*mut ApiInfo>() };
        if entry.is_null() {
            return;
        }
        // SAFETY: the list ends with an entry whose name is null; each func_ptr is a slot.
        unsafe {
            while !(*entry).name.is_null() {
                let info = &mut *entry;
                if !info.func_ptr.is_null() {
                    let name = CStr::from_ptr(info.name).to_bytes();
                    *info.func_ptr = ours(name).unwrap_or(info.null_func);
                }
                entry = entry.add(1);
            }
        }
    })
}
