//! The CPU profile of one flight recorder window (`--flight` with sampling). When a trigger takes
//! the window, its stacks are named on the recording thread ([`WindowProfile::name`]), through
//! the same resolver and process-image model as the end of a recording (the image model changes
//! with every record, so it is not handed to another thread); the flight directory's thread then
//! writes what that made ([`WindowProfile::write`]): stacks.folded and flamegraph.svg of the
//! window's samples, each sample on the trace's timeline, and the profile fields of its summary.
use std::collections::HashMap;

use crate::pipeline::symbolizer::{timeline_sample, Resolver};
use crate::{
    error::Result,
    pipeline::{
        family::profile_summary::{Folded, ProfileSummary},
        flight::{SampleNaming, Taken},
        samples::StackKey,
        writer::{EventWriter, TimelineSample},
    },
    python::PythonEntry,
};

/// One sample on the window's timeline: its time, thread and stack (an index into `named`).
#[derive(Clone, Copy, Debug)]
struct Timed {
    ts_ns: u64,
    pid: u32,
    tid: u32,
    stack: u32,
}

/// A window's samples, named, ready to be written by another thread.
#[derive(Debug, Default)]
pub struct WindowProfile {
    folded: Folded,
    /// What the timeline shows of each distinct stack.
    named: Vec<TimelineSample>,
    timeline: Vec<Timed>,
    samples: u64,
    truncated: u64,
    python: Vec<PythonEntry>,
    python_truncated: u64,
    lost_mapping_records: u64,
    verified_insns: Option<u32>,
}

impl WindowProfile {
    /// Names the stacks of the samples in `taken` with `resolver` and what `naming` lends, and
    /// takes the samples out of its slots and its stacks (they are freed now: what is left to
    /// write is this profile). A stack's root frame is its process's name when it was taken.
    pub fn name(resolver: &Resolver, taken: &mut Taken, naming: SampleNaming<'_>) -> WindowProfile {
        let SampleNaming {
            images,
            python,
            bpf,
            verified_insns,
        } = naming;
        let keys: Vec<&StackKey> = taken.stacks.iter().map(|k| &**k).collect();
        let frames = resolver.frames_of(&keys, bpf, images, python);
        let mut index: HashMap<&StackKey, u32> = HashMap::with_capacity(frames.len());
        let mut named = Vec::with_capacity(frames.len());
        for (key, frames) in &frames {
            index.insert(*key, named.len() as u32);
            named.push(timeline_sample(key, frames, images));
        }
        let mut counts = vec![0u64; named.len()];
        let mut timeline = Vec::new();
        let mut truncated = 0;
        for (_, slot) in &taken.slots {
            truncated += slot.truncated();
            for sample in slot.samples() {
                let Some(&stack) = index.get(&*sample.stack) else {
                    continue;
                };
                counts[stack as usize] += 1;
                timeline.push(Timed {
                    ts_ns: sample.ts_ns,
                    pid: sample.pid,
                    tid: sample.tid,
                    stack,
                });
            }
        }
        let mut folded = Folded::default();
        for (key, frames) in &frames {
            let root = images
                .comm(key.image)
                .map(str::to_string)
                .or_else(|| taken.names.process_comm(key.pid, None))
                .unwrap_or_else(|| format!("pid {}", key.pid));
            folded.add(&root, frames, counts[index[*key] as usize]);
        }
        let profile = WindowProfile {
            folded,
            named,
            samples: timeline.len() as u64,
            timeline,
            truncated,
            python: python.entries(),
            python_truncated: python.truncated,
            lost_mapping_records: images.lost(),
            verified_insns,
        };
        drop(index);
        drop(frames);
        for (_, slot) in &mut taken.slots {
            slot.drop_samples();
        }
        taken.stacks = Default::default();
        profile
    }

    /// The samples it holds.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// The bytes it holds, about: its folded stacks, its stacks' names and its timeline.
    pub fn bytes(&self) -> usize {
        let named: usize = self
            .named
            .iter()
            .map(|n| {
                let frames: usize = n.frames.iter().map(|f| f.name.len() + f.module.len() + 64).sum();
                n.leaf.len() + n.folded.len() + frames + std::mem::size_of::<TimelineSample>()
            })
            .sum();
        self.folded.bytes() + named + self.timeline.capacity() * std::mem::size_of::<Timed>()
    }

    /// Writes its samples on `trace`'s timeline, on their threads.
    pub fn timeline<W: std::io::Write>(&self, trace: &mut EventWriter<W>) -> std::io::Result<()> {
        for s in &self.timeline {
            trace.sample(s.pid, s.tid, s.ts_ns, &self.named[s.stack as usize])?;
        }
        Ok(())
    }

    /// Writes stacks.folded and flamegraph.svg into `out`; returns the profile fields of the
    /// window's summary.
    pub fn write(self, out: &crate::output::Dir, frequency_hz: u64, icicle: bool) -> Result<ProfileSummary> {
        super::profile::write(out, &self.folded, self.samples, frequency_hz, icicle)?;
        let (hot_functions, hot_stacks) = self.folded.hot(self.samples);
        Ok(ProfileSummary {
            samples: self.samples,
            sample_frequency_hz: frequency_hz,
            truncated_stacks: self.truncated,
            timeline_samples: self.samples,
            followed_processes: None,
            processes_not_followed: None,
            lost_mapping_records: self.lost_mapping_records,
            hot_functions,
            hot_stacks,
            python: self.python,
            python_truncated: self.python_truncated,
            sampler_verified_insns: self.verified_insns,
        })
    }
}
