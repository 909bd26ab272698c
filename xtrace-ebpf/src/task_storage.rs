//! A BPF task-local storage map (`BPF_MAP_TYPE_TASK_STORAGE`, which tracing programs may use on
//! every kernel xtrace supports), which aya-ebpf 0.2 does not wrap. It is a BTF map definition in `.maps` (local storage
//! needs BTF for its key and value): each field's pointee type carries one of the map's attributes,
//! the way libbpf's `__uint`/`__type` macros lay them out. A thread's value hangs off its
//! `task_struct`, so finding it is a pointer walk instead of a hash of the thread id, and the kernel
//! frees it when the thread exits.
use core::{marker::PhantomData, ptr};

use aya_ebpf::{
    bindings::{bpf_map_type::BPF_MAP_TYPE_TASK_STORAGE, BPF_F_NO_PREALLOC, BPF_LOCAL_STORAGE_GET_F_CREATE},
    helpers::generated::{bpf_get_current_task_btf, bpf_task_storage_get},
};

#[repr(C)]
pub struct TaskStorage<T> {
    r#type: *const [i32; BPF_MAP_TYPE_TASK_STORAGE as usize],
    key: *const i32,
    value: *const T,
    max_entries: *const [i32; 0],
    map_flags: *const [i32; BPF_F_NO_PREALLOC as usize],
    _value: PhantomData<T>,
}

// SAFETY: the fields are placeholders the loader reads from BTF; Rust never dereferences them.
unsafe impl<T> Sync for TaskStorage<T> {}

impl<T> TaskStorage<T> {
    pub const fn new() -> Self {
        Self {
            r#type: ptr::null(),
            key: ptr::null(),
            value: ptr::null(),
            max_entries: ptr::null(),
            map_flags: ptr::null(),
            _value: PhantomData,
        }
    }

    /// The current thread's value, created zeroed when `create` and it has none yet; None when it
    /// has none (and not `create`) or the kernel could not allocate it.
    #[inline(always)]
    pub fn current(&self, create: bool) -> Option<*mut T> {
        let flags = if create {
            BPF_LOCAL_STORAGE_GET_F_CREATE as u64
        } else {
            0
        };
        // SAFETY: the helper takes the current task's BTF pointer and this map; a NULL initial
        // value means zeroed.
        let value = unsafe {
            bpf_task_storage_get(
                ptr::from_ref(self).cast_mut().cast(),
                bpf_get_current_task_btf().cast(),
                ptr::null_mut(),
                flags,
            )
        };
        (!value.is_null()).then_some(value.cast::<T>())
    }

    /// The value of `task` (a BTF-typed `task_struct` pointer a tracepoint gave), if it has one.
    #[inline(always)]
    pub fn of(&self, task: *mut core::ffi::c_void) -> Option<*mut T> {
        // SAFETY: the helper takes a BTF task pointer and this map; nothing is created.
        let value = unsafe {
            bpf_task_storage_get(
                ptr::from_ref(self).cast_mut().cast(),
                task.cast(),
                ptr::null_mut(),
                0,
            )
        };
        (!value.is_null()).then_some(value.cast::<T>())
    }
}
