//! The device timeline's life in the process, driven by the watcher thread (`injection.rs`) once
//! per period: activation when the `xtrace:gpu_records` semaphore rises, a flush of CUPTI's
//! buffers and a hand-over of the records each period while it stays up, deactivation when it
//! falls.
//!
//! Activation binds the process's libcupti (`cupti.rs`), checks its version, subscribes
//! (`cuptiSubscribe_v2` where CUDA 13's libcupti has it, else `cuptiSubscribe`; a refusal,
//! as when another profiler holds CUPTI, leaves the timeline off with one notice), gives CUPTI a
//! CLOCK_MONOTONIC timestamp callback (once per CUPTI session: registering it again corrupts the
//! first records), and enables kernel, memcpy and memset records and the launch calls' callbacks.
//! Deactivation disables them, flushes and hands the last records over, ending with a `DRAINED`
//! record (they reach xtrace when it asked for them with the `xtrace:gpu_drain` semaphore, its
//! probes still attached), and then unsubscribes and finalizes from the next API-exit
//! callback, as CUPTI requires; when no CUDA call comes within [`FINALIZE_WAIT`], the process stays
//! subscribed with every kind disabled, and the next activation says so.
//!
//! Where the libcupti has the per-subscriber activity functions (CUDA 13.2 on), the subscription
//! allows other subscribers (torch.profiler, Nsight Systems) and every activity call names
//! xtrace's subscriber, so that each tool gets only its own records. Then no timestamp callback is
//! given (the process-wide one would move the other tool's records to xtrace's clock; the records
//! come on CUPTI's own clock and `clock.rs` moves them), and deactivation unsubscribes at once and
//! never finalizes, which would tear CUPTI down under the other tool.
use core::ffi::c_void;
use std::{
    sync::{
        atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering},
        Mutex, OnceLock,
    },
    time::{Duration, Instant},
};

use xtrace_common::gpu::{record_kind, DeviceRecord};

use crate::{
    cupti::{self, kind, Cupti, SUCCESS},
    records,
};

/// How long deactivation waits for an API-exit callback to finalize CUPTI.
pub const FINALIZE_WAIT: Duration = Duration::from_secs(2);
/// How long the exit handler waits for the watcher's period to end.
const EXIT_WAIT: Duration = Duration::from_millis(500);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Not tracing; no CUPTI session.
    Idle,
    /// Records on.
    Active,
    /// The tracer is attached but the timeline is off (no libcupti, an unsupported one, CUPTI
    /// refused): nothing to do until the semaphore falls.
    Off,
    /// Still subscribed after a deactivation whose finalize no CUDA call came to run.
    Parked,
}

struct State {
    phase: Phase,
    /// The timestamp and buffer callbacks are registered in the current CUPTI session.
    registered: bool,
    exit_handler: bool,
}

static STATE: Mutex<State> = Mutex::new(State {
    phase: Phase::Idle,
    registered: false,
    exit_handler: false,
});
/// The process's libcupti, once found (looked for again at each activation until then: a process
/// may load it after its first trace).
static CUPTI: OnceLock<Cupti> = OnceLock::new();

/// Launch callbacks record correlation ids while this is set.
static LAUNCHES: AtomicBool = AtomicBool::new(false);
/// The next API-exit callback unsubscribes and finalizes.
static FINALIZE_WANTED: AtomicBool = AtomicBool::new(false);
/// Set by the callback that finalized.
static FINALIZED: AtomicBool = AtomicBool::new(false);
/// CUPTI's subscriber handle while subscribed (read by the callback that finalizes, while the
/// watcher holds `STATE`).
static SUBSCRIBER: AtomicUsize = AtomicUsize::new(0);
/// Which function made the current subscription (`cupti::subscribed_with`).
static SUBSCRIBED_WITH: AtomicU32 = AtomicU32::new(0);
/// The current subscription shares CUPTI: the per-subscriber activity functions are called.
static SHARED: AtomicBool = AtomicBool::new(false);
/// Set in a forked child whose `STATE` was held at the fork: nothing may wait for it.
static STATE_LOST: AtomicBool = AtomicBool::new(false);
/// Set in a forked child until the watcher sees the semaphore low: a raised one came with the
/// parent's memory, not from a tracer of the child (whose probes the child does not inherit), and
/// a CUDA process's forked child cannot use CUDA. (A child forked while traced keeps that copy
/// raised, so it never switches CUPTI on.)
static INHERITED: AtomicBool = AtomicBool::new(false);
/// Held while finalizing, so that a new activation cannot interleave with it.
static FINALIZING: Mutex<()> = Mutex::new(());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The bound libcupti, finding it when it is not yet.
fn find_cupti() -> Result<&'static Cupti, String> {
    if let Some(cupti) = CUPTI.get() {
        return Ok(cupti);
    }
    Cupti::find().map(|found| CUPTI.get_or_init(|| found))
}

/// The libcupti bound at activation, once there is one.
pub fn bound() -> Result<&'static Cupti, &'static str> {
    CUPTI.get().ok_or("no libcupti bound")
}

/// The subscriber handle and the per-subscriber functions, while subscribed sharing CUPTI.
pub fn shared() -> Option<(*mut c_void, &'static cupti::PerSubscriber)> {
    let per = bound().ok()?.per_subscriber.as_ref()?;
    let handle = SUBSCRIBER.load(Ordering::Acquire);
    (SHARED.load(Ordering::Acquire) && handle != 0).then_some((handle as *mut c_void, per))
}

/// One period of the watcher: `traced` is whether a tracer wants records (`xtrace:gpu_records`'
/// semaphore raised, `xtrace:gpu_drain`'s not).
pub fn tick(traced: bool) {
    if INHERITED.load(Ordering::Acquire) {
        if traced {
            return;
        }
        INHERITED.store(false, Ordering::Release);
    }
    let mut state = lock(&STATE);
    match (state.phase, traced) {
        (Phase::Idle | Phase::Parked, true) => activate(&mut state),
        (Phase::Active, true) => flush(false),
        (Phase::Active, false) => deactivate(&mut state),
        (Phase::Off, false) => state.phase = Phase::Idle,
        (Phase::Parked, false) if FINALIZED.load(Ordering::Acquire) => finalized(&mut state),
        _ => {}
    }
}

/// In a forked child: CUPTI's session belongs to the parent, and so does a raised semaphore
/// (nothing activates until it fell: [`INHERITED`]). Only the forking thread lives on in
/// the child: a lock that another thread held at the fork (the watcher's `STATE` all through a
/// flush, the records' lock during a launch) stays held there for ever, so none is waited for.
/// Returns whether every one was free and reset; when not, the child gets no watcher (its device
/// timeline stays off) instead of one, or an exit handler, that would wait for ever.
pub fn forget_after_fork() -> bool {
    INHERITED.store(true, Ordering::Release);
    SUBSCRIBER.store(0, Ordering::Release);
    SHARED.store(false, Ordering::Release);
    LAUNCHES.store(false, Ordering::Release);
    FINALIZE_WANTED.store(false, Ordering::Release);
    FINALIZED.store(false, Ordering::Release);
    let Some(mut state) = crate::try_lock(&STATE) else {
        STATE_LOST.store(true, Ordering::Release);
        return false;
    };
    state.phase = Phase::Idle;
    drop(state);
    let records = records::forget_after_fork();
    crate::clock::forget_after_fork() && records
}

fn finalized(state: &mut State) {
    FINALIZED.store(false, Ordering::Release);
    state.phase = Phase::Idle;
    SUBSCRIBER.store(0, Ordering::Release);
    state.registered = false;
}

fn activate(state: &mut State) {
    records::start_session();
    let cupti = match find_cupti() {
        Ok(cupti) => cupti,
        Err(why) => return off(state, &format!("GPU device timeline off: {why}")),
    };
    let mut version = 0;
    // SAFETY: a bound CUPTI function writing one u32.
    let result = unsafe { (cupti.get_version)(&mut version) };
    if result != SUCCESS || !cupti::SUPPORTED.iter().any(|r| r.contains(&version)) {
        return off(
            state,
            &format!(
                "GPU device timeline off: {} has CUPTI API version {version}, outside the supported \
                 18-26 (CUDA 12) and 130000-139999 (CUDA 13)",
                cupti.path.display()
            ),
        );
    }
    let parked = {
        let _finalizing = lock(&FINALIZING);
        FINALIZE_WANTED.store(false, Ordering::Release);
        if FINALIZED.load(Ordering::Acquire) {
            finalized(state);
        }
        state.phase == Phase::Parked
    };
    if parked {
        records::push(subscribed(SUBSCRIBED_WITH.load(Ordering::Acquire)));
        records::notice(
            "CUPTI had stayed subscribed since the last trace (no CUDA call came to finalize it); \
             its records were off meanwhile",
        );
    } else if !subscribe(state, cupti) {
        return;
    }
    enable(cupti, true);
    state.phase = Phase::Active;
    LAUNCHES.store(true, Ordering::Release);
    // The `SUBSCRIBED` record at once: from it, a tracer that stops within the period knows to
    // ask for the records.
    records::deliver();
    if !state.exit_handler {
        // SAFETY: registers a handler with no arguments, which catches its own panics.
        state.exit_handler = unsafe { libc::atexit(at_exit) } == 0;
    }
}

/// Subscribes and registers the callbacks; false (with the timeline off) when CUPTI refuses.
fn subscribe(state: &mut State, cupti: &Cupti) -> bool {
    let subscription = cupti.subscribe(on_api);
    if subscription.result != SUCCESS {
        let holder = subscription
            .holder
            .unwrap_or_else(|| "Nsight Systems, torch.profiler".to_owned());
        off(
            state,
            &format!(
                "GPU device timeline off: CUPTI refused the subscription ({}): another profiler \
                 ({holder}) holds it; host-side tracing goes on",
                cupti.result_name(subscription.result)
            ),
        );
        return false;
    }
    SUBSCRIBED_WITH.store(subscription.with, Ordering::Release);
    records::push(subscribed(subscription.with));
    if let Some(first) = &subscription.shared_with {
        records::notice(&format!("sharing CUPTI with {first}"));
    }
    let handle = subscription.handle;
    SUBSCRIBER.store(handle as usize, Ordering::Release);
    enable_callbacks(cupti, handle as usize);
    if let (cupti::subscribed_with::SUBSCRIBE_V2_SHARED, Some(per)) =
        (subscription.with, &cupti.per_subscriber)
    {
        SHARED.store(true, Ordering::Release);
        crate::clock::measure(cupti);
        // SAFETY: a bound CUPTI function taking the handle CUPTI gave and callbacks that catch
        // their panics.
        unsafe { (per.register_callbacks)(handle, records::request_buffer_v2, records::buffer_complete_v2) };
        return true;
    }
    SHARED.store(false, Ordering::Release);
    if !state.registered {
        // CUPTI's own clock, while it is still its own.
        crate::clock::measure(cupti);
        // SAFETY: as above.
        unsafe {
            (cupti.register_timestamp)(monotonic_ns);
            (cupti.register_callbacks)(records::request_buffer, records::buffer_complete);
        }
        state.registered = true;
    }
    true
}

/// The record that tells the tracer which function subscribed ([`cupti::subscribed_with`]).
fn subscribed(with: u32) -> DeviceRecord {
    DeviceRecord {
        kind: record_kind::SUBSCRIBED,
        value: with,
        ..DeviceRecord::default()
    }
}

/// Enables (or disables) the records. (The launch callbacks stay on while subscribed: the one that
/// finalizes is one of them.)
fn enable(cupti: &Cupti, on: bool) {
    let kinds = [kind::CONCURRENT_KERNEL, kind::MEMCPY, kind::MEMSET];
    // SAFETY: bound CUPTI functions taking plain values (and the subscriber handle CUPTI gave).
    unsafe {
        for k in kinds {
            if let Some((handle, per)) = shared() {
                let f = if on { per.enable } else { per.disable };
                f(handle, k, core::ptr::null_mut());
            } else if on {
                (cupti.activity_enable)(k);
            } else {
                (cupti.activity_disable)(k);
            }
        }
    }
}

fn enable_callbacks(cupti: &Cupti, subscriber: usize) {
    let copies = cupti::COPY_CALLBACKS
        .into_iter()
        .flat_map(|(domain, ids)| ids.map(move |cbid| (domain, cbid)));
    for (domain, cbid) in cupti::LAUNCH_CALLBACKS.into_iter().chain(copies) {
        // SAFETY: a bound CUPTI function taking the subscriber handle CUPTI gave.
        unsafe { (cupti.enable_callback)(1, subscriber as *mut c_void, domain, cbid) };
    }
}

fn off(state: &mut State, why: &str) {
    records::notice(why);
    records::deliver();
    state.phase = Phase::Off;
}

/// Flushes CUPTI's buffers (complete or not) and hands the records over; `last`: ending with a
/// `DRAINED` record (the records are off).
fn flush(last: bool) {
    if let Ok(cupti) = bound() {
        // SAFETY: bound CUPTI functions; the buffer callbacks run inside.
        unsafe {
            (cupti.flush_all)(cupti::FLUSH_FORCED);
            let mut dropped = 0usize;
            let result = match shared() {
                Some((handle, per)) => (per.dropped)(handle, core::ptr::null_mut(), 0, &mut dropped),
                None => (cupti.dropped)(core::ptr::null_mut(), 0, &mut dropped),
            };
            if result == SUCCESS && dropped > 0 {
                records::push(DeviceRecord {
                    kind: record_kind::DROPPED,
                    bytes: dropped as u64,
                    ..DeviceRecord::default()
                });
            }
        }
    }
    if last {
        records::push(DeviceRecord {
            kind: record_kind::DRAINED,
            ..DeviceRecord::default()
        });
    }
    records::deliver();
}

fn deactivate(state: &mut State) {
    LAUNCHES.store(false, Ordering::Release);
    let Ok(cupti) = bound() else {
        state.phase = Phase::Idle;
        return;
    };
    enable(cupti, false);
    // The last records reach the tracer when it is stopping (the `xtrace:gpu_drain` semaphore
    // rose, `xtrace:gpu_records` still raised); when it left without asking, nobody reads them.
    flush(true);
    if let Some((handle, _)) = shared() {
        // Sharing CUPTI: unsubscribing ends this subscription only; finalizing would end the
        // other tool's too.
        SHARED.store(false, Ordering::Release);
        SUBSCRIBER.store(0, Ordering::Release);
        // SAFETY: a bound CUPTI function taking the handle CUPTI gave.
        unsafe { (cupti.unsubscribe)(handle) };
        state.phase = Phase::Idle;
        return;
    }
    FINALIZE_WANTED.store(true, Ordering::Release);
    let deadline = Instant::now() + FINALIZE_WAIT;
    while Instant::now() < deadline && !FINALIZED.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(5));
    }
    if FINALIZED.load(Ordering::Acquire) {
        finalized(state);
    } else {
        state.phase = Phase::Parked;
    }
}

/// CUPTI's API callback (subscribed with the launch, copy and memset calls enabled): notes each
/// call's correlation id, and finalizes when deactivation asked for it.
unsafe extern "C" fn on_api(_user: *mut c_void, _domain: u32, _cbid: u32, data: *const c_void) {
    let _ = std::panic::catch_unwind(|| {
        if data.is_null() {
            return;
        }
        // SAFETY: CUPTI passes a `CUpti_CallbackData` for the API domains enabled.
        let info = unsafe { &*data.cast::<cupti::CallbackData>() };
        if info.site == cupti::API_ENTER && LAUNCHES.load(Ordering::Acquire) {
            records::launch(info.correlation_id, monotonic_ns());
        }
        if info.site == cupti::API_EXIT && FINALIZE_WANTED.load(Ordering::Acquire) {
            finalize_here();
        }
    });
}

/// Unsubscribes and finalizes, from an API-exit callback.
fn finalize_here() {
    let _finalizing = lock(&FINALIZING);
    if !FINALIZE_WANTED.swap(false, Ordering::AcqRel) {
        return;
    }
    let Ok(cupti) = bound() else { return };
    let subscriber = SUBSCRIBER.load(Ordering::Acquire);
    // SAFETY: bound CUPTI functions, called from an API-exit callback as CUPTI requires.
    unsafe {
        (cupti.unsubscribe)(subscriber as *mut c_void);
        (cupti.finalize)();
    }
    FINALIZED.store(true, Ordering::Release);
}

/// At exit, the records still in CUPTI's buffers, when tracing. Waits for the watcher's period
/// to end for [`EXIT_WAIT`] at most, and not at all in a forked child whose `STATE` was held at
/// the fork.
extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let deadline = Instant::now() + EXIT_WAIT;
        while !STATE_LOST.load(Ordering::Acquire) {
            if let Some(state) = crate::try_lock(&STATE) {
                if state.phase == Phase::Active {
                    flush(false);
                }
                return;
            }
            if Instant::now() >= deadline {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    });
}

/// CUPTI's timestamps: CLOCK_MONOTONIC, the clock of the kernel's `bpf_ktime_get_ns`.
pub extern "C" fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}
