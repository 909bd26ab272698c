//! C strings shared by the three front ends (NVTX, ITT, the C API): borrowing a caller's string,
//! and names kept for the life of the process (NVTX handles and ITT structs point at them).
use core::ffi::{c_char, CStr};
use std::{collections::HashMap, ffi::CString, sync::Mutex};

/// A caller's string, or None for a null pointer.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that lives for the call.
pub(crate) unsafe fn cstr<'a>(p: *const c_char) -> Option<&'a CStr> {
    // SAFETY: as the caller promised.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) })
}

/// A NUL-terminated copy of `name` that lives as long as the process; the same name always gives
/// the same pointer.
pub(crate) fn interned(name: &CStr) -> *const c_char {
    static NAMES: Mutex<Option<HashMap<Vec<u8>, usize>>> = Mutex::new(None);
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let names = names.get_or_insert_with(HashMap::new);
    let address = *names
        .entry(name.to_bytes().to_vec())
        .or_insert_with(|| CString::from(name).into_raw() as usize);
    address as *const c_char
}
