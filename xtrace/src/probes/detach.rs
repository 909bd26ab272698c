//! Closing uprobe links without hanging. Since Linux 6.12 a pending return probe holds an SRCU
//! read lock (`uretprobes_srcu`) until its function returns, or until its thread's expiry timer
//! fires, and every return probe the thread hits pushes that timer ~100 ms further out. Closing a
//! uprobe link removes its probes, then waits for that lock's grace period. A call that stays open
//! (a function that never returns, as `__libc_start_call_main`, or a long one: a training loop)
//! while its thread keeps hitting other return probes therefore blocks the close until the
//! program stops calling them: links closed one after another left xtrace in uninterruptible
//! sleep for as long as the traced program ran. Closed together, every probe is gone at once, the
//! timer fires and the grace period ends about 100 ms later.
use std::{
    sync::mpsc,
    time::{Duration, Instant},
};

use super::attach::Attached;

/// How long the return probes' removal waits for the entry probes' to finish.
const ENTRIES_FIRST: Duration = Duration::from_millis(250);

/// Threads that close links at once, at most, per kind (entry and USDT links, return links).
const CLOSERS: usize = 64;

/// Closes `attached`'s links: its entry probes and USDT sites first, all at once, so that a call
/// in flight still ends its span, then, once they are closed or after [`ENTRIES_FIRST`], every
/// return-probe link at once. Returns when all are closed. (Entry links closed one after another
/// left the later ones firing for up to [`ENTRIES_FIRST`] with no return probes left: each of
/// those calls ended another's as unmatched.)
pub(super) fn close(attached: &mut Attached) {
    let (entries, exits) = attached.take_links();
    if entries.is_empty() && exits.is_empty() {
        return;
    }
    std::thread::scope(|scope| {
        let (closed, entries_closed) = mpsc::channel();
        let closing = close_all(scope, entries, &closed);
        drop(closed);
        let deadline = Instant::now() + ENTRIES_FIRST;
        for _ in 0..closing {
            let left = deadline.saturating_duration_since(Instant::now());
            if entries_closed.recv_timeout(left).is_err() {
                break;
            }
        }
        let (done, _) = mpsc::channel();
        close_all(scope, exits, &done);
    });
}

/// Closes `links` on up to [`CLOSERS`] threads of `scope`, each sending on `closed` when its
/// share is closed; returns how many will send. A thread that cannot be made closes its share
/// here.
fn close_all<'scope, T: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    links: Vec<T>,
    closed: &mpsc::Sender<()>,
) -> usize {
    if links.is_empty() {
        return 0;
    }
    let share = links.len().div_ceil(CLOSERS);
    let mut links = links.into_iter().peekable();
    let mut shares = 0;
    while links.peek().is_some() {
        let mine: Vec<T> = links.by_ref().take(share).collect();
        let closed = closed.clone();
        shares += 1;
        let spawned = std::thread::Builder::new()
            .name("xtrace-detach".into())
            .spawn_scoped(scope, move || {
                drop(mine);
                let _ = closed.send(());
            });
        if let Err(e) = spawned {
            log::warn!("closing probes on this thread: {e}");
        }
    }
    shares
}
