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
    flight::Flight, offcpu::OffCpu, ranges::Ranges, samples::Samples, usdt::Usdt, warnings::Warnings,
    writer::TraceWriter, Pipeline, Setup,
};
use crate::{
    cuda::calls::Calls,
    probes::{ranges::Wanted, Capture},
};

/// A writer whose bytes the test reads back once the trace is closed.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

const TARGET: u32 = 100;

/// A pipeline of two probes (`work`, `inner`) for the processes `targets` (None: every process).
fn pipeline(out: Shared, targets: Option<HashSet<u32>>) -> Pipeline<Shared> {
    pipeline_with(out, targets, None)
}

/// [`pipeline`] with `--off-cpu`'s state.
fn pipeline_with(out: Shared, targets: Option<HashSet<u32>>, off_cpu: Option<OffCpu>) -> Pipeline<Shared> {
    let setup = Setup {
        off_cpu,
        gpu: None,
        call_sites: None,
        captures: vec![Capture::default(), Capture::default()],
        usdt: Usdt::new(Vec::new(), BTreeMap::new()),
        cuda: Calls::new(BTreeMap::new()),
        ranges: Ranges::new(Wanted::default(), 0),
        images: Default::default(),
        samples: Samples::default(),
        python: Default::default(),
        warnings: Warnings::default(),
        targets,
        min_duration_ns: 0,
        loaders: Vec::new(),
    };
    let trace = TraceWriter::spawn(
        out,
        &[("work", "uprobe"), ("inner", "uprobe")],
        crate::output::TraceFormat::Json,
    )
    .unwrap();
    Pipeline::new(setup, trace)
}

/// The bytes of a repr(C) record, as the ring buffer holds it.
fn bytes_of<T: Copy>(record: &T) -> Vec<u8> {
    // SAFETY: the records are repr(C) plain data without padding; reading their bytes is sound.
    unsafe { std::slice::from_raw_parts((record as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
        .to_vec()
}

fn span(pid: u32, tid: u32, probe_id: u32, start_ns: u64, end_ns: u64, depth: u16) -> Vec<u8> {
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
fn off_cpu_wait(tid: u32) -> Vec<u8> {
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
    let mut pipeline = pipeline_with(Shared::default(), None, Some(OffCpu::new(1_000_000)));
    pipeline.keep_in_flight(Flight::new(10_000_000_000, 1 << 20));
    pipeline.record(&off_cpu_wait(TARGET)).unwrap();
    let taken = pipeline.take_flight(3_000_000).expect("the flight recorder");
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
    let (_, collected) = pipeline.collected();
    assert!(collected.stats.iter().all(|s| s.distribution().count == 0));
    assert_eq!(collected.off_cpu.expect("--off-cpu").total_ns(), 1_050_000);
}

/// In trace.json: the wait and its wait for a CPU as complete events, not counted as spans.
#[test]
fn off_cpu_waits_are_no_spans_of_the_trace() {
    let out = Shared::default();
    let mut pipeline = pipeline_with(out.clone(), None, Some(OffCpu::new(1_000_000)));
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
