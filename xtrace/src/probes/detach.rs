//! Closing uprobe links without hanging. Since Linux 6.12 a pending return probe holds an SRCU
//! read lock (`uretprobes_srcu`) until its function returns, or until its thread's expiry timer
//! fires, and every return probe the thread hits pushes that timer ~100 ms further out. Closing a
//! uprobe link removes its probes, then waits for that lock's grace period. A call that stays open
//! (a function that never returns, as `__libc_start_call_main`, or a long one: a training loop)
//! while its thread keeps hitting other return probes therefore blocks the close until the
//! program stops calling them: links closed one after another left xtrace in uninterruptible
//! sleep for as long as the traced program ran. Closed together, every probe is gone at once, the
//! timer fires and the grace period ends about 100 ms later.
use std::{sync::mpsc, time::Duration};

use super::attach::Attached;

/// How long the return probes' removal waits for the entry probes' to finish.
const ENTRIES_FIRST: Duration = Duration::from_millis(250);

/// Closes `attached`'s links: its entry probes and USDT sites first (one thread), so that a call
/// in flight still ends its span, then, once they are closed or after [`ENTRIES_FIRST`], every
/// return-probe link at once, one thread each. Returns when all are closed.
pub(super) fn close(attached: &mut Attached) {
    let (entries, usdt, exits) = attached.take_links();
    if entries.is_empty() && usdt.is_empty() && exits.is_empty() {
        return;
    }
    std::thread::scope(|scope| {
        let (closed, entries_closed) = mpsc::channel();
        let _ = std::thread::Builder::new()
            .name("xtrace-detach".into())
            .spawn_scoped(scope, move || {
                drop(entries);
                drop(usdt);
                let _ = closed.send(());
            })
            .map_err(|e| log::warn!("closing entry probes on this thread: {e}"));
        let _ = entries_closed.recv_timeout(ENTRIES_FIRST);
        for link in exits {
            // A thread that cannot be made closes its link here, as before.
            let _ = std::thread::Builder::new()
                .name("xtrace-detach".into())
                .spawn_scoped(scope, move || drop(link));
        }
    });
}
