//! The device records' clock. CUPTI is given CLOCK_MONOTONIC (`device::monotonic_ns`), the clock
//! of the kernel's `bpf_ktime_get_ns`, but on some CUPTI versions the records of a CUDA context
//! created before the subscription (xtrace attaching to a running process) stay on CUPTI's own
//! clock. So the offset from CUPTI's own clock (`cuptiGetTimestamp`) to CLOCK_MONOTONIC is
//! measured once per CUPTI session, before the timestamp callback is registered, and each buffer's
//! records are checked against what cannot be: a record that ends after its buffer was read, or a
//! kernel, copy or memset that begins before the call that made it. A buffer impossible as it is and
//! possible moved by the offset is moved, and the tracer is told with a `CLOCK` record. One
//! possible either way, with clocks more than [`FAR_NS`] apart, is moved when only moved does its
//! newest record end near when it was read: buffers are flushed every period, so they hold recent
//! records (a buffer whose calls were all made before the attach, which have none to check
//! against, is told so).
use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, AtomicI64, Ordering},
        Mutex, PoisonError,
    },
};

use xtrace_common::gpu::{clock_reason, record_kind, DeviceRecord};

use crate::cupti::{Cupti, SUCCESS};

/// How far a record may seem to end after its buffer was read, or a kernel to begin before its
/// launch call, on one clock (CUPTI converts the GPU's timestamps to the host's).
const SLACK_NS: u64 = 1_000_000;
/// Clocks closer than this are not told apart by how recent the records are.
const FAR_NS: u64 = 1_000_000_000;
/// Launch calls remembered for the check; past it the oldest half is forgotten.
const MAX_LAUNCHES: usize = 1 << 16;

/// CLOCK_MONOTONIC minus CUPTI's own clock, once measured.
static OFFSET: AtomicI64 = AtomicI64::new(0);
static MEASURED: AtomicBool = AtomicBool::new(false);
/// When each launch call (by correlation id) began, CLOCK_MONOTONIC.
static LAUNCHES: Mutex<Option<HashMap<u32, u64>>> = Mutex::new(None);

/// Reads of CUPTI's clock when measuring the offset: the one with the narrowest bracket of host
/// reads is kept, so that a preemption in one does not make the offset wrong by its length.
const READS: usize = 8;

/// Measures the offset from CUPTI's own clock to CLOCK_MONOTONIC, the host clock read on both
/// sides of CUPTI's (the moved records are right to within half that bracket); nothing when this
/// libcupti has no `cuptiGetTimestamp`.
pub fn measure(cupti: &Cupti) {
    let Some(get_timestamp) = cupti.get_timestamp else {
        return;
    };
    let mut best: Option<(u64, i64)> = None;
    for _ in 0..READS {
        let mut own = 0u64;
        let before = crate::device::monotonic_ns();
        // SAFETY: a bound CUPTI function writing one u64.
        let result = unsafe { get_timestamp(&mut own) };
        let after = crate::device::monotonic_ns();
        if result != SUCCESS || own == 0 {
            return;
        }
        let (bracket, host) = (after - before, before + (after - before) / 2);
        if best.is_none_or(|(narrowest, _)| bracket < narrowest) {
            best = Some((bracket, host.wrapping_sub(own) as i64));
        }
    }
    if let Some((_, offset)) = best {
        OFFSET.store(offset, Ordering::Release);
        MEASURED.store(true, Ordering::Release);
    }
}

/// In a forked child: the parent's launches are not the child's. False when their lock was held
/// at the fork (see [`crate::try_lock`]).
pub fn forget_after_fork() -> bool {
    crate::try_lock(&LAUNCHES)
        .map(|mut launches| *launches = None)
        .is_some()
}

/// A new tracing session: no launches are known yet.
pub fn start_session() {
    *LAUNCHES.lock().unwrap_or_else(PoisonError::into_inner) = None;
}

/// Launch call `correlation` began at `start_ns`.
pub fn launched(correlation: u32, start_ns: u64) {
    let mut launches = LAUNCHES.lock().unwrap_or_else(PoisonError::into_inner);
    let launches = launches.get_or_insert_with(HashMap::new);
    if launches.len() >= MAX_LAUNCHES {
        let mut ids: Vec<u32> = launches.keys().copied().collect();
        ids.sort_unstable_by_key(|id| launches[id]);
        for id in &ids[..ids.len() / 2] {
            launches.remove(id);
        }
    }
    launches.insert(correlation, start_ns);
}

/// Checks the records of one buffer, read at `now` (CLOCK_MONOTONIC), and moves them to
/// CLOCK_MONOTONIC when they were on CUPTI's own clock; then returns the `CLOCK` record that says
/// so.
pub fn check(records: &mut [DeviceRecord], now: u64) -> Option<DeviceRecord> {
    if !MEASURED.load(Ordering::Acquire) {
        return None;
    }
    let offset = OFFSET.load(Ordering::Acquire);
    let (as_they_are, moved) = {
        let launches = LAUNCHES.lock().unwrap_or_else(PoisonError::into_inner);
        let launches = launches.as_ref();
        (
            impossible(records, 0, now, launches),
            impossible(records, offset, now, launches),
        )
    };
    let reason = match (as_they_are, moved) {
        (Some(reason), None) => reason,
        (None, None) if offset.unsigned_abs() > FAR_NS && recent_only_moved(records, offset, now) => {
            clock_reason::RECENT
        }
        // Right as they are, or wrong either way: left as they are.
        _ => return None,
    };
    let mut count = 0;
    for record in records.iter_mut().filter(|r| is_device(r)) {
        record.start_ns = record.start_ns.wrapping_add_signed(offset);
        record.end_ns = record.end_ns.wrapping_add_signed(offset);
        count += 1;
    }
    Some(DeviceRecord {
        kind: record_kind::CLOCK,
        bytes: count,
        start_ns: offset as u64,
        value: reason,
        ..DeviceRecord::default()
    })
}

/// Whether the newest of `records` ends nearer to `now` moved by `offset` than as it is.
fn recent_only_moved(records: &[DeviceRecord], offset: i64, now: u64) -> bool {
    let newest = records.iter().filter(|r| is_device(r)).map(|r| r.end_ns).max();
    newest.is_some_and(|end| now.abs_diff(end.wrapping_add_signed(offset)) < now.abs_diff(end))
}

fn is_device(record: &DeviceRecord) -> bool {
    matches!(
        record.kind,
        record_kind::KERNEL | record_kind::MEMCPY | record_kind::MEMSET
    )
}

/// Why `records`, moved by `offset`, cannot be on CLOCK_MONOTONIC (a [`clock_reason`]), if they
/// cannot.
fn impossible(
    records: &[DeviceRecord],
    offset: i64,
    now: u64,
    launches: Option<&HashMap<u32, u64>>,
) -> Option<u32> {
    for record in records.iter().filter(|r| is_device(r)) {
        let (start, end) = (
            record.start_ns.wrapping_add_signed(offset),
            record.end_ns.wrapping_add_signed(offset),
        );
        if end > now.saturating_add(SLACK_NS) {
            return Some(clock_reason::ENDS_IN_THE_FUTURE);
        }
        let launch = launches.and_then(|l| l.get(&record.correlation));
        if launch.is_some_and(|&launch| start.saturating_add(SLACK_NS) < launch) {
            return Some(clock_reason::BEFORE_ITS_LAUNCH);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(correlation: u32, start_ns: u64, end_ns: u64) -> DeviceRecord {
        DeviceRecord {
            kind: record_kind::KERNEL,
            correlation,
            start_ns,
            end_ns,
            ..DeviceRecord::default()
        }
    }

    #[test]
    fn records_ahead_or_behind_are_impossible_and_right_ones_are_not() {
        let launches = HashMap::from([(1, 1_000_000_000)]);
        let now = 5_000_000_000;
        let right = [kernel(1, 1_200_000_000, 1_300_000_000)];
        assert_eq!(impossible(&right, 0, now, Some(&launches)), None);
        let ahead = [kernel(1, 6_000_000_000, 6_100_000_000)];
        assert_eq!(
            impossible(&ahead, 0, now, Some(&launches)),
            Some(clock_reason::ENDS_IN_THE_FUTURE)
        );
        assert_eq!(impossible(&ahead, -4_800_000_000, now, Some(&launches)), None);
        let behind = [kernel(1, 200_000_000, 300_000_000)];
        assert_eq!(
            impossible(&behind, 0, now, Some(&launches)),
            Some(clock_reason::BEFORE_ITS_LAUNCH)
        );
        // Within the slack, or with no launch known: possible.
        let close = [kernel(1, 999_500_000, 1_000_500_000)];
        assert_eq!(impossible(&close, 0, now, Some(&launches)), None);
        assert_eq!(impossible(&behind, 0, now, None), None);
        // A copy before its call, as a kernel.
        let copy = [DeviceRecord {
            kind: record_kind::MEMCPY,
            ..behind[0]
        }];
        assert_eq!(
            impossible(&copy, 0, now, Some(&launches)),
            Some(clock_reason::BEFORE_ITS_LAUNCH)
        );
        // Records 3 s behind, with no call to check: only moved are they recent.
        assert!(recent_only_moved(&behind, 3_000_000_000, now - 1_000_000_000));
        assert!(!recent_only_moved(&right, 3_000_000_000, now - 3_000_000_000));
    }
}
