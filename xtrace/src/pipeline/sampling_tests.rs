//! `Pipeline::record` fed CPU sample records, as the ring buffer hands them over, without root or
//! the kernel: the sampling family's counts, its timeline, and the flight recorder's window.
use xtrace_common::event::EventHeader;

use super::{
    flight::Flight,
    record_tests::{bytes_of, pipeline, span, Shared},
};

/// A CPU sample of thread `tid` of this test's process (its stack walked by frame pointers, at
/// user addresses `user`, innermost first) taken at `ts_ns`.
fn sample(tid: u32, ts_ns: u64, user: &[u64]) -> Vec<u8> {
    use xtrace_common::event::{SampleEvent, KIND_SAMPLE, MAX_FRAMES, MAX_RETURN_SLOTS};
    let mut frames = [0; MAX_FRAMES];
    frames[..user.len()].copy_from_slice(user);
    let mut comm = [0; 16];
    comm[..6].copy_from_slice(b"worker");
    bytes_of(&SampleEvent {
        header: EventHeader {
            kind: KIND_SAMPLE,
            cpu: 0,
            pid: std::process::id(),
            tid,
            ts_ns,
        },
        comm,
        kernel_frames: 0,
        user_frames: user.len() as u32,
        kernel: [0; MAX_FRAMES],
        user: frames,
        user_regs: [0; 3],
        stack_len: 0,
        return_slots: 0,
        returns: [[0; 2]; MAX_RETURN_SLOTS],
    })
}

/// Code addresses of this test's process: three functions of its own.
fn own_code() -> [u64; 3] {
    [
        sample as *const () as u64,
        span as *const () as u64,
        bytes_of::<u8> as *const () as u64,
    ]
}

/// The sampling family counts each sample by its stack and keeps it for the timeline, names its
/// thread; with `--flight` the stacks go to the window with their samples, and only the count
/// stays.
#[test]
fn cpu_samples_are_counted_by_stack_or_kept_in_the_flight_window() {
    let own = std::process::id();
    let [a, b, c] = own_code();
    let samples = [
        sample(own + 1, 1_000, &[a, b]),
        sample(own + 1, 2_000, &[a, b]),
        sample(own + 2, 3_000, &[c]),
    ];
    let mut whole = pipeline(Shared::default(), None);
    let mut flight = pipeline(Shared::default(), None);
    flight.keep_in_flight(Flight::new(10_000_000_000, 1 << 20));
    for record in &samples {
        whole.record(record).unwrap();
        flight.record(record).unwrap();
    }
    let (_, collected) = whole.collected();
    let counted = &collected.families.sampling.samples;
    assert_eq!(counted.total, 3);
    let mut stacks: Vec<(u32, Vec<u64>, u64)> = counted
        .stacks
        .iter()
        .map(|(key, n)| (key.pid, key.user.to_vec(), *n))
        .collect();
    stacks.sort();
    let mut expected = vec![(own, vec![a, b], 2), (own, vec![c], 1)];
    expected.sort();
    assert_eq!(stacks, expected);
    let times: Vec<(u64, u32)> = counted.timeline.iter().map(|s| (s.ts_ns, s.tid)).collect();
    assert_eq!(times, [(1_000, own + 1), (2_000, own + 1), (3_000, own + 2)]);
    assert_eq!(collected.names.thread_label(own, own + 1), Some("worker"));

    let taken = flight.take_flight(4_000).expect("the flight recorder");
    let kept: Vec<(u64, u32, Vec<u64>)> = taken
        .slots
        .iter()
        .flat_map(|(_, slot)| slot.samples())
        .map(|s| (s.ts_ns, s.tid, s.stack.user.to_vec()))
        .collect();
    assert_eq!(
        kept,
        [
            (1_000, own + 1, vec![a, b]),
            (2_000, own + 1, vec![a, b]),
            (3_000, own + 2, vec![c])
        ]
    );
    let (_, collected) = flight.collected();
    let counted = &collected.families.sampling.samples;
    assert_eq!(
        (counted.total, counted.stacks.len(), counted.timeline.len()),
        (3, 0, 0)
    );
}

/// The sampling family's summary section: the counts, the stacks folded under their process's
/// name, the hottest functions by self samples and the hottest stacks with their shares; with
/// `--flight` (no names: the windows have the stacks) the counts only.
#[test]
fn the_profile_section_folds_the_named_stacks() {
    use super::family::summary::{Ending, SamplingEnding};
    let own = std::process::id();
    let [a, b, c] = own_code();
    let mut pipeline = pipeline(Shared::default(), None);
    for record in [
        sample(own + 1, 1_000, &[a, b]),
        sample(own + 1, 2_000, &[a, b]),
        sample(own + 2, 3_000, &[c]),
    ] {
        pipeline.record(&record).unwrap();
    }
    let (_, collected) = pipeline.collected();
    let samples = &collected.families.sampling.samples;
    let frames: super::symbolizer::Frames = samples
        .stacks
        .keys()
        .map(|key| match key.user.len() {
            2 => (key, vec!["main".to_string(), "work".to_string()]),
            _ => (key, vec!["main".to_string(), "idle".to_string()]),
        })
        .collect();
    let process_names = [(own, "target".to_string())].into_iter().collect();
    let ending = |frames| Ending {
        sampling: Some(SamplingEnding {
            frequency_hz: 99,
            followed: Some((1, 0)),
            images: &collected.images,
            python: &collected.python,
            frames,
            process_names: &process_names,
        }),
        ..Ending::default()
    };
    let sections = collected.families.summarize(&ending(Some(&frames)));
    // No sample of the process's main thread named it: the target's name is the root.
    let root = "target";
    let lines: Vec<(String, u64)> = sections.folded.expect("folded").lines.into_iter().collect();
    assert_eq!(
        lines,
        [(format!("{root};main;idle"), 1), (format!("{root};main;work"), 2)]
    );
    let profile = sections.profile.expect("the profile section");
    assert_eq!(
        (
            profile.samples,
            profile.sample_frequency_hz,
            profile.timeline_samples
        ),
        (3, 99, 3)
    );
    assert_eq!(
        (profile.followed_processes, profile.processes_not_followed),
        (Some(1), Some(0))
    );
    let functions: Vec<(&str, u64, u64)> = profile
        .hot_functions
        .iter()
        .map(|f| (f.name.as_str(), f.self_samples, f.total))
        .collect();
    assert_eq!(functions, [("work", 2, 2), ("idle", 1, 1), ("main", 0, 3)]);
    let stacks: Vec<(String, u64, f64)> = profile
        .hot_stacks
        .into_iter()
        .map(|s| (s.stack, s.samples, s.percent))
        .collect();
    assert_eq!(
        stacks,
        [
            (format!("{root};main;work"), 2, 66.67),
            (format!("{root};main;idle"), 1, 33.33)
        ]
    );

    let sections = collected.families.summarize(&ending(None));
    assert!(sections.folded.is_none());
    let profile = sections.profile.expect("the profile section");
    assert_eq!((profile.samples, profile.timeline_samples), (3, 0));
    assert!(profile.hot_functions.is_empty() && profile.hot_stacks.is_empty());
}
