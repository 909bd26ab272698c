//! The summary's text lines of the contended locks (`off_cpu.locks`, made by
//! `pipeline::family::locks_summary`).
use crate::pipeline::family::locks_summary::LockSummary;

/// The summary's text lines: the three most contended locks and who released their waits of at
/// least MIN most, with how many.
pub fn table(locks: &[LockSummary]) -> String {
    let ms = |ns: u64| format!("{:.1} ms", ns as f64 / 1e6);
    let mut out = String::new();
    for lock in locks.iter().take(3) {
        let named = match (&lock.name, &lock.symbol) {
            (Some(name), Some(symbol)) if name != symbol => format!("`{name}` (`{symbol}`)"),
            (Some(name), _) => format!("`{name}`"),
            (None, _) => format!("at {}", lock.address),
        };
        let place = lock
            .place
            .as_deref()
            .map(|p| format!(" in {p}"))
            .unwrap_or_default();
        let held = match lock.holders.first() {
            // How often: a lock whose waits mostly end at their timeouts has few wake-ups to go by.
            Some(h) => format!(
                "; released most by {} {}/{} ({}x)",
                h.comm, h.pid, h.tid, h.wakeups
            ),
            None => String::new(),
        };
        out += &format!(
            "  lock {named}{place} (pid {}): {} in {} waits of {} threads{held}\n",
            lock.pid,
            ms(lock.wait_ns),
            lock.waits,
            lock.waiters
        );
    }
    out
}
