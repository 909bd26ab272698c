//! The off-CPU family's end of a recording without root or the kernel: its waits named through
//! `Family::name` and its summary.json section from `Family::summarize`.
use super::{
    family::{
        summary::{Ending, Sections},
        Naming,
    },
    offcpu::OffCpu,
    record_tests::{off_cpu_wait, pipeline_with, Shared, TARGET},
    symbolizer::Resolver,
};

/// The section has the wait by thread, state and kind, its waker, and its stack folded under the
/// process's name with the wait as the leaf; the loss is the session's count.
#[test]
fn the_off_cpu_section_names_the_waits_stacks() {
    let mut pipeline = pipeline_with(Shared::default(), None, |s| {
        s.off_cpu = Some(OffCpu::new(1_000_000))
    });
    let mut wait = off_cpu_wait(TARGET);
    // The wait's thread is its process's main thread, named `sleeper` (the sample's comm).
    let comm_at = std::mem::offset_of!(xtrace_common::offcpu::OffCpuEvent, sample)
        + std::mem::offset_of!(xtrace_common::event::SampleEvent, comm);
    wait[comm_at..comm_at + 7].copy_from_slice(b"sleeper");
    pipeline.record(&wait).unwrap();
    let (_, mut collected) = pipeline.collected();
    let resolver = Resolver::default();
    collected.families.name(&mut Naming {
        images: &mut collected.images,
        python: &collected.python,
        resolver: &resolver,
        names: &collected.names,
    });
    let folded: Vec<(String, u64)> = collected
        .families
        .off_cpu
        .folded()
        .expect("named")
        .iter()
        .map(|(line, &ns)| (line.clone(), ns))
        .collect();
    let sections: Sections = collected.families.summarize(&Ending {
        off_cpu_lost: 3,
        ..Ending::default()
    });
    let section = sections.off_cpu.expect("the off_cpu section");
    assert_eq!(
        folded,
        [
            ("sleeper;[read]".to_string(), 1_000_000),
            ("sleeper;[runnable]".to_string(), 50_000)
        ]
    );
    assert_eq!(
        (
            section.min_ns,
            section.intervals,
            section.off_cpu_ns,
            section.sent,
            section.lost
        ),
        (1_000_000, 2, 1_050_000, 1, 3)
    );
    let thread = &section.threads[..];
    assert_eq!(thread.len(), 1);
    let t = &thread[0];
    assert_eq!(
        (
            t.pid,
            t.tid,
            t.comm.as_str(),
            t.runnable_ns,
            t.sleeping_ns,
            t.uninterruptible_ns
        ),
        (TARGET, TARGET, "sleeper", 50_000, 1_000_000, 0)
    );
    let waits: Vec<(&str, u64, u64)> = t
        .waits
        .iter()
        .map(|w| (w.wait.as_str(), w.intervals, w.ns))
        .collect();
    assert_eq!(waits, [("read", 1, 1_000_000), ("runnable", 1, 50_000)]);
    let woken: Vec<(u32, u32, &str, u64)> = t
        .woken_by
        .iter()
        .map(|w| (w.pid, w.tid, w.comm.as_str(), w.wakeups))
        .collect();
    assert_eq!(woken, [(TARGET, 101, "holder", 1)]);
    let hot: Vec<(&str, u64, f64)> = section
        .hot_stacks
        .iter()
        .map(|h| (h.stack.as_str(), h.ns, h.percent))
        .collect();
    assert_eq!(
        hot,
        [
            ("sleeper;[read]", 1_000_000, 95.24),
            ("sleeper;[runnable]", 50_000, 4.76)
        ]
    );
    assert!(section.locks.is_empty());
}
