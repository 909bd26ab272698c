//! Ring-buffer reader. Kernel programs submit without waking user space until a quarter of the ring
//! is unread, so the reader waits for readiness *or* a short tick, then drains everything.
use std::time::Duration;

use aya::maps::{MapData, RingBuf};
use tokio::io::{unix::AsyncFd, Interest};

use crate::error::{Error, Result};

/// How long records may sit unread when the ring is quiet.
pub const POLL_INTERVAL: Duration = Duration::from_millis(10);

pub struct RingReader {
    ring: AsyncFd<RingBuf<MapData>>,
}

impl RingReader {
    pub fn new(ring: RingBuf<MapData>) -> Result<Self> {
        // SAFETY: the RingBuf owns its map fd and keeps it open, unchanged, for as long as it lives.
        let ring = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
            .map_err(|e| Error::io("watching the ring buffer", std::io::Error::other(e.to_string())))?;
        Ok(RingReader { ring })
    }

    /// Waits until the kernel signals data or `POLL_INTERVAL` passes.
    pub async fn wait(&mut self) {
        if let Ok(Ok(mut guard)) = tokio::time::timeout(POLL_INTERVAL, self.ring.readable_mut()).await {
            guard.clear_ready();
        }
    }

    /// Hands every unread record to `each`; stops early on its first error.
    pub fn drain(&mut self, mut each: impl FnMut(&[u8]) -> std::io::Result<()>) -> std::io::Result<usize> {
        let ring = self.ring.get_mut();
        let mut n = 0;
        while let Some(record) = ring.next() {
            each(&record)?;
            n += 1;
        }
        Ok(n)
    }
}
