//! The CPU sampling family (`-F`): each sample's stack is unwound and counted
//! (`pipeline::samples`), kept with its time for the timeline, or with `--flight` handed to the
//! flight recorder's window with its stack instead (`Sink::sample`), so that memory does not
//! grow with the run. Its stacks are named at the end, or per window, by the in-capture
//! symbolizer (`pipeline::symbolizer`); the live view takes the stacks of each second from it.
use std::io;

use super::{Family, Shared};
use crate::{
    model::text::c_str,
    pipeline::{decode::Event, samples::Samples},
};

/// The sampling family's state: the samples' stacks and counts (none without `-F`).
pub struct SamplingFamily {
    pub samples: Samples,
}

impl Family for SamplingFamily {
    fn owns(&self, event: &Event) -> bool {
        matches!(event, Event::Sample(..))
    }

    fn record(&mut self, event: Event, shared: &mut Shared<'_>) -> io::Result<()> {
        let Event::Sample(event, mut stack) = event else {
            return Ok(());
        };
        let comm = c_str(&event.comm);
        let (pid, tid) = (event.header.pid, event.header.tid);
        if comm == crate::launch::LAUNCHER_THREAD {
            // A launched command's sample in its exec, before the kernel renames it.
            shared.names.saw(pid, tid);
        } else {
            shared.names.named(pid, tid, &comm);
        }
        let samples = &mut self.samples;
        if !samples.windowed {
            samples.add(shared.images, shared.python, &event, &comm, &mut stack);
            return Ok(());
        }
        // With `--flight` (see `Samples::add`): the stack goes to the window with the sample.
        let truncated = samples.truncated;
        let key = samples.add_weighted(shared.images, shared.python, &event, &comm, &mut stack, 1);
        if let Some(key) = key {
            let cut = samples.truncated != truncated;
            shared.sink.sample((event.header.ts_ns, pid, tid), key, cut);
        }
        Ok(())
    }
}
