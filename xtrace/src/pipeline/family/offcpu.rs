//! The off-CPU family (`--off-cpu`): each wait the kernel sent on its own is counted with its
//! stack (`pipeline::offcpu`), then written to the timeline (`pipeline::offcpu_timeline`): the
//! wait, its wait for a CPU, and the wake-up's arrow from the thread that woke it; with
//! `--flight`, the wait and its stack go to the flight recorder's buffer too. Waits the
//! kernel added up come at the end, through [`crate::pipeline::Pipeline::off_cpu_totals`]. When the
//! recording is over it names its stacks (`Family::name`, through the in-capture symbolizer the
//! CPU profile shares) and makes its summary.json section from them (`offcpu_summary`); the
//! folded stacks are what `export::offcpu` writes as offcpu.folded and offcpu.svg.
use std::{collections::BTreeMap, io};

use xtrace_common::offcpu::OffCpuEvent;

use super::{
    offcpu_summary::{name, Named},
    summary::{Ending, Sections},
    Family, Naming, Shared,
};
use crate::{
    model::text::c_str,
    pipeline::{
        decode::Event, flight_offcpu::FlightWait, offcpu::OffCpu, offcpu_timeline::timeline,
        threads::thread_names, writer::FlowKind,
    },
};

/// The off-CPU family's state: the waits, with `--off-cpu` (None without it), and once the
/// recording is over their stacks named.
pub struct OffCpuFamily {
    pub waits: Option<OffCpu>,
    named: Option<Named>,
}

impl Family for OffCpuFamily {
    fn owns(&self, event: &Event) -> bool {
        matches!(event, Event::OffCpu(..))
    }

    fn record(&mut self, event: Event, shared: &mut Shared<'_>) -> io::Result<()> {
        match event {
            Event::OffCpu(event, mut stack) => self.wait(&event, &mut stack, shared),
            _ => Ok(()),
        }
    }

    fn name(&mut self, naming: &mut Naming<'_>) {
        let Some(off_cpu) = &self.waits else {
            return;
        };
        let names = thread_names(naming.names, off_cpu.threads.keys().copied());
        let off = (off_cpu, naming.python);
        // The waits the kernel could not count are the session's to say (`summarize`).
        self.named = Some(name(off, naming.resolver, naming.images, &names, 0));
    }

    fn summarize(&self, ending: &Ending<'_>, sections: &mut Sections) {
        if let Some(named) = &self.named {
            let mut summary = named.summary();
            summary.lost = ending.off_cpu_lost;
            sections.off_cpu = Some(summary);
        }
    }
}

impl OffCpuFamily {
    /// The family of `waits` (None without `--off-cpu`).
    pub fn new(waits: Option<OffCpu>) -> Self {
        OffCpuFamily { waits, named: None }
    }

    /// Once named (`Family::name`): nanoseconds per folded stack, for offcpu.folded.
    pub fn folded(&self) -> Option<&BTreeMap<String, u64>> {
        self.named.as_ref().map(|named| &named.folded)
    }

    /// One wait sent on its own: counted with its stack, then written to the timeline.
    fn wait(&mut self, event: &OffCpuEvent, stack: &mut [u8], shared: &mut Shared<'_>) -> io::Result<()> {
        let comm = c_str(&event.sample.comm);
        let (pid, tid) = (event.header.pid, event.header.tid);
        shared.names.named(pid, tid, &comm);
        let Some(off_cpu) = &mut self.waits else {
            return Ok(());
        };
        let interval = &event.interval;
        let counted = off_cpu.wait(
            shared.images,
            shared.python,
            interval,
            &event.sample,
            &comm,
            stack,
        );
        let kept = FlightWait {
            ts_ns: event.header.ts_ns,
            pid,
            tid,
            interval: *interval,
        };
        shared.sink.off_cpu_wait(kept, counted);
        let lock = match interval.lock {
            0 => None,
            address => off_cpu.locks.name(pid, address),
        };
        off_cpu.wake_flows += 1;
        let flow_id = FlowKind::WAKE_BIT | off_cpu.wake_flows;
        // No `--warn-over` rule applies to a wait.
        for span in timeline(interval, (pid, tid), lock.as_deref(), flow_id) {
            shared.keep(span)?;
        }
        Ok(())
    }
}
