//! The GPU device timeline's last records, at the stop. The tool library flushes CUPTI's buffers
//! once a period (100 ms), so at any moment up to a period of device records sits in the traced
//! process. Before detaching, the session raises the library's `xtrace:gpu_drain` semaphore
//! (`probes::attach_drain`), with `gpu_records` still attached: each library then switches its
//! records off, flushes, and hands over what it held, ending with a `DRAINED` record. The stop
//! waits for that record from every process that was recording device records and still runs, for
//! [`DRAIN_WAIT`] at most.
use std::time::{Duration, Instant};

use super::{start::Started, Observer, SESSION_LOG};
use crate::probes::attach_drain::attach_drain;

/// How long the stop waits for the last device records: the library's watcher looks once a
/// period (100 ms), then flushes CUPTI's buffers, which waits for the device's records.
pub const DRAIN_WAIT: Duration = Duration::from_secs(1);

impl Started<'_> {
    /// Asks the tool libraries for their last device records and reads them, before the detach.
    pub(super) async fn drain_device_records(&mut self, observer: &mut dyn Observer) {
        // What the ring holds first: a `SUBSCRIBED` record may be in it.
        if self.read_ring().is_err() || waiting(&self.pipeline.gpu_undrained()).is_empty() {
            return;
        }
        let began = Instant::now();
        let pids = self.targets.scope_pids();
        let kernel = &mut self.kernel;
        match attach_drain(&mut kernel.ebpf, &mut kernel.attached, &self.plan, &pids) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) => {
                return observer.warning(&format!(
                    "could not ask for the last GPU device records ({e}): up to the last 100 ms of \
                     the device timeline may be missing"
                ))
            }
        }
        let deadline = began + DRAIN_WAIT;
        loop {
            let left = waiting(&self.pipeline.gpu_undrained());
            if left.is_empty() {
                let ms = began.elapsed().as_secs_f64() * 1e3;
                log::info!(target: SESSION_LOG, "last GPU device records read in {ms:.1} ms");
                return;
            }
            if Instant::now() >= deadline {
                let pids: Vec<String> = left.iter().map(u32::to_string).collect();
                return observer.warning(&format!(
                    "pid {} did not hand over its last GPU device records within {} ms of the stop: \
                     up to the last 100 ms of its device timeline may be missing",
                    pids.join(", pid "),
                    DRAIN_WAIT.as_millis()
                ));
            }
            self.reader.wait().await;
            if self.read_ring().is_err() {
                return;
            }
        }
    }

    /// Hands what the ring buffer holds to the pipeline. An error is logged: reading after the
    /// detach meets it again, and says so.
    fn read_ring(&mut self) -> std::io::Result<usize> {
        let pipeline = &mut self.pipeline;
        self.reader
            .drain(|bytes| pipeline.record(bytes))
            .inspect_err(|e| {
                log::warn!(target: SESSION_LOG, "reading the last GPU device records: {e}");
            })
    }
}

/// Of the processes `undrained`, those still running (an exited one handed its records over at
/// its exit, or never will).
fn waiting(undrained: &[u32]) -> Vec<u32> {
    undrained.iter().copied().filter(|&pid| running(pid)).collect()
}

/// Whether process `pid` exists and is not a zombie.
fn running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name's closing parenthesis.
    stat.rfind(')')
        .and_then(|end| stat[end + 1..].trim_start().chars().next())
        .is_some_and(|state| !matches!(state, 'Z' | 'X'))
}
