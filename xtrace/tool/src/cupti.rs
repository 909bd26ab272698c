//! The process's own libcupti, found and bound at activation: the functions the device timeline
//! calls, with CUPTI's C signatures (cupti_activity.h, cupti_callbacks.h, cupti_result.h), and the
//! fields of its activity records that every version since CUDA 11 has at the same offsets.
//!
//! Never a second copy: a libcupti the process already maps (`RTLD_NOLOAD`), else the one beside
//! the CUDA runtime it maps (a CUDA wheel's `nvidia/cuda_cupti/lib`, or the toolkit's directory).
use core::ffi::{c_char, c_int, c_void, CStr};
use std::{ffi::CString, path::PathBuf};

/// `CUptiResult`.
pub type CuptiResult = c_int;
pub const SUCCESS: CuptiResult = 0;
/// `CUPTI_ERROR_MAX_LIMIT_REACHED`: no more records in a buffer.
pub const MAX_LIMIT_REACHED: CuptiResult = 12;

/// `CUpti_ActivityKind` values the timeline enables and reads.
pub mod kind {
    pub const MEMCPY: u32 = 1;
    pub const MEMSET: u32 = 2;
    pub const KERNEL: u32 = 3;
    pub const CONCURRENT_KERNEL: u32 = 10;
}

/// `CUpti_CallbackDomain`.
pub const DOMAIN_DRIVER_API: u32 = 1;
pub const DOMAIN_RUNTIME_API: u32 = 2;
/// The launch calls whose API callbacks carry the correlation id of the work they launch, by
/// (domain, callback id) as cupti_runtime_cbid.h and cupti_driver_cbid.h number them (the same in
/// CUDA 12 and 13): the kernel launches, each with its per-thread default stream form (`_ptsz`):
/// `cudaLaunchKernel_v7000` (211, 214), `cudaLaunchCooperativeKernel_v9000` (269, 270),
/// `cudaLaunchKernelExC_v11060` (430, 431), `cuLaunchKernel` (307, 442),
/// `cuLaunchCooperativeKernel` (477, 478), `cuLaunchKernelEx` (652, 653: recent Triton's); and the
/// graph launches, whose id every node's record of that launch carries: `cudaGraphLaunch_v10000`
/// (311, 312), `cuGraphLaunch` (514, 515). A libcupti that lacks one refuses to enable it; the
/// others are enabled all the same.
pub const LAUNCH_CALLBACKS: [(u32, u32); 16] = [
    (DOMAIN_RUNTIME_API, 211),
    (DOMAIN_RUNTIME_API, 214),
    (DOMAIN_RUNTIME_API, 269),
    (DOMAIN_RUNTIME_API, 270),
    (DOMAIN_RUNTIME_API, 430),
    (DOMAIN_RUNTIME_API, 431),
    (DOMAIN_DRIVER_API, 307),
    (DOMAIN_DRIVER_API, 442),
    (DOMAIN_DRIVER_API, 477),
    (DOMAIN_DRIVER_API, 478),
    (DOMAIN_DRIVER_API, 652),
    (DOMAIN_DRIVER_API, 653),
    (DOMAIN_RUNTIME_API, 311),
    (DOMAIN_RUNTIME_API, 312),
    (DOMAIN_DRIVER_API, 514),
    (DOMAIN_DRIVER_API, 515),
];
/// The copy and memset calls whose API callbacks carry the correlation id of the copy or memset
/// they make, by domain and runs of callback ids (cupti_runtime_cbid.h, cupti_driver_cbid.h; the
/// same in CUDA 12 and 13), so that each copy and memset links to its call as a kernel does. The
/// runtime's: `cudaMemcpy_v3020` to `cudaMemset2DAsync_v3020` (31 to 52: copies between memory,
/// arrays and symbols, then the memsets), the 3D forms (142 to 145), the peer copies (160 to
/// 163), and their per-thread default stream forms (`_ptds`, `_ptsz`: 215 to 220, 223 to 236,
/// 243 to 246, 249 and 250). The driver's: `cuMemsetD8Async` to `cuMemsetD2D32Async` (216 to
/// 226, even), `cuMemsetD8_v2` to `cuMemsetD2D32_v2` (249 to 254), `cuMemcpyHtoD_v2` to
/// `cuMemcpyHtoAAsync_v2` (276 to 293), `cuMemcpy` and `cuMemcpyAsync` (305, 306), the peer copies
/// (318 to 321), their `_ptds` (397 to 416) and `_ptsz` (418 to 433) forms, and the batched
/// copies of CUDA 12.8 on (776 to 779). A libcupti that lacks one refuses to enable it; the others
/// are enabled all the same.
pub const COPY_CALLBACKS: [(u32, core::ops::RangeInclusive<u32>); 20] = [
    (DOMAIN_RUNTIME_API, 31..=52),
    (DOMAIN_RUNTIME_API, 142..=145),
    (DOMAIN_RUNTIME_API, 160..=163),
    (DOMAIN_RUNTIME_API, 215..=220),
    (DOMAIN_RUNTIME_API, 223..=236),
    (DOMAIN_RUNTIME_API, 243..=246),
    (DOMAIN_RUNTIME_API, 249..=250),
    (DOMAIN_DRIVER_API, 216..=216),
    (DOMAIN_DRIVER_API, 218..=218),
    (DOMAIN_DRIVER_API, 220..=220),
    (DOMAIN_DRIVER_API, 222..=222),
    (DOMAIN_DRIVER_API, 224..=224),
    (DOMAIN_DRIVER_API, 226..=226),
    (DOMAIN_DRIVER_API, 249..=254),
    (DOMAIN_DRIVER_API, 276..=293),
    (DOMAIN_DRIVER_API, 305..=306),
    (DOMAIN_DRIVER_API, 318..=321),
    (DOMAIN_DRIVER_API, 397..=416),
    (DOMAIN_DRIVER_API, 418..=433),
    (DOMAIN_DRIVER_API, 776..=779),
];
/// `CUPTI_API_ENTER` and `CUPTI_API_EXIT`.
pub const API_ENTER: c_int = 0;
pub const API_EXIT: c_int = 1;
/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`: flush buffers that are not full too.
pub const FLUSH_FORCED: u32 = 1;

/// The `cuptiGetVersion` values the device timeline is known to work with: CUPTI API 18 to 26
/// (CUDA 12.0 to 12.9) and CUDA 13's numbering (130000 on).
pub const SUPPORTED: [core::ops::RangeInclusive<u32>; 2] = [18..=26, 130_000..=139_999];

/// `CUpti_CallbackData` up to the correlation id.
#[repr(C)]
pub struct CallbackData {
    pub site: c_int,
    pub function_name: *const c_char,
    pub function_params: *const c_void,
    pub return_value: *mut c_void,
    pub symbol_name: *const c_char,
    pub context: *mut c_void,
    pub context_uid: u32,
    pub correlation_data: *mut u64,
    pub correlation_id: u32,
}

/// `CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED`: another subscriber holds CUPTI.
pub const MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: CuptiResult = 39;

/// `CUpti_SubscriberParams` (cupti_callbacks.h, CUDA 13), the parameters of `cuptiSubscribe_v2`.
#[repr(C)]
pub struct SubscriberParams {
    /// Bytes of the struct up to `padding`'s end, as the caller knows it.
    pub struct_size: usize,
    /// The name CUPTI gives this subscriber ("CUPTI for NAME"), shown to tools refused after it.
    pub subscriber_name: *const c_char,
    /// Where CUPTI writes the name of the subscriber that holds it, when it refuses.
    pub old_subscriber_name: *mut c_char,
    pub old_subscriber_size: usize,
    /// 1: several subscribers may hold CUPTI at once (each then needs the per-subscriber `_v2`
    /// activity functions).
    pub allow_multiple_subscribers: u8,
    pub padding: [u8; 7],
}

const _: () = assert!(core::mem::size_of::<SubscriberParams>() == 40);

/// The bytes CUPTI asks for the holder's name (`CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN`).
const OLD_SUBSCRIBER_NAME: usize = 64;

/// Which function subscribed (`DeviceRecord::value` of a `SUBSCRIBED` record).
pub mod subscribed_with {
    pub const SUBSCRIBE: u32 = 1;
    pub const SUBSCRIBE_V2: u32 = 2;
    /// `cuptiSubscribe_v2` allowing other subscribers, with the per-subscriber activity functions.
    pub const SUBSCRIBE_V2_SHARED: u32 = 3;
}

/// What a subscription attempt gave.
pub struct Subscription {
    pub result: CuptiResult,
    pub handle: *mut c_void,
    /// [`subscribed_with`].
    pub with: u32,
    /// The subscriber holding CUPTI, when it refused and `cuptiSubscribe_v2` said who.
    pub holder: Option<String>,
    /// The first subscriber, when CUPTI let this one share it with others and said who.
    pub shared_with: Option<String>,
}

pub type CallbackFn = unsafe extern "C" fn(*mut c_void, u32, u32, *const c_void);
pub type RequestFn = unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
pub type CompleteFn = unsafe extern "C" fn(*mut c_void, u32, *mut u8, usize, usize);
pub type TimestampFn = unsafe extern "C" fn() -> u64;
/// `CUpti_BuffersCallbackRequestFunc_v2`: as [`RequestFn`], and a `CUpti_BufferCallbackRequestInfo`
/// the timeline does not read.
pub type RequestV2Fn = unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize, *mut c_void);
/// `CUpti_BuffersCallbackCompleteFunc_v2`: buffer, size, valid bytes, and a
/// `CUpti_BufferCallbackCompleteInfo` the timeline does not read.
pub type CompleteV2Fn = unsafe extern "C" fn(*mut u8, usize, usize, *mut c_void);

type GetVersion = unsafe extern "C" fn(*mut u32) -> CuptiResult;
type GetResultString = unsafe extern "C" fn(CuptiResult, *mut *const c_char) -> CuptiResult;
type Subscribe = unsafe extern "C" fn(*mut *mut c_void, CallbackFn, *mut c_void) -> CuptiResult;
type SubscribeV2 =
    unsafe extern "C" fn(*mut *mut c_void, CallbackFn, *mut c_void, *mut SubscriberParams) -> CuptiResult;
type Unsubscribe = unsafe extern "C" fn(*mut c_void) -> CuptiResult;
type EnableCallback = unsafe extern "C" fn(u32, *mut c_void, u32, u32) -> CuptiResult;
type ActivityKindFn = unsafe extern "C" fn(u32) -> CuptiResult;
type RegisterCallbacks = unsafe extern "C" fn(RequestFn, CompleteFn) -> CuptiResult;
type RegisterTimestamp = unsafe extern "C" fn(TimestampFn) -> CuptiResult;
type FlushAll = unsafe extern "C" fn(u32) -> CuptiResult;
type NextRecord = unsafe extern "C" fn(*mut u8, usize, *mut *mut u8) -> CuptiResult;
type Dropped = unsafe extern "C" fn(*mut c_void, u32, *mut usize) -> CuptiResult;
type Finalize = unsafe extern "C" fn() -> CuptiResult;
type GetTimestamp = unsafe extern "C" fn(*mut u64) -> CuptiResult;
type ActivityKindV2 = unsafe extern "C" fn(*mut c_void, u32, *mut c_void) -> CuptiResult;
type RegisterCallbacksV2 = unsafe extern "C" fn(*mut c_void, RequestV2Fn, CompleteV2Fn) -> CuptiResult;
type NextRecordV2 = unsafe extern "C" fn(*mut c_void, *mut u8, usize, *mut *mut u8) -> CuptiResult;
type DroppedV2 = unsafe extern "C" fn(*mut c_void, *mut c_void, u32, *mut usize) -> CuptiResult;

/// CUPTI's per-subscriber activity functions (cupti_activity.h, CUDA 13.2 on: multiple subscribers,
/// each with its own kinds, buffers and records). `cuptiActivityFlushAll` has no per-subscriber
/// form: it flushes every subscriber's buffers.
pub struct PerSubscriber {
    /// `cuptiActivityEnable_v2(subscriber, kind, config)`.
    pub enable: ActivityKindV2,
    /// `cuptiActivityDisable_v2(subscriber, kind, config)`.
    pub disable: ActivityKindV2,
    /// `cuptiActivityRegisterCallbacks_v2(subscriber, request, complete)`.
    pub register_callbacks: RegisterCallbacksV2,
    /// `cuptiActivityGetNextRecord_v2(subscriber, buffer, valid, record)`.
    pub next_record: NextRecordV2,
    /// `cuptiActivityGetNumDroppedRecords_v2(subscriber, context, stream, dropped)`.
    pub dropped: DroppedV2,
}

/// The CUPTI functions the timeline calls, bound with `dlsym`.
pub struct Cupti {
    pub path: PathBuf,
    pub get_version: GetVersion,
    pub get_result_string: GetResultString,
    pub subscribe: Subscribe,
    pub unsubscribe: Unsubscribe,
    pub enable_callback: EnableCallback,
    pub activity_enable: ActivityKindFn,
    pub activity_disable: ActivityKindFn,
    pub register_callbacks: RegisterCallbacks,
    pub register_timestamp: RegisterTimestamp,
    pub flush_all: FlushAll,
    pub next_record: NextRecord,
    pub dropped: Dropped,
    pub finalize: Finalize,
    /// `cuptiGetTimestamp`: CUPTI's own clock, before a timestamp callback replaces it.
    pub get_timestamp: Option<GetTimestamp>,
    /// `cuptiSubscribe_v2` (CUDA 13 on): a named subscription that says who holds CUPTI.
    pub subscribe_v2: Option<SubscribeV2>,
    /// The per-subscriber activity functions, when this libcupti has every one of them (and
    /// `cuptiSubscribe_v2`): the timeline then shares CUPTI with other subscribers.
    pub per_subscriber: Option<PerSubscriber>,
}

/// The names CUPTI's library goes by, newest first.
const NAMES: [&str; 3] = ["libcupti.so.13", "libcupti.so.12", "libcupti.so"];

impl Cupti {
    /// Binds the process's libcupti; Err says why there is none to use.
    pub fn find() -> Result<Cupti, String> {
        let (handle, path) = loaded()
            .or_else(beside_runtime)
            .ok_or_else(|| "no libcupti is loaded in the process nor beside its CUDA runtime".to_owned())?;
        // SAFETY: `handle` is a live dlopen handle, each name is NUL-terminated, and each pointer
        // is cast to the function type CUPTI's headers declare for that name.
        unsafe {
            macro_rules! sym {
                ($name:literal, $ty:ty) => {{
                    let f = libc::dlsym(handle, concat!($name, "\0").as_ptr().cast());
                    if f.is_null() {
                        return Err(format!("{} lacks {}", path.display(), $name));
                    }
                    core::mem::transmute::<*mut c_void, $ty>(f)
                }};
            }
            Ok(Cupti {
                get_version: sym!("cuptiGetVersion", GetVersion),
                get_result_string: sym!("cuptiGetResultString", GetResultString),
                subscribe: sym!("cuptiSubscribe", Subscribe),
                unsubscribe: sym!("cuptiUnsubscribe", Unsubscribe),
                enable_callback: sym!("cuptiEnableCallback", EnableCallback),
                activity_enable: sym!("cuptiActivityEnable", ActivityKindFn),
                activity_disable: sym!("cuptiActivityDisable", ActivityKindFn),
                register_callbacks: sym!("cuptiActivityRegisterCallbacks", RegisterCallbacks),
                register_timestamp: sym!("cuptiActivityRegisterTimestampCallback", RegisterTimestamp),
                flush_all: sym!("cuptiActivityFlushAll", FlushAll),
                next_record: sym!("cuptiActivityGetNextRecord", NextRecord),
                dropped: sym!("cuptiActivityGetNumDroppedRecords", Dropped),
                finalize: sym!("cuptiFinalize", Finalize),
                get_timestamp: {
                    let f = libc::dlsym(handle, c"cuptiGetTimestamp".as_ptr());
                    (!f.is_null()).then(|| core::mem::transmute::<*mut c_void, GetTimestamp>(f))
                },
                subscribe_v2: {
                    let f = libc::dlsym(handle, c"cuptiSubscribe_v2".as_ptr());
                    (!f.is_null()).then(|| core::mem::transmute::<*mut c_void, SubscribeV2>(f))
                },
                per_subscriber: per_subscriber(handle),
                path,
            })
        }
    }

    /// Subscribes with `callback`: through `cuptiSubscribe_v2` where this libcupti has it, named
    /// `xtrace` and learning who holds CUPTI when it refuses, else through `cuptiSubscribe`. It
    /// allows other subscribers where this libcupti has the per-subscriber activity functions the
    /// timeline then calls; else it asks to be the only subscriber, as `cuptiSubscribe` is: the
    /// process-wide activity functions are defined for one subscriber.
    pub fn subscribe(&self, callback: CallbackFn) -> Subscription {
        let mut handle: *mut c_void = core::ptr::null_mut();
        let Some(subscribe_v2) = self.subscribe_v2 else {
            // SAFETY: a bound CUPTI function; the callback is `extern "C"` and catches its panics.
            let result = unsafe { (self.subscribe)(&mut handle, callback, core::ptr::null_mut()) };
            return Subscription {
                result,
                handle,
                with: subscribed_with::SUBSCRIBE,
                holder: None,
                shared_with: None,
            };
        };
        let mut holder = [0 as c_char; OLD_SUBSCRIBER_NAME];
        let mut params = SubscriberParams {
            struct_size: core::mem::size_of::<SubscriberParams>(),
            subscriber_name: c"xtrace".as_ptr(),
            old_subscriber_name: holder.as_mut_ptr(),
            old_subscriber_size: holder.len(),
            allow_multiple_subscribers: u8::from(self.per_subscriber.is_some()),
            padding: [0; 7],
        };
        // SAFETY: as above; `params` and the buffer it points to outlive the call, and CUPTI
        // copies the name.
        let result = unsafe { subscribe_v2(&mut handle, callback, core::ptr::null_mut(), &mut params) };
        holder[OLD_SUBSCRIBER_NAME - 1] = 0;
        // SAFETY: NUL-terminated within the buffer (its last byte is).
        let name = unsafe { CStr::from_ptr(holder.as_ptr()) }.to_string_lossy();
        let shared = self.per_subscriber.is_some();
        // Allowing others, CUPTI names the first subscriber even when it succeeds: another tool
        // when there is one, else nobody or this subscription itself.
        let other = !name.is_empty() && name != "CUPTI for xtrace";
        Subscription {
            result,
            handle,
            with: if shared {
                subscribed_with::SUBSCRIBE_V2_SHARED
            } else {
                subscribed_with::SUBSCRIBE_V2
            },
            holder: (result == MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && !name.is_empty())
                .then(|| name.clone().into_owned()),
            shared_with: (result == SUCCESS && shared && other).then(|| name.into_owned()),
        }
    }

    /// CUPTI's name for `result`.
    pub fn result_name(&self, result: CuptiResult) -> String {
        let mut text: *const c_char = core::ptr::null();
        // SAFETY: a bound CUPTI function writing one pointer.
        let ok = unsafe { (self.get_result_string)(result, &mut text) } == SUCCESS;
        if ok && !text.is_null() {
            // SAFETY: CUPTI returns a static NUL-terminated string.
            unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
        } else {
            format!("CUPTI error {result}")
        }
    }
}

/// The per-subscriber activity functions of the libcupti `handle`, when it has them all.
fn per_subscriber(handle: *mut c_void) -> Option<PerSubscriber> {
    // SAFETY: `handle` is a live dlopen handle and each name NUL-terminated; each pointer is cast
    // to the type of the function CUPTI's documentation gives for that name.
    unsafe {
        let sym = |name: &CStr| {
            let f = libc::dlsym(handle, name.as_ptr());
            (!f.is_null()).then_some(f)
        };
        sym(c"cuptiSubscribe_v2")?;
        Some(PerSubscriber {
            enable: core::mem::transmute::<*mut c_void, ActivityKindV2>(sym(c"cuptiActivityEnable_v2")?),
            disable: core::mem::transmute::<*mut c_void, ActivityKindV2>(sym(c"cuptiActivityDisable_v2")?),
            register_callbacks: core::mem::transmute::<*mut c_void, RegisterCallbacksV2>(sym(
                c"cuptiActivityRegisterCallbacks_v2",
            )?),
            next_record: core::mem::transmute::<*mut c_void, NextRecordV2>(sym(
                c"cuptiActivityGetNextRecord_v2",
            )?),
            dropped: core::mem::transmute::<*mut c_void, DroppedV2>(sym(
                c"cuptiActivityGetNumDroppedRecords_v2",
            )?),
        })
    }
}

/// A libcupti the process has loaded already.
fn loaded() -> Option<(*mut c_void, PathBuf)> {
    NAMES.iter().find_map(|name| {
        let c = CString::new(*name).ok()?;
        // SAFETY: RTLD_NOLOAD only looks the name up among loaded objects.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        (!handle.is_null()).then(|| (handle, path_of(handle).unwrap_or_else(|| PathBuf::from(name))))
    })
}

/// The libcupti in the directory of the CUDA runtime the process maps, or in a CUDA wheel's
/// `cuda_cupti/lib` beside the runtime's `cuda_runtime/lib`.
fn beside_runtime() -> Option<(*mut c_void, PathBuf)> {
    let runtime = mapped_runtime()?;
    let dir = runtime.parent()?;
    let wheel = dir.parent()?.parent().map(|nvidia| nvidia.join("cuda_cupti/lib"));
    let dirs = [Some(dir.to_path_buf()), wheel];
    dirs.iter().flatten().find_map(|dir| {
        NAMES.iter().find_map(|name| {
            let path = dir.join(name);
            let c = CString::new(path.to_str()?).ok()?;
            if !path.is_file() {
                return None;
            }
            // SAFETY: loads a library by its path; CUPTI's constructors need nothing of ours.
            let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
            (!handle.is_null()).then_some((handle, path))
        })
    })
}

/// The path of the `libcudart.so*` the process maps, from /proc/self/maps.
fn mapped_runtime() -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let path = line.split_whitespace().nth(5)?;
        let name = path.rsplit('/').next()?;
        name.starts_with("libcudart.so").then(|| PathBuf::from(path))
    })
}

/// The file a dlopen handle was loaded from.
fn path_of(handle: *mut c_void) -> Option<PathBuf> {
    let mut map: *mut libc::c_void = core::ptr::null_mut();
    // SAFETY: RTLD_DI_LINKMAP writes a `struct link_map *` for a live handle.
    if unsafe {
        libc::dlinfo(
            handle,
            libc::RTLD_DI_LINKMAP,
            (&mut map as *mut *mut c_void).cast(),
        )
    } != 0
        || map.is_null()
    {
        return None;
    }
    // SAFETY: `struct link_map` starts with l_addr then l_name, a NUL-terminated path.
    let name = unsafe { *(map as *const *const c_char).add(1) };
    if name.is_null() {
        return None;
    }
    // SAFETY: as above.
    let text = unsafe { CStr::from_ptr(name) }.to_str().ok()?;
    (!text.is_empty()).then(|| PathBuf::from(text))
}

/// The fields of an activity record the timeline reads, at the offsets every kernel record since
/// `CUpti_ActivityKernel4`, every memcpy record since `CUpti_ActivityMemcpy` and every memset
/// record since `CUpti_ActivityMemset` have them; the graph node and graph ids where every kernel
/// record since `CUpti_ActivityKernel6`, memcpy record since `CUpti_ActivityMemcpy5` and memset
/// record since `CUpti_ActivityMemset3` has them (older than CUDA 12.0's, the oldest supported).
pub mod layout {
    pub const KIND: usize = 0;
    pub mod kernel {
        pub const REGISTERS: usize = 6;
        pub const START: usize = 16;
        pub const END: usize = 24;
        pub const DEVICE: usize = 40;
        pub const STREAM: usize = 48;
        pub const GRID: usize = 52;
        pub const BLOCK: usize = 64;
        pub const STATIC_SHARED: usize = 76;
        pub const DYNAMIC_SHARED: usize = 80;
        pub const CORRELATION: usize = 92;
        pub const NAME: usize = 104;
        pub const GRAPH_NODE: usize = 144;
        pub const GRAPH: usize = 156;
    }
    pub mod memcpy {
        pub const COPY_KIND: usize = 4;
        pub const BYTES: usize = 8;
        pub const START: usize = 16;
        pub const END: usize = 24;
        pub const DEVICE: usize = 32;
        pub const STREAM: usize = 40;
        pub const CORRELATION: usize = 44;
        pub const GRAPH_NODE: usize = 64;
        pub const GRAPH: usize = 72;
    }
    pub mod memset {
        pub const VALUE: usize = 4;
        pub const BYTES: usize = 8;
        pub const START: usize = 16;
        pub const END: usize = 24;
        pub const DEVICE: usize = 32;
        pub const STREAM: usize = 40;
        pub const CORRELATION: usize = 44;
        pub const GRAPH_NODE: usize = 64;
        pub const GRAPH: usize = 72;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_copy_callback_is_enabled_once_and_none_is_a_launch() {
        let copies: Vec<(u32, u32)> = COPY_CALLBACKS
            .into_iter()
            .flat_map(|(domain, ids)| ids.map(move |id| (domain, id)))
            .collect();
        let unique: std::collections::BTreeSet<_> = copies.iter().collect();
        assert_eq!((copies.len(), unique.len()), (132, 132));
        let runtime = copies
            .iter()
            .filter(|(domain, _)| *domain == DOMAIN_RUNTIME_API)
            .count();
        assert_eq!(runtime, 56);
        assert!(LAUNCH_CALLBACKS.iter().all(|launch| !unique.contains(launch)));
    }
}
