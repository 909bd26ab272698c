//! Unit tests of [`super::Ranges`]: pairing, ids, and what ends after the stop.
use super::*;

fn s(text: &str) -> RangeArg {
    RangeArg::Str(Some(text.into()))
}

const NVTX: RangeArg = RangeArg::Int(2);
const NONE: RangeArg = RangeArg::Str(None);

fn events(output: Output) -> Vec<SpanOut> {
    match output {
        Output::Events(events) => events,
        other => panic!("expected events, got {other:?}"),
    }
}

#[test]
fn push_pop_nest_per_thread_and_domain() {
    let mut r = Ranges::new(
        Wanted {
            nvtx: true,
            ..Default::default()
        },
        0,
    );
    assert_eq!(
        r.hit(0, RangeOp::Push, &[NVTX, NONE, s("outer")], (1, 1, 10)),
        Output::Nothing
    );
    assert_eq!(
        r.hit(0, RangeOp::Push, &[NVTX, NONE, s("inner")], (1, 1, 20)),
        Output::Nothing
    );
    // Another domain's stack and another thread's stack are separate.
    r.hit(0, RangeOp::Push, &[NVTX, s("io"), s("read")], (1, 1, 25));
    r.hit(0, RangeOp::Push, &[NVTX, NONE, s("other")], (1, 2, 26));
    let inner = events(r.hit(1, RangeOp::Pop, &[NVTX, NONE], (1, 1, 30)));
    assert_eq!(
        (
            inner[0].name.as_deref(),
            inner[0].start_ns,
            inner[0].dur_ns(),
            inner[0].depth()
        ),
        (Some("inner"), 20, 10, 1)
    );
    assert_eq!(inner[0].cat.as_deref(), Some("nvtx"));
    let read = events(r.hit(1, RangeOp::Pop, &[NVTX, s("io")], (1, 1, 35)));
    assert_eq!(
        (read[0].name.as_deref(), read[0].cat.as_deref()),
        (Some("read"), Some("io"))
    );
    let outer = events(r.hit(1, RangeOp::Pop, &[NVTX, NONE], (1, 1, 40)));
    assert_eq!((outer[0].depth(), outer[0].dur_ns()), (0, 30));
    assert_eq!(r.hit(1, RangeOp::Pop, &[NVTX, NONE], (1, 1, 50)), Output::Nothing);
    assert_eq!(r.unpaired, 1);
    assert_eq!(r.still_open(), 1, "thread 2's range");
    let summary = r.summary();
    assert_eq!(summary[0].name, "outer");
    assert_eq!(summary.len(), 3);
}

#[test]
fn a_pop_with_its_start_is_a_range_unless_it_began_before_the_capture() {
    let mut r = Ranges::new(Wanted::ALL, 100);
    let closed = |r: &mut Ranges, name: RangeArg, start: u64, end: u64| {
        let args = [
            RangeArg::Int(1),
            NONE,
            name,
            RangeArg::Int(start),
            RangeArg::Int(1),
        ];
        r.hit(0, RangeOp::Closed, &args, (1, 1, end))
    };
    let step = events(closed(&mut r, s("step"), 150, 200));
    assert_eq!(
        (
            step[0].name.as_deref(),
            step[0].start_ns,
            step[0].dur_ns(),
            step[0].depth(),
            step[0].cat.as_deref()
        ),
        (Some("step"), 150, 50, 1, Some("xtrace"))
    );
    // A push kept in an earlier session, and a pop the library kept no push for.
    assert_eq!(closed(&mut r, s("old"), 90, 210), Output::Nothing);
    assert_eq!(closed(&mut r, NONE, 0, 220), Output::Nothing);
    assert_eq!((r.unpaired, r.still_open()), (2, 0));
    let summary = r.summary();
    assert_eq!(summary.len(), 1);
    assert_eq!(
        (
            summary[0].name.as_str(),
            summary[0].kind,
            summary[0].stats.count,
            summary[0].stats.total_ns
        ),
        ("step", "push", 1, 50)
    );
}

#[test]
fn start_end_crosses_threads_and_marks_count() {
    let mut r = Ranges::new(
        Wanted {
            itt: true,
            ..Default::default()
        },
        0,
    );
    let itt = RangeArg::Int(3);
    r.hit(
        2,
        RangeOp::Start,
        &[RangeArg::Int(3), s("d"), s("load"), RangeArg::Int(7)],
        (5, 5, 100),
    );
    let edges = events(r.hit(
        3,
        RangeOp::End,
        &[RangeArg::Int(3), RangeArg::Int(7)],
        (5, 6, 150),
    ));
    assert_eq!(edges.len(), 2);
    assert_eq!(
        (edges[0].tid, edges[0].start_ns, edges[0].edge().unwrap().begin),
        (5, 100, true)
    );
    assert_eq!(
        (edges[1].tid, edges[1].start_ns, edges[1].edge().unwrap().begin),
        (6, 150, false)
    );
    assert_eq!(edges[0].edge().unwrap().id, edges[1].edge().unwrap().id);
    let mark = events(r.hit(
        4,
        RangeOp::Mark,
        &[RangeArg::Int(3), NONE, s("tick")],
        (5, 5, 160),
    ));
    assert!(mark[0].kind.is_instant());
    assert_eq!(mark[0].cat.as_deref(), Some("itt"));
    // NVTX is not kept in this recording.
    assert_eq!(
        r.hit(4, RangeOp::Mark, &[NVTX, NONE, s("x")], (5, 5, 170)),
        Output::Nothing
    );
    assert_eq!(
        r.hit(
            5,
            RangeOp::ThreadName,
            &[itt, RangeArg::Int(0), s("worker")],
            (5, 6, 180)
        ),
        Output::ThreadName {
            pid: 5,
            tid: 6,
            name: "worker".into()
        }
    );
    let summary = r.summary();
    assert_eq!(summary.len(), 2);
    assert_eq!(r.still_open(), 0);
    assert_eq!((summary[0].kind, summary[0].stats.total_ns), ("start", 50));
    assert_eq!((summary[1].kind, summary[1].stats.count), ("mark", 1));
}

#[test]
fn ranges_without_ids_end_oldest_first() {
    let mut r = Ranges::new(Wanted::ALL, 0);
    let start = |r: &mut Ranges, name: &str, ts| {
        r.hit(
            0,
            RangeOp::Start,
            &[NVTX, NONE, s(name), RangeArg::Int(0)],
            (5, 5, ts),
        )
    };
    let end =
        |r: &mut Ranges, id: u64, ts| events(r.hit(1, RangeOp::End, &[NVTX, RangeArg::Int(id)], (5, 6, ts)));
    start(&mut r, "a", 10);
    start(&mut r, "b", 20);
    let a = end(&mut r, 0, 30);
    assert_eq!(
        (a[0].name.as_deref(), a[0].start_ns, a[1].start_ns),
        (Some("a"), 10, 30)
    );
    // Another tool's id, never seen at a start.
    let b = end(&mut r, 77, 40);
    assert_eq!((b[0].name.as_deref(), b[0].start_ns), (Some("b"), 20));
    assert_ne!(a[0].edge().unwrap().id, b[0].edge().unwrap().id);
    assert_eq!(
        r.hit(1, RangeOp::End, &[NVTX, RangeArg::Int(0)], (5, 6, 50)),
        Output::Nothing
    );
    assert_eq!((r.unpaired, r.still_open()), (1, 0));
}

#[test]
fn after_the_stop_only_ends_of_ranges_begun_before_it_count() {
    let mut r = Ranges::new(
        Wanted {
            nvtx: true,
            xtrace: true,
            ..Default::default()
        },
        100,
    );
    r.hit(0, RangeOp::Push, &[NVTX, NONE, s("p")], (1, 1, 110));
    r.hit(
        0,
        RangeOp::Start,
        &[NVTX, NONE, s("a"), RangeArg::Int(9)],
        (1, 1, 120),
    );
    let stop = 200;
    let pop = |tid| r.ends_open(RangeOp::Pop, &[NVTX, NONE], (1, tid), stop);
    assert!(pop(1), "thread 1's push");
    assert!(!pop(2), "thread 2 pushed nothing");
    let end = |pid, id| r.ends_open(RangeOp::End, &[NVTX, RangeArg::Int(id)], (pid, 3), stop);
    assert!(end(1, 9), "range 9 of pid 1, from any thread");
    assert!(!end(1, 8) && !end(2, 9), "no such range");
    // The tool library's pop carries its start: one from the capture, before the stop.
    let closed = |start| {
        let args = [
            RangeArg::Int(1),
            NONE,
            s("c"),
            RangeArg::Int(start),
            RangeArg::Int(0),
        ];
        r.ends_open(RangeOp::Closed, &args, (1, 1), stop)
    };
    assert!(closed(150) && closed(100) && closed(200));
    assert!(!closed(0) && !closed(99) && !closed(201));
    // Beginnings, marks and unwanted sources never do.
    assert!(!r.ends_open(RangeOp::Push, &[NVTX, NONE, s("q")], (1, 1), stop));
    assert!(!r.ends_open(RangeOp::Mark, &[NVTX, NONE, s("m")], (1, 1), stop));
    let itt = RangeArg::Int(3);
    assert!(!r.ends_open(RangeOp::Pop, &[itt, NONE], (1, 1), stop));
    r.hit(
        0,
        RangeOp::Start,
        &[NVTX, NONE, s("b"), RangeArg::Int(0)],
        (1, 1, 130),
    );
    assert!(
        r.ends_open(RangeOp::End, &[NVTX, RangeArg::Int(0)], (1, 1), stop),
        "the oldest range of id 0"
    );
}

/// NVTX and ITT number their start/end ranges apart, both from 1: an end closes the range of its
/// own source. A start that reuses an id still open (the process started its numbering again, as
/// after an exec) leaves the older range unended: counted as unpaired.
#[test]
fn start_end_ids_are_per_source() {
    let mut r = Ranges::new(Wanted::ALL, 0);
    const ITT: RangeArg = RangeArg::Int(3);
    r.hit(
        0,
        RangeOp::Start,
        &[NVTX, NONE, s("nv"), RangeArg::Int(1)],
        (1, 1, 10),
    );
    r.hit(
        0,
        RangeOp::Start,
        &[ITT, NONE, s("it"), RangeArg::Int(1)],
        (1, 1, 20),
    );
    let nv = events(r.hit(1, RangeOp::End, &[NVTX, RangeArg::Int(1)], (1, 1, 30)));
    assert_eq!((nv[0].name.as_deref(), nv[0].start_ns), (Some("nv"), 10));
    let it = events(r.hit(1, RangeOp::End, &[ITT, RangeArg::Int(1)], (1, 1, 50)));
    assert_eq!((it[0].name.as_deref(), it[0].start_ns), (Some("it"), 20));
    assert_ne!(nv[0].edge().unwrap().id, it[0].edge().unwrap().id);
    assert_eq!((r.unpaired, r.still_open()), (0, 0));
    r.hit(
        0,
        RangeOp::Start,
        &[NVTX, NONE, s("old"), RangeArg::Int(2)],
        (1, 1, 60),
    );
    r.hit(
        0,
        RangeOp::Start,
        &[NVTX, NONE, s("new"), RangeArg::Int(2)],
        (1, 1, 70),
    );
    let new = events(r.hit(1, RangeOp::End, &[NVTX, RangeArg::Int(2)], (1, 1, 80)));
    assert_eq!(new[0].name.as_deref(), Some("new"));
    assert_eq!((r.unpaired, r.still_open()), (1, 0));
}
