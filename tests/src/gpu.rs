//! Helpers of the GPU device timeline's tests (gpu_device.rs, gpu_device_paths.rs): fixture
//! `gpuapp` on the stand-in CUDA runtime, driver and CUPTI.
use std::collections::BTreeMap;

use crate::{
    fixtures::fixtures,
    output::{Outputs, Span},
};

/// gpuapp's `--cupti LIBCUPTI` arguments.
pub fn cupti_args() -> [String; 2] {
    ["--cupti".into(), fixtures().libcupti.display().to_string()]
}

/// The stand-in CUPTI's counts from a `counts ...` line: function (or `records`, `dropped`) →
/// count.
pub fn counts(line: &str) -> BTreeMap<String, u64> {
    let rest = line
        .strip_prefix("counts ")
        .unwrap_or_else(|| panic!("not a counts line: {line:?}"));
    rest.split_whitespace()
        .map(|pair| {
            let (name, n) = pair.split_once('=').expect("name=count");
            (name.to_owned(), n.parse().expect("a count"))
        })
        .collect()
}

/// The device slices of trace.json (category `gpu`), in time order.
pub fn device_slices(out: &Outputs) -> Vec<Span> {
    let mut slices: Vec<Span> = out.spans().into_iter().filter(|s| s.cat == "gpu").collect();
    slices.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    slices
}

/// How many device slices of each name.
pub fn per_name(slices: &[Span]) -> BTreeMap<String, usize> {
    let mut names = BTreeMap::new();
    for s in slices {
        *names.entry(s.name.clone()).or_default() += 1;
    }
    names
}

/// The device slices per name of `rounds` of gpuapp's `work`: each round launches vector_add
/// once and reduce_sum twice, copies each way once and sets memory once.
pub fn expected(rounds: usize) -> BTreeMap<String, usize> {
    [
        ("vector_add", rounds),
        ("reduce_sum", 2 * rounds),
        ("memcpy HtoD", rounds),
        ("memcpy DtoH", rounds),
        ("memset", rounds),
    ]
    .into_iter()
    .map(|(n, c)| (n.to_owned(), c))
    .collect()
}

/// The names of process `pid`'s threads, sorted.
pub fn thread_names(pid: u32) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the fixture's tasks")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|c| c.trim().to_owned())
        .collect();
    names.sort();
    names
}
