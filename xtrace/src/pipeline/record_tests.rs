//! `Pipeline::record` fed records built from xtrace-common's types, as the ring buffer hands them
//! over, without root or the kernel: what is counted, what is written to the trace, and what is
//! left out (other processes, records after the stop, undecodable ones).
use std::{
    collections::{BTreeMap, HashSet},
    io::Write,
    sync::{Arc, Mutex},
};

use xtrace_common::event::{EventHeader, SpanEvent, ThreadEvent, EXIT_RETURN, KIND_SPAN, KIND_THREAD};

use super::{
    family::summary::{Ending, PairSummary},
    flight::Flight,
    offcpu::OffCpu,
    ranges::Ranges,
    samples::Samples,
    usdt::Usdt,
    warnings::Warnings,
    writer::TraceWriter,
    Pipeline, Setup,
};
use crate::{
    cuda::calls::Calls,
    probes::{ranges::Wanted, Capture, ProbeKind},
};

/// A writer whose bytes the test reads back once the trace is closed.
#[derive(Clone, Default)]
pub(super) struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub(super) const TARGET: u32 = 100;

/// The probes of the pipelines below, by id: two functions, a USDT pair's begin and end probes
/// and their span, and a range's push and pop probes.
const PROBES: [(&str, &str); 7] = [
    ("work", "uprobe"),
    ("inner", "uprobe"),
    ("begin", "usdt"),
    ("end", "usdt"),
    ("step", "usdt"),
    ("push", "usdt"),
    ("pop", "usdt"),
];

/// A pipeline of the probes [`PROBES`] (the functions `work`, `inner`, ...) for the processes `targets` (None: every process).
pub(super) fn pipeline(out: Shared, targets: Option<HashSet<u32>>) -> Pipeline<Shared> {
    pipeline_with(out, targets, |_| {})
}

/// [`pipeline`] with its setup changed by `edit` (a family's state).
pub(super) fn pipeline_with(
    out: Shared,
    targets: Option<HashSet<u32>>,
    edit: impl FnOnce(&mut Setup),
) -> Pipeline<Shared> {
    let mut setup = Setup {
        off_cpu: None,
        gpu: None,
        call_sites: None,
        host_spans: None,
        captures: vec![Capture::default(); PROBES.len()],
        usdt: Usdt::new(Vec::new(), BTreeMap::new()),
        cuda: Calls::new(BTreeMap::new()),
        mpi: Default::default(),
        ranges: Ranges::unasked(0),
        images: Default::default(),
        samples: Samples::default(),
        python: Default::default(),
        warnings: Warnings::default(),
        targets,
        min_duration_ns: 0,
        loaders: Vec::new(),
    };
    edit(&mut setup);
    let trace = TraceWriter::spawn(out, &PROBES, crate::output::TraceFormat::Json).unwrap();
    Pipeline::new(setup, trace)
}

/// The bytes of a repr(C) record, as the ring buffer holds it.
pub(super) fn bytes_of<T: Copy>(record: &T) -> Vec<u8> {
    // SAFETY: the records are repr(C) plain data without padding; reading their bytes is sound.
    unsafe { std::slice::from_raw_parts((record as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
        .to_vec()
}

pub(super) fn span(pid: u32, tid: u32, probe_id: u32, start_ns: u64, end_ns: u64, depth: u16) -> Vec<u8> {
    bytes_of(&SpanEvent {
        header: EventHeader {
            kind: KIND_SPAN,
            cpu: 0,
            pid,
            tid,
            ts_ns: end_ns,
        },
        start_ns,
        probe_id,
        depth,
        exit: EXIT_RETURN,
        ret: 0,
    })
}

fn thread(pid: u32, tid: u32, comm: &str) -> Vec<u8> {
    let mut name = [0u8; 16];
    name[..comm.len()].copy_from_slice(comm.as_bytes());
    bytes_of(&ThreadEvent {
        header: EventHeader {
            kind: KIND_THREAD,
            cpu: 0,
            pid,
            tid,
            ts_ns: 0,
        },
        comm: name,
    })
}

/// The events of phase `ph` of a closed trace.
fn events_of(trace: &[u8], ph: &str) -> Vec<serde_json::Value> {
    let json: serde_json::Value = serde_json::from_slice(trace).expect("trace.json is JSON");
    let events = json["traceEvents"].as_array().unwrap();
    events.iter().filter(|e| e["ph"] == ph).cloned().collect()
}

/// The complete events ("ph":"X") of a closed trace: (name, tid, ts µs, dur µs).
fn complete_events(trace: &[u8]) -> Vec<(String, u64, f64, f64)> {
    let json: serde_json::Value = serde_json::from_slice(trace).expect("trace.json is JSON");
    json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["tid"].as_u64().unwrap(),
                e["ts"].as_f64().unwrap(),
                e["dur"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn spans_of_the_targets_are_counted_and_written_others_left_out() {
    let out = Shared::default();
    let mut pipeline = pipeline(out.clone(), Some(HashSet::from([TARGET])));
    let records = [
        thread(TARGET, 101, "worker"),
        span(TARGET, 101, 1, 10_000, 11_000, 1),
        span(TARGET, 101, 0, 9_000, 13_000, 0),
        span(TARGET, 102, 0, 20_000, 22_000, 0),
        // A vfork child sharing the target's address space fires its probes: not a target.
        span(TARGET + 1, 103, 0, 30_000, 31_000, 0),
        // A probe id past the table, and a record cut short: counted as decode errors.
        span(TARGET, 101, 7, 40_000, 41_000, 0),
        vec![1, 2, 3],
    ];
    for record in &records {
        pipeline.record(record).unwrap();
    }
    pipeline.stop_at(50_000);
    // A call that began after the stop (while probes were being detached) is left out.
    pipeline.record(&span(TARGET, 101, 0, 60_000, 61_000, 0)).unwrap();
    assert_eq!(pipeline.events(), 8);

    let (trace, collected) = pipeline.collected();
    let work = collected.stats[0].distribution();
    let inner = collected.stats[1].distribution();
    assert_eq!((work.count, work.total_ns), (2, 6_000));
    assert_eq!((inner.count, inner.total_ns), (1, 1_000));
    assert_eq!(collected.decode_errors, 2);
    assert_eq!(collected.names.thread_label(TARGET, 101), Some("worker"));
    assert_eq!(
        collected.names.threads.keys().copied().collect::<Vec<_>>(),
        [(TARGET, 101), (TARGET, 102)]
    );

    trace.finish().unwrap().finish().unwrap();
    let bytes = out.0.lock().unwrap().clone();
    assert_eq!(
        complete_events(&bytes),
        [
            ("inner".to_string(), 101, 10.0, 1.0),
            ("work".to_string(), 101, 9.0, 4.0),
            ("work".to_string(), 102, 20.0, 2.0),
        ]
    );
}

#[test]
fn without_targets_every_process_is_kept() {
    let mut pipeline = pipeline(Shared::default(), None);
    pipeline
        .record(&span(TARGET + 1, 103, 0, 1_000, 3_000, 0))
        .unwrap();
    let (_, collected) = pipeline.collected();
    assert_eq!(collected.stats[0].distribution().count, 1);
}

#[test]
fn before_the_window_begins_calls_are_left_out() {
    let out = Shared::default();
    let mut pipeline = pipeline(out.clone(), Some(HashSet::from([TARGET])));
    pipeline.start_at(10_000);
    let records = [
        thread(TARGET, 101, "worker"),
        // Began before the window: left out, though it ended in it.
        span(TARGET, 101, 0, 9_000, 12_000, 0),
        // Began as the window began, and after.
        span(TARGET, 101, 1, 10_000, 11_000, 1),
        span(TARGET, 101, 0, 13_000, 15_000, 0),
    ];
    for record in &records {
        pipeline.record(record).unwrap();
    }
    let (trace, collected) = pipeline.collected();
    let (work, inner) = (
        collected.stats[0].distribution(),
        collected.stats[1].distribution(),
    );
    assert_eq!((work.count, work.total_ns), (1, 2_000));
    assert_eq!((inner.count, inner.total_ns), (1, 1_000));
    // The thread's name, sent before the window, is kept.
    assert_eq!(collected.names.thread_label(TARGET, 101), Some("worker"));
    trace.finish().unwrap().finish().unwrap();
    let bytes = out.0.lock().unwrap().clone();
    assert_eq!(
        complete_events(&bytes),
        [
            ("inner".to_string(), 101, 10.0, 1.0),
            ("work".to_string(), 101, 13.0, 2.0),
        ]
    );
}

/// A wait of thread `tid` of 1 ms from 1 ms in clock_nanosleep, woken by thread 101 of the
/// target, then 50 µs runnable.
pub(super) fn off_cpu_wait(tid: u32) -> Vec<u8> {
    use xtrace_common::offcpu::{state, OffCpuEvent, KIND_OFF_CPU};
    // SAFETY: plain integers and arrays, valid all zero.
    let mut event: OffCpuEvent = unsafe { std::mem::zeroed() };
    event.header = EventHeader {
        kind: KIND_OFF_CPU,
        cpu: 0,
        pid: TARGET,
        tid,
        ts_ns: 2_100_000,
    };
    event.sample.header = event.header;
    let interval = &mut event.interval;
    (interval.start_ns, interval.duration_ns, interval.runnable_ns) = (1_000_000, 1_000_000, 50_000);
    (interval.sleeps, interval.state, interval.syscall) = (1, state::SLEEPING, 0);
    (interval.waker_pid, interval.waker_tid, interval.waker_stack) = (TARGET, 101, -1);
    interval.waker_comm[..6].copy_from_slice(b"holder");
    bytes_of(&event)
}

/// With `--flight`, an off-CPU wait's timeline events go to the flight recorder's buffer in the
/// order written: the wake-up on the waker's thread, the wait, its wait for a CPU; no probe
/// counts them, and the summary's off-CPU time has the wait.
#[test]
fn an_off_cpu_wait_goes_to_the_flight_recorder() {
    let mut pipeline = pipeline_with(Shared::default(), None, |s| {
        s.off_cpu = Some(OffCpu::new(1_000_000))
    });
    pipeline.keep_in_flight(Flight::new(10_000_000_000, 1 << 20));
    pipeline.record(&off_cpu_wait(TARGET)).unwrap();
    let mut taken = pipeline.take_flight(3_000_000).expect("the flight recorder");
    let events: Vec<(String, u32, u64, u64)> = taken
        .slots
        .iter()
        .flat_map(|(_, slot)| slot.spans())
        .map(|s| {
            (
                s.name.as_deref().unwrap_or("").to_string(),
                s.tid,
                s.start_ns,
                s.dur_ns(),
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            ("wake".to_string(), 101, 2_000_000, 0),
            ("read".to_string(), TARGET, 1_000_000, 1_000_000),
            ("runnable".to_string(), TARGET, 2_000_000, 50_000),
        ]
    );
    // The window's own count of the wait, with its stack, taken out of the slots.
    let window = pipeline
        .flight_off_cpu(&mut taken, &|_| Vec::new())
        .expect("--off-cpu");
    let stacks: u64 = window.stacks.values().map(|s| s.total).sum();
    assert_eq!(
        (window.sent, window.total_ns(), stacks),
        (1, 1_050_000, 1_050_000)
    );
    assert!(taken.slots.iter().all(|(_, s)| s.waits().is_empty()));
    let (_, collected) = pipeline.collected();
    assert!(collected.stats.iter().all(|s| s.distribution().count == 0));
    let waits = collected.families.off_cpu.waits.as_ref();
    assert_eq!(waits.expect("--off-cpu").total_ns(), 1_050_000);
}

/// In trace.json: the wait and its wait for a CPU as complete events, not counted as spans.
#[test]
fn off_cpu_waits_are_no_spans_of_the_trace() {
    let out = Shared::default();
    let mut pipeline = pipeline_with(out.clone(), None, |s| s.off_cpu = Some(OffCpu::new(1_000_000)));
    pipeline.record(&off_cpu_wait(TARGET)).unwrap();
    let (trace, _) = pipeline.collected();
    let trace = trace.finish().unwrap();
    assert_eq!(trace.spans(), 0);
    trace.finish().unwrap();
    let bytes = out.0.lock().unwrap().clone();
    assert_eq!(
        complete_events(&bytes),
        [
            ("read".to_string(), u64::from(TARGET), 1000.0, 1000.0),
            ("runnable".to_string(), u64::from(TARGET), 2000.0, 50.0),
        ]
    );
}

/// A record of `T` whose fields are all zero but its header's.
fn zeroed_with<T>(header: EventHeader) -> T {
    // SAFETY: the records are repr(C) integers and arrays of them, valid all zero; the header is
    // their first field.
    unsafe {
        let mut record: T = std::mem::zeroed();
        std::ptr::write((&mut record as *mut T).cast::<EventHeader>(), header);
        record
    }
}

fn header(kind: u32, tid: u32, ts_ns: u64) -> EventHeader {
    EventHeader {
        kind,
        cpu: 0,
        pid: TARGET,
        tid,
        ts_ns,
    }
}

/// The CUDA family: probe `inner` is cudaMalloc. Its entry record and its out-pointer's value
/// pair with its span, which says the bytes and the pointer; the process's device memory becomes
/// a counter; the spans of probe `work` stay the functions family's.
#[test]
fn a_cuda_allocation_is_a_span_and_a_memory_counter() {
    use crate::model::cuda_api::FUNCTIONS;
    use xtrace_common::event::{ArgsEvent, OutEvent, KIND_ARGS, KIND_OUT};
    let malloc = *FUNCTIONS.iter().find(|f| f.name == "cudaMalloc").unwrap();
    let out = Shared::default();
    let mut pipeline = pipeline_with(out.clone(), None, |s| {
        s.cuda = Calls::new(BTreeMap::from([(1, malloc)]));
    });
    let mut args: ArgsEvent = zeroed_with(header(KIND_ARGS, 101, 10_000));
    (args.start_ns, args.probe_id, args.args[1]) = (10_000, 1, 4096);
    let mut value: OutEvent = zeroed_with(header(KIND_OUT, 101, 12_000));
    (value.start_ns, value.probe_id, value.value) = (10_000, 1, 0xd000);
    let records = [
        bytes_of(&args),
        bytes_of(&value),
        span(TARGET, 101, 1, 10_000, 12_000, 1),
        span(TARGET, 101, 0, 9_000, 13_000, 0),
    ];
    for record in &records {
        pipeline.record(record).unwrap();
    }
    let (trace, collected) = pipeline.collected();
    assert_eq!(collected.stats[1].distribution().count, 1);
    // The CUDA family's summary section: the allocation, live at the end.
    let sections = collected.families.summarize(&Ending::default());
    assert_eq!(sections.args_unpaired, 0);
    assert!(sections.gpu_device.is_none() && sections.ranges.is_none());
    let cuda = sections.cuda.expect("cudaMalloc is traced");
    let memory: Vec<_> = (cuda.memory.iter())
        .map(|m| (m.pid, m.peak_bytes, m.live_bytes, m.allocations, m.frees))
        .collect();
    assert_eq!(memory, [(TARGET, 4096, 4096, 1, 0)]);
    let live: Vec<_> = (cuda.memory[0].live.iter())
        .map(|a| (a.ptr.as_str(), a.bytes, a.tid, a.function, a.at_ns))
        .collect();
    assert_eq!(live, [("0xd000", 4096, 101, "cudaMalloc", 10_000)]);
    assert!(cuda.pinned_host.is_empty() && cuda.launches.is_empty());
    assert_eq!((cuda.calls_without_args, cuda.sync_calls), (0, 0));
    trace.finish().unwrap().finish().unwrap();
    let bytes = out.0.lock().unwrap().clone();
    assert_eq!(
        complete_events(&bytes),
        [
            ("inner".to_string(), 101, 10.0, 2.0),
            ("work".to_string(), 101, 9.0, 4.0),
        ]
    );
    let spans = events_of(&bytes, "X");
    assert_eq!(spans[0]["args"]["bytes"], 4096);
    assert_eq!(spans[0]["args"]["ptr"], "0xd000");
    let counters = events_of(&bytes, "C");
    assert_eq!(counters.len(), 1);
    assert_eq!(counters[0]["name"], super::CUDA_MEMORY_TRACK);
    assert_eq!(counters[0]["args"]["bytes"], 4096);
}

/// A USDT hit of call site `site` by thread `tid` at `ts_ns`.
fn usdt(site: u32, tid: u32, ts_ns: u64, args: &[u64]) -> Vec<u8> {
    use xtrace_common::event::{UsdtEvent, KIND_USDT};
    let mut event: UsdtEvent = zeroed_with(header(KIND_USDT, tid, ts_ns));
    event.site = site;
    event.nargs = args.len() as u32;
    event.args[..args.len()].copy_from_slice(args);
    bytes_of(&event)
}

/// The USDT family: sites 0 and 1 are the begin and end probes of span `step`, sites 2 and 3 a
/// range's push and pop probes. A begin/end pair becomes a span of `step`, an end with
/// none open on its thread is unpaired, a push/pop pair a range; each hit counts for its probe.
#[test]
fn usdt_pairs_and_ranges_become_spans() {
    use crate::probes::usdt::{
        plan::{Role, UsdtProbe},
        spec::RangeOp,
    };
    let probe = |role| UsdtProbe {
        role,
        types: Vec::new(),
        end_name: None,
    };
    let sites = [2, 3, 5, 6].map(|probe_id| super::usdt::SiteView {
        probe_id,
        signed: Vec::new(),
    });
    let probes = BTreeMap::from([
        (2, probe(Role::Begin { span: 4 })),
        (3, probe(Role::End { span: 4 })),
        (5, probe(Role::Range(RangeOp::Push))),
        (6, probe(Role::Range(RangeOp::Pop))),
    ]);
    let out = Shared::default();
    let mut pipeline = pipeline_with(out.clone(), None, |s| {
        s.usdt = Usdt::new(sites.to_vec(), probes);
        s.ranges = Ranges::new(Wanted::ALL, 0);
    });
    let xtrace = xtrace_common::ranges::SOURCE_XTRACE;
    let records = [
        usdt(0, 101, 10_000, &[]),
        usdt(2, 101, 11_000, &[xtrace, 0, 0]),
        usdt(3, 101, 14_000, &[xtrace, 0]),
        usdt(1, 101, 15_000, &[]),
        usdt(1, 102, 16_000, &[]),
        usdt(0, 103, 17_000, &[]),
        usdt(2, 103, 18_000, &[xtrace, 0, 0]),
    ];
    for record in &records {
        pipeline.record(record).unwrap();
    }
    let (trace, collected) = pipeline.collected();
    let count = |probe: usize| collected.stats[probe].distribution().count;
    assert_eq!([2, 3, 4, 5, 6].map(count), [2, 2, 1, 2, 1]);
    assert_eq!(collected.stats[4].distribution().total_ns, 5_000);
    // The USDT family's summary: the end with no begin and the begin still open, for the pair and
    // in all; the range, and the push still open.
    let sections = collected.families.summarize(&Ending::default());
    assert_eq!(sections.usdt_unpaired, 2);
    let row = |id, kind| collected.families.probe_row(id, kind).pair;
    let pair = PairSummary {
        open: 1,
        unmatched_ends: 1,
    };
    assert_eq!(row(4, ProbeKind::UsdtSpan), Some(pair));
    assert_eq!(row(2, ProbeKind::Usdt), None);
    let (ranges, ranges_unpaired) = sections.ranges.expect("ranges are asked for");
    assert_eq!(ranges_unpaired, 1);
    let ranges: Vec<_> = (ranges.iter())
        .map(|r| (r.name.as_str(), r.kind, r.stats.count, r.stats.total_ns))
        .collect();
    assert_eq!(ranges, [("(unnamed)", "push", 1, 3_000)]);
    assert!(sections.cuda.is_none() && sections.gpu_device.is_none());
    trace.finish().unwrap().finish().unwrap();
    let bytes = out.0.lock().unwrap().clone();
    assert_eq!(
        complete_events(&bytes),
        [
            ("(unnamed)".to_string(), 101, 11.0, 3.0),
            ("step".to_string(), 101, 10.0, 5.0),
        ]
    );
}

/// The functions family: `work` captures an `i32` argument and an `i64` return value, which
/// its argument record and its span pair by thread and entry time; `inner` returns by a tail
/// call, which its span says.
#[test]
fn a_call_s_captured_values_join_its_span() {
    use crate::probes::spec::ArgType;
    use xtrace_common::event::{ArgsEvent, EXIT_TAIL_CALL, KIND_ARGS};
    let out = Shared::default();
    let mut pipeline = pipeline_with(out.clone(), None, |s| {
        s.captures[0] = Capture {
            args: vec![ArgType::I32],
            ret: Some(ArgType::I64),
            go: false,
        };
    });
    let mut args: ArgsEvent = zeroed_with(header(KIND_ARGS, 101, 9_000));
    (args.start_ns, args.probe_id, args.args[0]) = (9_000, 0, (-5i64) as u64);
    let mut work: SpanEvent = zeroed_with(header(KIND_SPAN, 101, 13_000));
    (work.start_ns, work.probe_id, work.ret) = (9_000, 0, 7);
    let mut inner: SpanEvent = zeroed_with(header(KIND_SPAN, 101, 12_000));
    (inner.start_ns, inner.probe_id, inner.depth, inner.exit) = (10_000, 1, 1, EXIT_TAIL_CALL);
    for record in [bytes_of(&args), bytes_of(&inner), bytes_of(&work)] {
        pipeline.record(&record).unwrap();
    }
    let (trace, collected) = pipeline.collected();
    // The functions family's summary: no record dropped, and `work`'s values in its row.
    let sections = collected.families.summarize(&Ending::default());
    assert_eq!((sections.args_unpaired, sections.unreadable_strings), (0, 0));
    let row = collected.families.probe_row(0, ProbeKind::Uprobe);
    assert_eq!(
        serde_json::to_value(&row.values).unwrap(),
        serde_json::json!([
            {"name": "arg0", "type": "i32", "count": 1, "min": -5, "max": -5,
             "top": [{"value": -5, "count": 1}], "other": 0},
            {"name": "ret", "type": "i64", "count": 1, "min": 7, "max": 7,
             "top": [{"value": 7, "count": 1}], "other": 0},
        ])
    );
    assert!(row.pair.is_none());
    assert!(collected
        .families
        .probe_row(1, ProbeKind::Uprobe)
        .values
        .is_empty());
    trace.finish().unwrap().finish().unwrap();
    let bytes = out.0.lock().unwrap().clone();
    let spans = events_of(&bytes, "X");
    assert_eq!(spans.len(), 2);
    assert_eq!(spans[0]["name"], "inner");
    assert_eq!(spans[0]["args"]["exit"], "tail call");
    assert_eq!(spans[1]["name"], "work");
    assert_eq!(
        (&spans[1]["args"]["arg0"], &spans[1]["args"]["ret"]),
        (&(-5).into(), &7.into())
    );
}
