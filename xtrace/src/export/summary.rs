//! The recording summary: summary.json and the readable table (stdout and summary.txt).
use serde::Serialize;

use crate::pipeline::family::summary::PairSummary;
use crate::{
    model::summary::Lost,
    pipeline::{stats::Distribution, values::ValueSummary},
};

#[derive(Clone, Debug, Serialize)]
pub struct ProbeSummary {
    pub name: String,
    pub kind: &'static str,
    pub target: String,
    /// A function probe's place in `target`: the file offset of the instruction its entry probe
    /// is on, in hex (after a leading `endbr64`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<String>,
    #[serde(flatten)]
    pub stats: Distribution,
    /// The durations' histogram: (the bucket's smallest value in ns, calls) for each bucket that
    /// holds calls, smallest first; buckets are 1/128 of a power of two wide (exact below 128 ns),
    /// so histograms of many captures add up (`xtrace push` stores them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub histogram: Vec<[u64; 2]>,
    /// With `--min-duration`: calls shorter than it, counted and timed in the kernel (included in
    /// the statistics above, absent from trace.json).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub below_min_duration: Option<u64>,
    /// Captured arguments and return value (only for probes whose spec asks for them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<ValueSummary>,
    /// A USDT pair's (kind `usdt_span`): its halves left without the other.
    #[serde(flatten)]
    pub pair: Option<PairSummary>,
    /// With `--stacks`: where its calls came from, the most time first (at most 5).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub call_sites: Vec<crate::pipeline::call_sites::CallSite>,
}

/// Whether a probe gets a row in the summary's table (summary.txt, stdout) and in the live view's
/// probe table: CUDA and MPI probes cover every API function found, so only those called are
/// worth a row; the tool library's probes are shown as the ranges they make instead. (Probes
/// kept for CUDA libraries never loaded are not in summary.json at all.)
pub fn has_row(kind: &str, target: &str, count: u64) -> bool {
    (!matches!(kind, "cuda" | "mpi") || count > 0)
        && !crate::probes::ranges::is_tool(std::path::Path::new(target))
}

/// The order of the probe table's rows: the most time in all first, then by name. summary.txt's, and the live
/// view's page (`live::publish`, `live::view`).
pub fn by_total(a: &str, a_total_ns: u64, b: &str, b_total_ns: u64) -> std::cmp::Ordering {
    b_total_ns.cmp(&a_total_ns).then_with(|| a.cmp(b))
}

#[derive(Clone, Debug, Serialize)]
pub struct CommandSummary {
    pub argv: Vec<String>,
    pub pid: u32,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// The command was still running when the capture stopped, and xtrace ended it (SIGTERM, then
    /// SIGKILL after 2 s): `exit_code` or `signal` then says how it took that.
    pub ended_by_xtrace: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct TargetSummary {
    /// The pid as xtrace (and the kernel's records) see it.
    pub pid: u32,
    /// The pid inside the target's own PID namespace (a container); null when it shares xtrace's.
    pub ns_pid: Option<u32>,
    pub comm: String,
    /// Whether it exited before the capture ended (its samples and calls up to then are kept).
    pub exited: bool,
    /// Its rank in a distributed job, from its launcher's variables; null outside one.
    pub rank: Option<crate::model::rank::Rank>,
}

/// How the recording ran: the first fields of summary.json.
#[derive(Clone, Debug, Serialize)]
pub struct RunInfo {
    /// The host name of the machine it ran on.
    pub host: String,
    /// `--label`s, by key.
    pub labels: std::collections::BTreeMap<String, String>,
    /// `--start-at`: when the capture's window began, CLOCK_REALTIME in ns; null without it.
    pub start_at_ns: Option<u64>,
    pub duration_ns: u64,
    /// Loading the kernel programs and attaching every probe.
    pub attach_ns: u64,
    /// Detaching every probe and unloading the programs.
    pub detach_ns: u64,
    /// How the uprobes were attached: "uprobe_multi" (Linux 6.6+) or "perf_event".
    pub attach_mechanism: &'static str,
    /// Kernel uprobes placed, entry and return.
    pub uprobes: usize,
    /// `--min-duration` in ns; null when every call was sent as a span.
    pub min_duration_ns: Option<u64>,
    /// With `--overhead`: xtrace's kernel programs that ran, most time first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overhead: Option<Vec<crate::bpf::overhead::ProgramCost>>,
    /// With `--overhead` and sampling: what naming the CPU samples' stacks took in user space.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symbolize: Option<SymbolizeCost>,
}

/// The time xtrace spent naming the sampled stacks: each Python walk's frames as it came (from
/// the cache, or read from the process), then, once, each distinct stack's native frames with
/// the Python frames stitched in.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct SymbolizeCost {
    /// `python_ns` and `native_ns` together.
    pub ns: u64,
    /// Samples whose stacks were named: the sum of stacks.folded's counts.
    pub samples: u64,
    /// Distinct stacks among them, each named once.
    pub stacks: u64,
    /// Naming the distinct stacks' native frames and stitching their Python frames in.
    pub native_ns: u64,
    /// Naming the Python walks' frames.
    pub python_ns: u64,
    /// Python walks named: one per CPU sample of a recognised interpreter, and one per off-CPU
    /// wait and `--stacks` call of one.
    pub python_walks: u64,
    /// Python frames named in them.
    pub python_frames: u64,
    /// Code objects read from the processes' memory (the frames the cache did not name).
    pub python_codes_read: u64,
    /// The first walk's time, every code object in it read: the cold cache's cost.
    pub python_first_walk_ns: Option<u64>,
}

impl SymbolizeCost {
    /// The summary line: `symbolize: 12.3ms for 10000 samples (...)`.
    pub fn line(&self) -> String {
        let human = crate::model::duration::human;
        format!(
            "symbolize: {} naming {} samples' stacks ({} distinct: {}; {} Python frames in {} walks: {}, \
             {} code objects read)",
            human(self.ns),
            self.samples,
            self.stacks,
            human(self.native_ns),
            self.python_frames,
            self.python_walks,
            human(self.python_ns),
            self.python_codes_read
        )
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// [`FORMAT_VERSION`](crate::model::summary::FORMAT_VERSION); a summary.json without it is read as version 1.
    pub format_version: u32,
    /// The Perfetto trace gives each nested slice its depth (a `depth` annotation; absent: 0),
    /// so it is read back without working nesting out (`convert`, `merge`). Absent from older
    /// captures and trace.json ones.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub slice_depths: bool,
    #[serde(flatten)]
    pub run: RunInfo,
    pub stop_reason: &'static str,
    pub lost_events: u64,
    pub lost: Lost,
    /// Calls entered but left without a return (longjmp, C++ exceptions, a thread or process
    /// ending inside the call): no span, never mis-paired with another return.
    pub unmatched_entries: u64,
    /// Captured arguments dropped because too many calls were waiting for their spans.
    pub args_unpaired: u64,
    /// String arguments and return values (`str`) at a non-null address that could be read
    /// neither by the kernel program nor from a read-only mapped file: `null` in trace.json.
    pub unreadable_strings: u64,
    /// USDT begin/end hits left without their other half: ends with no open span on their thread
    /// (begun before the capture) and begins still open when it stopped.
    pub usdt_unpaired: u64,
    /// Records user space could not use (wrong size, unknown kind or probe id); never expected.
    pub decode_errors: u64,
    /// Sorted by total time, largest first.
    pub probes: Vec<ProbeSummary>,
    pub command: Option<CommandSummary>,
    pub targets: Vec<TargetSummary>,
    /// With CPU sampling: `samples`, `sample_frequency_hz`, `truncated_stacks`, `hot_functions`,
    /// `hot_stacks`.
    #[serde(flatten)]
    pub profile: Option<crate::pipeline::family::profile_summary::ProfileSummary>,
    /// With CUDA tracing: launches per kernel, copies, device memory, synchronization.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda: Option<crate::pipeline::family::cuda_summary::CudaSummary>,
    /// `--mpi`: per MPI function, its calls, time and bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mpi: Option<crate::pipeline::family::mpi::MpiSummary>,
    /// `--off-cpu`: time the traced threads spent off CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub off_cpu: Option<crate::pipeline::family::offcpu_summary::OffCpuSummary>,
    /// `--cuda` with the GPU device timeline: device time per GPU and per kernel, copies, memsets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_device: Option<crate::pipeline::family::gpu_summary::GpuDeviceSummary>,
    /// With GPU metrics: per GPU, its name, readings and highest values.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<crate::cuda::nvml::GpuSummary>,
    /// With range capture (`--ranges`, `--nvtx`, `--itt`): per range name, sorted by total time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranges: Option<Vec<crate::pipeline::ranges::RangeSummary>>,
    /// Range pops and ends whose push or start came before the capture, plus ranges still open
    /// at the stop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranges_unpaired: Option<u64>,
    /// With `--warn-over`: per rule, the spans longer than its limit.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warn_over: Vec<crate::pipeline::warnings::WarnSummary>,
    /// The clocks read as the trace began and as it ended: CLOCK_MONOTONIC, the capture's clock,
    /// paired with CLOCK_REALTIME and CLOCK_BOOTTIME.
    pub clock: ClockSummary,
    /// With `--flight`: the window kept and what fell out of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flight: Option<FlightSummary>,
}

/// summary.json's `flight`: of a `flight-NNN` directory, the window it holds; of the capture
/// directory, the whole run's.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FlightSummary {
    /// The window asked for (`--flight`).
    pub window_ns: u64,
    /// The bytes the buffer may hold (`--flight-size`).
    pub size_bytes: u64,
    /// Of a `flight-NNN` directory: the stretch it covers, up to its trigger (or the end of
    /// `--flight-after`): the window, or less where the byte cap shortened it, or where the
    /// capture or the time since the previous trigger was shorter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_ns: Option<u64>,
    /// Events that fell out of the window (by age, or by the byte cap) and are in no directory:
    /// of a `flight-NNN` directory, since the previous one; of the capture directory, in all.
    pub aged_out_events: u64,
    /// Of a `flight-NNN` directory: what wrote it (`signal`, `warn-over` or `stop`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger: Option<&'static str>,
    /// Of the capture directory: the `flight-NNN` directories written, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub directories: Vec<String>,
}

/// summary.json's `clock`.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct ClockSummary {
    pub start: crate::clock::Snapshot,
    pub end: crate::clock::Snapshot,
}

impl ClockSummary {
    /// The first and last of a trace's clock snapshots; all zero without two of them.
    pub fn of(clocks: &[crate::clock::Snapshot]) -> Self {
        match clocks {
            [start, .., end] => ClockSummary {
                start: *start,
                end: *end,
            },
            _ => ClockSummary::default(),
        }
    }
}

impl Summary {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::summary::FORMAT_VERSION;

    fn summary() -> Summary {
        Summary {
            format_version: FORMAT_VERSION,
            slice_depths: false,
            run: RunInfo {
                host: "node7".into(),
                labels: Default::default(),
                start_at_ns: None,
                duration_ns: 1_500_000_000,
                attach_ns: 2_000_000,
                detach_ns: 3_000_000,
                attach_mechanism: "uprobe_multi",
                uprobes: 2,
                min_duration_ns: None,
                overhead: None,
                symbolize: None,
            },
            stop_reason: "targets_exited",
            lost_events: 0,
            lost: Lost::default(),
            unmatched_entries: 0,
            args_unpaired: 0,
            unreadable_strings: 0,
            usdt_unpaired: 0,
            decode_errors: 0,
            probes: vec![ProbeSummary {
                name: "work".into(),
                kind: "uprobe",
                target: "/bin/app".into(),
                offset: Some("0x1139".into()),
                stats: Distribution {
                    count: 4,
                    total_ns: 4_000,
                    min_ns: 500,
                    mean_ns: 1_000,
                    p50_ns: 900,
                    p90_ns: 1_600,
                    p99_ns: 1_600,
                    max_ns: 1_600,
                },
                histogram: vec![[500, 1], [900, 2], [1_600, 1]],
                below_min_duration: None,
                values: Vec::new(),
                call_sites: Vec::new(),
                pair: None,
            }],
            flight: None,
            command: Some(CommandSummary {
                argv: vec!["app".into(), "-x".into()],
                pid: 42,
                exit_code: Some(3),
                signal: None,
                ended_by_xtrace: false,
            }),
            targets: vec![TargetSummary {
                pid: 42,
                ns_pid: None,
                comm: "app".into(),
                exited: true,
                rank: None,
            }],
            profile: None,
            cuda: None,
            mpi: None,
            gpus: Vec::new(),
            off_cpu: None,
            gpu_device: None,
            ranges: None,
            ranges_unpaired: None,
            warn_over: Vec::new(),
            clock: ClockSummary {
                start: crate::clock::Snapshot {
                    monotonic_ns: 1_000,
                    realtime_ns: 1_700_000_000_000_000_000,
                    boottime_ns: 1_500,
                    read_ns: 80,
                    error_ns: Some(2_000),
                },
                end: crate::clock::Snapshot::default(),
            },
        }
    }

    #[test]
    fn json_fields() {
        let v: serde_json::Value = serde_json::from_str(&summary().to_json()).unwrap();
        assert_eq!(v["clock"]["start"]["monotonic_ns"], 1_000);
        assert_eq!(v["clock"]["start"]["realtime_ns"], 1_700_000_000_000_000_000u64);
        assert_eq!(v["clock"]["start"]["boottime_ns"], 1_500);
        assert_eq!(v["clock"]["end"]["realtime_ns"], 0);
        assert_eq!(v["format_version"], 1);
        assert_eq!(v["duration_ns"], 1_500_000_000u64);
        assert_eq!(v["lost_events"], 0);
        assert_eq!(v["decode_errors"], 0);
        assert_eq!(
            (v["attach_ns"].as_u64(), v["detach_ns"].as_u64()),
            (Some(2_000_000), Some(3_000_000))
        );
        assert_eq!(v["stop_reason"], "targets_exited");
        let p = &v["probes"][0];
        for (key, value) in [
            ("count", 4),
            ("total_ns", 4000),
            ("min_ns", 500),
            ("mean_ns", 1000),
            ("p50_ns", 900),
            ("p90_ns", 1600),
            ("p99_ns", 1600),
            ("max_ns", 1600),
        ] {
            assert_eq!(p[key], value, "{key}");
        }
        assert_eq!(p["name"], "work");
        assert_eq!(p["kind"], "uprobe");
        assert_eq!(v["command"]["exit_code"], 3);
        assert!(v["command"]["signal"].is_null());
        assert_eq!(v["command"]["ended_by_xtrace"], false);
    }

    #[test]
    fn table() {
        let mut below = summary();
        below.probes[0].below_min_duration = Some(3);
        let first = below.table().lines().next().unwrap().to_string();
        assert_eq!(
            first,
            "4 calls (1 as spans, 3 under --min-duration) from 1 probe in 1.500s (targets exited), 0 lost"
        );
        let text = summary().table();
        assert_eq!(
            text,
            "4 spans from 1 probe in 1.500s (targets exited), 0 lost\n\
             command `app -x` (pid 42) exited with status 3\n\
             PROBE  COUNT  TOTAL    MIN   MEAN    P50    P90    P99    MAX\n\
             work       4  4.0µs  500ns  1.0µs  900ns  1.6µs  1.6µs  1.6µs\n"
        );
        let command_line = |exit_code, signal, ended_by_xtrace| {
            let mut s = summary();
            s.command = Some(CommandSummary {
                exit_code,
                signal,
                ended_by_xtrace,
                ..s.command.unwrap()
            });
            s.table().lines().nth(1).unwrap().to_string()
        };
        assert_eq!(
            command_line(None, Some(15), true),
            "command `app -x` (pid 42) was still running when xtrace stopped; xtrace ended it (killed by signal 15)"
        );
        assert_eq!(
            command_line(None, Some(11), false),
            "command `app -x` (pid 42) killed by signal 11"
        );
        assert_eq!(
            command_line(None, None, true),
            "command `app -x` (pid 42) was still running when xtrace stopped"
        );
    }

    /// The probe table lists the most time first, then by name, whatever the plan's order.
    #[test]
    fn probe_rows_are_the_busiest_first() {
        let mut s = summary();
        for (name, total_ns) in [("zed", 4_000), ("alpha", 9_000), ("mid", 4_000)] {
            let mut probe = s.probes[0].clone();
            probe.name = name.into();
            probe.stats.total_ns = total_ns;
            s.probes.push(probe);
        }
        let table = s.table();
        let names: Vec<&str> = table
            .lines()
            .skip_while(|l| !l.starts_with("PROBE"))
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(names, ["alpha", "mid", "work", "zed"], "{table}");
    }

    /// A USDT pair's probe has `open` and `unmatched_ends` in summary.json, and a line under the
    /// table when either is not 0.
    #[test]
    fn usdt_pairs_left_open() {
        let mut s = summary();
        let mut txn = s.probes[0].clone();
        txn.name = "pg:txn".into();
        txn.kind = "usdt_span";
        txn.pair = Some(PairSummary {
            open: 2,
            unmatched_ends: 1,
        });
        s.probes.push(txn);
        let v: serde_json::Value = serde_json::from_str(&s.to_json()).unwrap();
        assert_eq!(
            (&v["probes"][1]["open"], &v["probes"][1]["unmatched_ends"]),
            (&2.into(), &1.into())
        );
        assert!(v["probes"][0].get("open").is_none(), "only pairs have it");
        let table = s.table();
        assert_eq!(
            table.lines().nth(5),
            Some("pg:txn: 2 still open at the stop, 1 end(s) without an open begin"),
            "{table}"
        );
        s.probes[1].pair = Some(PairSummary::default());
        assert!(!s.table().contains("still open"));
    }

    #[test]
    fn ranks_and_labels_have_a_line_after_the_headline() {
        let mut s = summary();
        s.targets[0].rank = Some(crate::model::rank::Rank {
            rank: 3,
            local_rank: Some(1),
            world_size: Some(8),
            launcher: "torchrun",
        });
        s.run.labels = [("job", "train"), ("commit", "1a2b")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into();
        let table = s.table();
        assert_eq!(
            table.lines().nth(2),
            Some("on node7: pid 42 rank 3 of 8 (torchrun); labels commit=1a2b job=train")
        );
        let v: serde_json::Value = serde_json::from_str(&s.to_json()).unwrap();
        assert_eq!(v["host"], "node7");
        assert_eq!(v["labels"], serde_json::json!({"commit": "1a2b", "job": "train"}));
        assert_eq!(
            v["targets"][0]["rank"],
            serde_json::json!({"rank": 3, "local_rank": 1, "world_size": 8, "launcher": "torchrun"})
        );
    }
}
