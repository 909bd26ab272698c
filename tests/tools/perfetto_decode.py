#!/usr/bin/env python3
"""Decodes an xtrace trace.perfetto-trace (or .gz) with Perfetto's own protobuf definitions (the
PyPI `perfetto` package's perfetto_trace_pb2) and prints what it holds as JSON, for the root
tests (tests/tests/perfetto.rs) to assert exactly.

Checks as it reads, each failure listed under "errors": every packet parses; the first packet of
each sequence clears its incremental state; timestamps are on CLOCK_MONOTONIC or on an
incremental clock a snapshot of the sequence starts at CLOCK_MONOTONIC's value; every track event
and sample says it needs the incremental state; every interned id (event name, category,
annotation name, function name, mapping, frame, call stack) was sent on its sequence before its
use and never sent twice; every event's track (its own or its sequence's default) was described
before it; track uuids are never reused for another kind of track; every slice end closes a
slice; every flow that ends somewhere starts somewhere.

Output: "packets", "tracks" (processes, threads with their names, child tracks by name), "slices"
(count per pid, tid, track, name and nesting depth), "instants", "async" (per async slice: name,
pid, and whether it was closed), "counters" (per track: pid, tid for a thread's, unit, values in time order and their times), "clocks"
(clock ids per snapshot with wall time), "args" (annotation names per event name), "samples"
(CPU samples per call stack, folded outermost first, kernel frames suffixed `_[k]`),
"sample_threads" ([pid, tid, samples]), "sequences", "timestamps" (first and last), "flows" (count
per name of the event a flow starts at and of the one it ends at: a flow id on a slice's end event
is the slice's), "flow_edges" (per flow: where it starts and ends, each [name, pid, tid, track,
ts]), "off_cpu" (the slices on "off-CPU" tracks: [pid, tid, name, begin, end]), "errors".
"""
import gzip
import json
import sys
from collections import Counter, defaultdict

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

TE = pb.TrackEvent


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    trace = pb.Trace()
    trace.ParseFromString(data)
    return trace


class Sequence:
    """The incremental state of one packet sequence: interned tables, clocks, default track."""

    def __init__(self):
        self.tables = defaultdict(dict)
        self.default_clock = None
        self.default_track = None
        self.incremental = {}  # clock id -> last value on CLOCK_MONOTONIC


INTERNED = (("event_names", "name"), ("event_categories", "category"),
            ("debug_annotation_names", "annotation name"), ("function_names", "function name"),
            ("mapping_paths", "mapping path"), ("mappings", "mapping"), ("frames", "frame"),
            ("callstacks", "callstack"))


def intern(seq, d, errors):
    for field, what in INTERNED:
        table = seq.tables[field]
        for e in getattr(d, field):
            if e.iid in table:
                errors.append(f"{what} iid {e.iid} sent twice")
            table[e.iid] = e


def lookup(seq, field, iid, i, errors):
    entry = seq.tables[field].get(iid)
    if entry is None:
        errors.append(f"packet {i}: {field} iid {iid} not interned")
    return entry


def timestamp(p, seq, i, errors):
    """The packet's time on CLOCK_MONOTONIC: its own clock's, or an incremental clock's."""
    clock = p.timestamp_clock_id if p.HasField("timestamp_clock_id") else seq.default_clock
    if clock == pb.BUILTIN_CLOCK_MONOTONIC:
        return p.timestamp
    if clock in seq.incremental:
        seq.incremental[clock] += p.timestamp
        return seq.incremental[clock]
    errors.append(f"packet {i}: timestamp on clock {clock}, which no snapshot of its sequence defines")
    return p.timestamp


def snapshot(p, seq, clocks, errors):
    ids = sorted(c.clock_id for c in p.clock_snapshot.clocks if c.clock_id < 64)
    mono = [c.timestamp for c in p.clock_snapshot.clocks if c.clock_id == pb.BUILTIN_CLOCK_MONOTONIC]
    for c in p.clock_snapshot.clocks:
        if c.clock_id >= 64:
            if not c.is_incremental or not mono or c.timestamp != mono[0]:
                errors.append(f"clock {c.clock_id}: not incremental from CLOCK_MONOTONIC's value")
            seq.incremental[c.clock_id] = c.timestamp
    # Global snapshots (with wall and boot time) are listed; a sequence's own clock base is not.
    if pb.BUILTIN_CLOCK_REALTIME in ids:
        clocks.append(ids)


def stack_of(seq, callstack_iid, i, errors):
    """The frames of a call stack, outermost first, named `function` (`function_[k]` under
    [kernel.kallsyms]), as stacks.folded names them."""
    cs = lookup(seq, "callstacks", callstack_iid, i, errors)
    names = []
    for fid in (cs.frame_ids if cs else []):
        f = lookup(seq, "frames", fid, i, errors)
        if f is None:
            continue
        fn = lookup(seq, "function_names", f.function_name_id, i, errors)
        m = lookup(seq, "mappings", f.mapping_id, i, errors)
        paths = [lookup(seq, "mapping_paths", pid, i, errors) for pid in (m.path_string_ids if m else [])]
        path = "/".join(x.str.decode() for x in paths if x is not None)
        name = fn.str.decode() if fn else "?"
        names.append(name + "_[k]" if path == "[kernel.kallsyms]" else name)
    return ";".join(names)


def main(path):
    trace = read(path)
    errors = []
    sequences = {}
    tracks = {}  # uuid -> dict
    events = []  # (ts, order, uuid, type, name, cat, args, value)
    samples = Counter()
    sample_threads = Counter()
    clocks = []
    for i, p in enumerate(trace.packet):
        sid = p.trusted_packet_sequence_id
        if sid not in sequences:
            if not p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
                errors.append(f"packet {i}: the first of sequence {sid} does not clear the incremental state")
            sequences[sid] = Sequence()
        elif p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            sequences[sid] = Sequence()
        seq = sequences[sid]
        if p.HasField("trace_packet_defaults"):
            d = p.trace_packet_defaults
            seq.default_clock = d.timestamp_clock_id
            if d.track_event_defaults.HasField("track_uuid"):
                seq.default_track = d.track_event_defaults.track_uuid
        if p.HasField("interned_data"):
            intern(seq, p.interned_data, errors)
        kind = p.WhichOneof("data")
        if kind == "clock_snapshot":
            snapshot(p, seq, clocks, errors)
            continue
        ts = timestamp(p, seq, i, errors) if p.HasField("timestamp") else None
        if kind == "track_descriptor":
            describe(p.track_descriptor, tracks, errors)
        elif kind == "perf_sample":
            s = p.perf_sample
            if not p.sequence_flags & pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE:
                errors.append(f"packet {i}: a sample without SEQ_NEEDS_INCREMENTAL_STATE")
            samples[stack_of(seq, s.callstack_iid, i, errors)] += 1
            sample_threads[(s.pid, s.tid)] += 1
        elif kind == "track_event":
            e = p.track_event
            if not p.sequence_flags & pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE:
                errors.append(f"packet {i}: a track event without SEQ_NEEDS_INCREMENTAL_STATE")
            uuid = e.track_uuid if e.HasField("track_uuid") else seq.default_track
            if uuid not in tracks:
                errors.append(f"packet {i}: track {uuid} used before it was described")
            name = None
            if e.HasField("name_iid"):
                entry = lookup(seq, "event_names", e.name_iid, i, errors)
                name = entry.name if entry else None
            cat = [getattr(lookup(seq, "event_categories", c, i, errors), "name", None) for c in e.category_iids]
            args = [getattr(lookup(seq, "debug_annotation_names", a.name_iid, i, errors), "name", None)
                    for a in e.debug_annotations]
            value = e.counter_value if e.HasField("counter_value") else e.double_counter_value
            events.append((ts, i, uuid, e.type, name, cat, args, value,
                           list(e.flow_ids), list(e.terminating_flow_ids)))
        else:
            errors.append(f"packet {i}: unexpected packet {kind}")
    out = summarize(events, tracks, clocks, errors, len(trace.packet))
    out["sequences"] = len(sequences)
    out["samples"] = dict(samples)
    out["sample_threads"] = sorted([k[0], k[1], n] for k, n in sample_threads.items())
    out["timestamps"] = sorted(e[0] for e in events)[:1] + sorted(e[0] for e in events)[-1:]
    print(json.dumps(out, sort_keys=True))


def describe(d, tracks, errors):
    kind = "process" if d.HasField("process") else "thread" if d.HasField("thread") else \
        "counter" if d.HasField("counter") else "child"
    old = tracks.get(d.uuid)
    if old is not None and old["kind"] != kind:
        errors.append(f"track uuid {d.uuid} reused: {old['kind']} then {kind}")
    t = old or {"kind": kind, "uuid": d.uuid}
    if kind == "process":
        t["pid"] = d.process.pid
        if d.process.process_name:
            t["name"] = d.process.process_name
    elif kind == "thread":
        t["pid"], t["tid"] = d.thread.pid, d.thread.tid
        if d.thread.thread_name:
            t["name"] = d.thread.thread_name
    else:
        t["name"] = d.name
        t["parent"] = d.parent_uuid
        if kind == "counter":
            unit = d.counter.unit
            t["unit"] = pb.CounterDescriptor.Unit.Name(unit) if unit else d.counter.unit_name
    tracks[d.uuid] = t


def owner(tracks, uuid):
    """(pid, tid) of a track: a child track's thread's or process's."""
    t = tracks.get(uuid, {})
    while t.get("kind") in ("child", "counter"):
        t = tracks.get(t.get("parent"), {})
    return t.get("pid"), t.get("tid")


def summarize(events, tracks, clocks, errors, packets):
    slices, instants, counters, args = Counter(), Counter(), defaultdict(list), defaultdict(set)
    asyncs = []
    stacks = defaultdict(list)
    flow_starts, flow_ends = {}, {}  # flow id -> [name, pid, tid, track, ts] of its ends
    off_cpu = []
    # Perfetto orders events by time; events of one time keep their order in the file.
    for ts, _, uuid, kind, name, cat, arg, value, starts, ends in sorted(events, key=lambda e: (e[0], e[1])):
        t = tracks.get(uuid, {})
        pid, tid = owner(tracks, uuid)
        where = (pid, tid, t.get("name"))
        if name is not None and arg:
            args[name].update(arg)
        if kind == TE.TYPE_SLICE_END and stacks[uuid]:
            name = stacks[uuid][-1][0]
        for f in starts:
            flow_starts[f] = [name, pid, tid, t.get("name"), ts]
        for f in ends:
            if f not in flow_starts:
                errors.append(f"flow {f:#x} ends at {name} before it starts")
            flow_ends[f] = [name, pid, tid, t.get("name"), ts]
        if kind == TE.TYPE_SLICE_BEGIN:
            stacks[uuid].append((name, len(stacks[uuid]), ts))
        elif kind == TE.TYPE_SLICE_END:
            if not stacks[uuid]:
                errors.append(f"a slice end on track {uuid} with no slice open")
                continue
            begun, depth, begun_ts = stacks[uuid].pop()
            if t.get("name") == "off-CPU":
                off_cpu.append([pid, tid, begun, begun_ts, ts])
            if tid is None:
                asyncs.append({"pid": pid, "track": t.get("name"), "name": begun, "depth": depth})
            else:
                slices[where + (begun, depth)] += 1
        elif kind == TE.TYPE_INSTANT:
            instants[where + (name,)] += 1
        elif kind == TE.TYPE_COUNTER:
            counters[(pid, tid, t.get("name"), t.get("unit"))].append([ts, value])
    open_left = sum(len(s) for s in stacks.values())
    for f in flow_ends.keys() - flow_starts.keys():
        errors.append(f"flow {f:#x} ends at {flow_ends[f][0]} and starts nowhere")
    both = sorted(flow_ends.keys() & flow_starts.keys())
    flows = Counter((flow_starts[f][0], flow_ends[f][0]) for f in both)
    return {
        "flows": [{"from": k[0], "to": k[1], "count": n} for k, n in sorted(flows.items(), key=str)],
        "flow_edges": [{"id": f, "from": flow_starts[f], "to": flow_ends[f]} for f in both],
        "off_cpu": sorted(off_cpu, key=lambda s: s[3]),
        "packets": packets,
        "errors": errors,
        "open_slices": open_left,
        "tracks": {
            "processes": sorted([t["pid"], t.get("name")] for t in tracks.values() if t["kind"] == "process"),
            "threads": sorted([t["pid"], t["tid"], t.get("name")] for t in tracks.values() if t["kind"] == "thread"),
            "children": dict(Counter(t["name"] for t in tracks.values() if t["kind"] == "child")),
            "uuids": len(tracks),
        },
        "slices": [{"pid": k[0], "tid": k[1], "track": k[2], "name": k[3], "depth": k[4], "count": n}
                   for k, n in sorted(slices.items(), key=str)],
        "instants": [{"pid": k[0], "tid": k[1], "track": k[2], "name": k[3], "count": n}
                     for k, n in sorted(instants.items(), key=str)],
        "async": asyncs,
        "counters": [{"pid": k[0], "tid": k[1], "track": k[2], "unit": k[3],
                      "values": [p[1] for p in v], "times": [p[0] for p in v]}
                     for k, v in sorted(counters.items(), key=str)],
        "clocks": clocks,
        "args": {k: sorted(v) for k, v in args.items()},
    }


if __name__ == "__main__":
    main(sys.argv[1])
