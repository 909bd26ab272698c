//! CUDA graph launches on the GPU device timeline, on the real kernel with the stand-in CUDA
//! runtime, driver and CUPTI (see gpu_device.rs): the stand-in driver runs each launch of a graph
//! as three kernels and a memset, and the stand-in CUPTI gives each node's record the launch's
//! correlation id and the node's graph and node ids, as CUPTI does. Each node becomes a slice of
//! its own, inside its launch call and linked to it, in trace.json and in a Perfetto trace.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::fixtures,
    gpu::{counts, cupti_args, device_slices, per_name},
    output::{us_to_ns, Outputs, Span},
    require_bpf,
    run::Xtrace,
    TempDir,
};

/// Graph launches gpuapp makes (`graph 4`), each of three kernels and a memset.
const LAUNCHES: usize = 4;
/// The stand-in graph's nodes in order (gpuapp.c, cudadrv.c), with their node's index.
const NODES: [(&str, u64); 4] = [
    ("graph_gemm", 1),
    ("graph_bias", 2),
    ("graph_relu", 3),
    ("memset", 4),
];

/// gpuapp under `--cuda`: LAUNCHES graph launches, then one round of ordinary work.
fn record(label: &str, format: &str) -> (TempDir, xtrace_tests::run::Finished) {
    let tmp = TempDir::new(label);
    let out_dir = tmp.join("out");
    let [flag, lib] = cupti_args();
    let before = Attachments::snapshot();
    let app = fixtures().gpuapp.display().to_string();
    let finished = Xtrace::spawn(args![
        "--cuda",
        "--trace-format",
        format,
        "-o",
        &out_dir,
        "--",
        app,
        flag,
        lib,
        "init",
        "wait-active",
        "graph",
        LAUNCHES.to_string(),
        "work",
        "1",
        "sleep",
        "300",
        "counts"
    ])
    .wait();
    finished.assert_success();
    before.assert_none_left();
    (tmp, finished)
}

/// The flow event of phase `ph` (`s` or `f`) with id `id`.
fn flow<'a>(out: &'a Outputs, ph: &str, id: &Value) -> Option<&'a Value> {
    out.events.iter().find(|e| e["ph"] == ph && &e["id"] == id)
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn each_node_of_a_graph_launch_is_a_slice_inside_and_linked_to_its_launch() {
    if !require_bpf() {
        return;
    }
    let (tmp, finished) = record("gpu-graph", "json");
    let out = Outputs::read(&tmp.join("out"));
    let slices = device_slices(&out);
    let mut expected: BTreeMap<String, usize> =
        NODES.iter().map(|&(n, _)| (n.to_owned(), LAUNCHES)).collect();
    for (name, n) in [
        ("vector_add", 1),
        ("reduce_sum", 2),
        ("memcpy HtoD", 1),
        ("memcpy DtoH", 1),
    ] {
        expected.insert(name.to_owned(), n);
    }
    *expected.get_mut("memset").unwrap() += 1;
    assert_eq!(per_name(&slices), expected);
    let nodes: Vec<&Span> = slices
        .iter()
        .filter(|s| s.args.get("graph_node_id").is_some())
        .collect();
    assert_eq!(nodes.len(), LAUNCHES * NODES.len());
    let mut launches = out.spans_named("cuGraphLaunch");
    launches.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    assert_eq!(launches.len(), LAUNCHES);
    assert_eq!(out.spans_named("cudaGraphLaunch").len(), LAUNCHES);
    // In time order, the nodes of each launch in the graph's order, all inside that launch's call,
    // with the graph's id and their own node's, on the launch's stream.
    for (i, node) in nodes.iter().enumerate() {
        let launch = &launches[i / NODES.len()];
        let (name, index) = NODES[i % NODES.len()];
        assert_eq!(node.name, name, "{node:?}");
        assert!(
            launch.start_ns() <= node.start_ns() && node.end_ns() <= launch.end_ns(),
            "{node:?} outside {launch:?}"
        );
        assert_eq!(node.args["graph_id"], 3, "{node:?}");
        assert_eq!(node.args["graph_node_id"], 3u64 << 32 | index, "{node:?}");
        assert_eq!(
            (node.args["stream"].as_u64(), node.args["launch_tid"].as_u64()),
            (Some(15), Some(launch.tid))
        );
        // Its flow ends where it begins and starts on the launching thread inside the call.
        let end = out
            .events
            .iter()
            .find(|e| {
                e["ph"] == "f"
                    && e["tid"] == node.tid
                    && us_to_ns(e["ts"].as_f64().unwrap()) == node.start_ns()
            })
            .unwrap_or_else(|| panic!("no flow ends at {node:?}"));
        let start = flow(&out, "s", &end["id"]).expect("its flow's start");
        let at = us_to_ns(start["ts"].as_f64().unwrap());
        assert!(
            start["tid"] == launch.tid && launch.start_ns() <= at && at <= launch.end_ns(),
            "{start} for {node:?}"
        );
    }
    // One flow per node and per ordinary kernel, copy and memset, each id once.
    let ids: std::collections::BTreeSet<String> = out
        .events
        .iter()
        .filter(|e| e["ph"] == "s")
        .map(|e| e["id"].to_string())
        .collect();
    assert_eq!(ids.len(), LAUNCHES * NODES.len() + 6);
    let gpu = &out.summary["gpu_device"];
    assert_eq!(gpu["graph_nodes"], LAUNCHES * NODES.len());
    let top: BTreeMap<&str, u64> = gpu["top_kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["name"].as_str().unwrap(), k["count"].as_u64().unwrap()))
        .collect();
    let four = LAUNCHES as u64;
    assert_eq!(
        top,
        BTreeMap::from([
            ("graph_bias", four),
            ("graph_gemm", four),
            ("graph_relu", four),
            ("reduce_sum", 2),
            ("vector_add", 1)
        ])
    );
    assert_eq!(gpu["memsets"]["count"], LAUNCHES + 1);
    assert_eq!(gpu["memsets"]["bytes"], LAUNCHES * 256 + 1024);
    // The queueing delay is the ordinary kernels' only.
    assert_eq!(gpu["queue_delay"]["count"], 3);
    assert!(
        out.summary_txt.contains(
            "GPU device: 15 kernels, 2 copies, 5 memsets (16 as CUDA graph nodes); 0 records dropped\n"
        ),
        "{}",
        out.summary_txt
    );
    let line = finished
        .stdout
        .lines()
        .find(|l| l.starts_with("counts "))
        .expect("counts");
    // The launch callbacks, each with its _ptsz form: cudaLaunchKernel,
    // cudaLaunchCooperativeKernel, cudaLaunchKernelExC, cuLaunchKernel, cuLaunchCooperativeKernel,
    // cuLaunchKernelEx, cudaGraphLaunch, cuGraphLaunch (16); and the copy and memset calls, 56 of
    // the runtime's and 76 of the driver's (cupti::COPY_CALLBACKS).
    assert_eq!(counts(line)["cuptiEnableCallback"], 16 + 56 + 76);
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn graph_nodes_are_in_a_perfetto_trace_with_their_ids_and_flows() {
    if !require_bpf() {
        return;
    }
    let (tmp, _) = record("gpu-graph-perfetto", "perfetto");
    let decoded = xtrace_tests::perfetto::decode(&tmp.join("out").join("trace.perfetto-trace"));
    let counts = xtrace_tests::perfetto::slice_counts(&decoded);
    for (name, _) in NODES.iter().take(3) {
        assert_eq!(
            counts.get(*name).copied(),
            Some(LAUNCHES as u64),
            "{name}: {counts:?}"
        );
        let args = &decoded["args"][*name];
        assert!(
            args.as_array()
                .is_some_and(|a| a.contains(&json!("graph_id")) && a.contains(&json!("graph_node_id"))),
            "{name}: {args}"
        );
    }
    assert_eq!(
        decoded["flows"],
        json!([
            {"from": "launch", "to": "graph_bias", "count": LAUNCHES},
            {"from": "launch", "to": "graph_gemm", "count": LAUNCHES},
            {"from": "launch", "to": "graph_relu", "count": LAUNCHES},
            {"from": "launch", "to": "memcpy DtoH", "count": 1},
            {"from": "launch", "to": "memcpy HtoD", "count": 1},
            {"from": "launch", "to": "memset", "count": LAUNCHES + 1},
            {"from": "launch", "to": "reduce_sum", "count": 2},
            {"from": "launch", "to": "vector_add", "count": 1},
        ])
    );
}
