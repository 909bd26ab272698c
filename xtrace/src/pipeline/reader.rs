//! Ring-buffer reader. Kernel programs submit without waking user space until a quarter of the ring
//! is unread, and then wake it once until it waits again (the kernel's `WOKEN` flag, which the
//! reader clears before each wait), so the reader waits for readiness *or* a short tick, then
//! drains what is there, for at most `DRAIN_BUDGET` at a time so that producers faster than the
//! reader cannot keep the recording loop from its stop conditions (signals, `-d`).
use std::time::{Duration, Instant};

use aya::maps::{Array, MapData, RingBuf};
use tokio::io::{unix::AsyncFd, Interest};

use crate::error::{Error, Result};

/// How long records may sit unread when the ring is quiet.
pub const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// The longest one [`RingReader::drain`] reads before it returns (checked every
/// `BUDGET_CHECK_EVERY` records).
pub const DRAIN_BUDGET: Duration = Duration::from_millis(5);
const BUDGET_CHECK_EVERY: usize = 1024;

pub struct RingReader {
    ring: AsyncFd<RingBuf<MapData>>,
    /// The kernel's `WOKEN` flag: 1 once a record past the quarter mark has woken the reader.
    woken: Array<MapData, u32>,
    /// The last drain stopped on its budget with records left.
    more: bool,
}

impl RingReader {
    pub fn new(ring: RingBuf<MapData>, woken: Array<MapData, u32>) -> Result<Self> {
        // SAFETY: the RingBuf owns its map fd and keeps it open, unchanged, for as long as it lives.
        let ring = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
            .map_err(|e| Error::io("watching the ring buffer", std::io::Error::other(e.to_string())))?;
        Ok(RingReader {
            ring,
            woken,
            more: false,
        })
    }

    /// Waits until the kernel signals data or `POLL_INTERVAL` passes; returns at once (after
    /// yielding, so that other tasks and `select!` branches run) when the last drain left records.
    pub async fn wait(&mut self) {
        if std::mem::take(&mut self.more) {
            tokio::task::yield_now().await;
            return;
        }
        // The next record past the quarter mark wakes the reader again. Should this fail, the
        // reader still drains every POLL_INTERVAL.
        if let Err(e) = self.woken.set(0, 0, 0) {
            log::debug!("clearing WOKEN: {e}");
        }
        if let Ok(Ok(mut guard)) = tokio::time::timeout(POLL_INTERVAL, self.ring.readable_mut()).await {
            guard.clear_ready();
        }
    }

    /// Hands unread records to `each` for up to `DRAIN_BUDGET` (the next [`RingReader::wait`]
    /// returns at once if records were left); stops early on its first error.
    pub fn drain(&mut self, each: impl FnMut(&[u8]) -> std::io::Result<()>) -> std::io::Result<usize> {
        self.read(Some(Instant::now() + DRAIN_BUDGET), each)
    }

    /// Hands every unread record to `each` (after detaching, when nothing new arrives).
    pub fn drain_all(&mut self, each: impl FnMut(&[u8]) -> std::io::Result<()>) -> std::io::Result<usize> {
        self.read(None, each)
    }

    fn read(
        &mut self,
        until: Option<Instant>,
        mut each: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<usize> {
        let ring = self.ring.get_mut();
        let mut n = 0;
        while let Some(record) = ring.next() {
            each(&record)?;
            n += 1;
            if n % BUDGET_CHECK_EVERY == 0 && until.is_some_and(|until| Instant::now() >= until) {
                self.more = true;
                break;
            }
        }
        Ok(n)
    }
}
