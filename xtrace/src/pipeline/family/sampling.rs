//! The CPU sampling family (`-F`): each sample's stack is unwound and counted
//! (`pipeline::samples`), kept with its time for the timeline, or with `--flight` handed to the
//! flight recorder's window with its stack instead (`Sink::sample`), so that memory does not
//! grow with the run. Its stacks are named at the end, or per window, by the in-capture
//! symbolizer (`pipeline::symbolizer`), and folded into its summary.json section
//! (`profile_summary`); the live view takes the stacks of each second from it.
use std::io;

use super::{
    profile_summary::{Folded, ProfileSummary},
    summary::{Ending, SamplingEnding, Sections},
    Family, Shared,
};
use crate::{
    model::text::c_str,
    pipeline::{decode::Event, samples::Samples, symbolizer::Frames},
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

    /// The `profile` section: the counts, and (unless `--flight` keeps the stacks in its windows)
    /// the folded stacks with the hottest functions and stacks.
    fn summarize(&self, ending: &Ending<'_>, sections: &mut Sections) {
        let Some(sampling) = &ending.sampling else {
            return;
        };
        let samples = &self.samples;
        let folded = sampling.frames.map(|frames| self.fold(frames, sampling));
        let (hot_functions, hot_stacks) = match &folded {
            Some(folded) => folded.hot(samples.total),
            None => Default::default(),
        };
        sections.profile = Some(ProfileSummary {
            samples: samples.total,
            sample_frequency_hz: sampling.frequency_hz,
            truncated_stacks: samples.truncated,
            timeline_samples: match folded {
                Some(_) => samples.timeline.len() as u64,
                None => 0,
            },
            followed_processes: sampling.followed.map(|(followed, _)| followed),
            processes_not_followed: sampling.followed.map(|(_, not)| not),
            lost_mapping_records: sampling.images.lost(),
            hot_functions,
            hot_stacks,
            python: sampling.python.entries(),
            python_truncated: sampling.python.truncated,
            sampler_verified_insns: samples.verified_insns,
        });
        sections.folded = folded;
    }
}

impl SamplingFamily {
    /// The stacks named `frames`, folded. A stack's root frame is its process's name when it was
    /// taken (a program an exec replaced keeps its own), else the target's name for its pid.
    fn fold(&self, frames: &Frames<'_>, sampling: &SamplingEnding<'_>) -> Folded {
        let mut folded = Folded::default();
        for (key, frames) in frames {
            let root = sampling
                .images
                .comm(key.image)
                .map(str::to_string)
                .or_else(|| sampling.process_names.get(&key.pid).cloned())
                .unwrap_or_else(|| format!("pid {}", key.pid));
            folded.add(&root, frames, self.samples.stacks[*key]);
        }
        folded
    }
}
