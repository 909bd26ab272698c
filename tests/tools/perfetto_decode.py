#!/usr/bin/env python3
"""Decodes an xtrace trace.perfetto-trace (or .gz) with Perfetto's own protobuf definitions (the
PyPI `perfetto` package's perfetto_trace_pb2) and prints what it holds as JSON, for the root
tests (tests/tests/perfetto.rs) to assert exactly.

Checks as it reads, each failure listed under "errors": every packet parses; all are on one
sequence whose first packet clears the incremental state and sets the default clock, and every
track event says it needs that state; every interned id (event name, category, annotation name)
was sent before its use and never sent twice; every event's track was described before it;
track uuids are never reused for another kind of track; every slice end closes a slice.

Output: "packets", "tracks" (processes, threads with their names, child tracks by name), "slices"
(count per pid, tid, track, name and nesting depth), "instants", "async" (per async slice: name,
pid, and whether it was closed), "counters" (per track: unit, values in time order), "clocks"
(clock ids per snapshot), "args" (annotation names per event name), "errors".
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


def main(path):
    trace = read(path)
    errors = []
    names, cats, arg_names = {}, {}, {}
    tracks = {}  # uuid -> dict
    events = []  # (ts, order, uuid, type, name, cat, args)
    clocks = []
    seq = None
    for i, p in enumerate(trace.packet):
        if seq is None:
            seq = p.trusted_packet_sequence_id
            if not p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
                errors.append("first packet does not clear the incremental state")
            if p.trace_packet_defaults.timestamp_clock_id != pb.BUILTIN_CLOCK_MONOTONIC:
                errors.append("first packet does not set CLOCK_MONOTONIC as the default clock")
        elif p.trusted_packet_sequence_id != seq:
            errors.append(f"packet {i} on sequence {p.trusted_packet_sequence_id}, not {seq}")
        if p.HasField("interned_data"):
            d = p.interned_data
            for table, entries, what in ((names, d.event_names, "name"), (cats, d.event_categories, "category"),
                                         (arg_names, d.debug_annotation_names, "annotation name")):
                for e in entries:
                    if e.iid in table:
                        errors.append(f"{what} iid {e.iid} sent twice")
                    table[e.iid] = e.name
        kind = p.WhichOneof("data")
        if kind == "clock_snapshot":
            clocks.append(sorted(c.clock_id for c in p.clock_snapshot.clocks))
        elif kind == "track_descriptor":
            describe(p.track_descriptor, tracks, errors)
        elif kind == "track_event":
            e = p.track_event
            if not p.sequence_flags & pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE:
                errors.append(f"packet {i}: a track event without SEQ_NEEDS_INCREMENTAL_STATE")
            if e.track_uuid not in tracks:
                errors.append(f"packet {i}: track {e.track_uuid} used before it was described")
            name = None
            if e.HasField("name_iid"):
                name = names.get(e.name_iid)
                if name is None:
                    errors.append(f"packet {i}: name iid {e.name_iid} not interned")
            cat = []
            for c in e.category_iids:
                if c not in cats:
                    errors.append(f"packet {i}: category iid {c} not interned")
                cat.append(cats.get(c))
            args = []
            for a in e.debug_annotations:
                if a.name_iid not in arg_names:
                    errors.append(f"packet {i}: annotation name iid {a.name_iid} not interned")
                args.append(arg_names.get(a.name_iid))
            value = e.counter_value if e.HasField("counter_value") else e.double_counter_value
            events.append((p.timestamp, i, e.track_uuid, e.type, name, cat, args, value))
        else:
            errors.append(f"packet {i}: unexpected packet {kind}")
    print(json.dumps(summarize(events, tracks, clocks, errors, len(trace.packet)), sort_keys=True))


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
    # Perfetto orders events by time; events of one time keep their order in the file.
    for ts, _, uuid, kind, name, cat, arg, value in sorted(events, key=lambda e: (e[0], e[1])):
        t = tracks.get(uuid, {})
        pid, tid = owner(tracks, uuid)
        where = (pid, tid, t.get("name"))
        if name is not None and arg:
            args[name].update(arg)
        if kind == TE.TYPE_SLICE_BEGIN:
            stacks[uuid].append((name, len(stacks[uuid])))
        elif kind == TE.TYPE_SLICE_END:
            if not stacks[uuid]:
                errors.append(f"a slice end on track {uuid} with no slice open")
                continue
            begun, depth = stacks[uuid].pop()
            if tid is None:
                asyncs.append({"pid": pid, "track": t.get("name"), "name": begun, "depth": depth})
            else:
                slices[where + (begun, depth)] += 1
        elif kind == TE.TYPE_INSTANT:
            instants[where + (name,)] += 1
        elif kind == TE.TYPE_COUNTER:
            counters[(pid, t.get("name"), t.get("unit"))].append(value)
    open_left = sum(len(s) for s in stacks.values())
    return {
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
        "counters": [{"pid": k[0], "track": k[1], "unit": k[2], "values": v}
                     for k, v in sorted(counters.items(), key=str)],
        "clocks": clocks,
        "args": {k: sorted(v) for k, v in args.items()},
    }


if __name__ == "__main__":
    main(sys.argv[1])
