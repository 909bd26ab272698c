//! The summary's readable table (stdout and summary.txt): the headline, the run's lines, the
//! probes, their call sites and their values, then each section's lines.
use super::summary::Summary;
use crate::model::duration::human;

impl Summary {
    pub fn table(&self) -> String {
        let mut out = self.headline();
        if let Some(costs) = &self.run.overhead {
            out += &crate::bpf::overhead::line(costs);
            out.push('\n');
        }
        if let Some(cost) = &self.run.symbolize {
            out += &cost.line();
            out.push('\n');
        }
        out += &self.command_lines();
        out += &self.job_line();
        let header = [
            "PROBE", "COUNT", "TOTAL", "MIN", "MEAN", "P50", "P90", "P99", "MAX",
        ];
        // The tool library's probes are shown as the ranges they make, `SOURCE [DOMAIN/]NAME`.
        let ranges = self.ranges.iter().flatten().map(|r| {
            let domain = r.domain.as_deref().map_or(String::new(), |d| format!("{d}/"));
            (format!("{} {domain}{}", r.source.name(), r.name), &r.stats)
        });
        let mut rows: Vec<_> = self
            .probes
            .iter()
            .filter(|p| super::summary::has_row(p.kind, &p.target, p.stats.count))
            .map(|p| (p.name.clone(), &p.stats))
            .chain(ranges)
            .collect();
        // The busiest first, as perf top lists them; the live view's page does the same.
        rows.sort_by(|(a, sa), (b, sb)| super::summary::by_total(a, sa.total_ns, b, sb.total_ns));
        let rows: Vec<Vec<String>> = rows
            .into_iter()
            .map(|(name, s)| {
                vec![
                    name,
                    s.count.to_string(),
                    human(s.total_ns),
                    human(s.min_ns),
                    human(s.mean_ns),
                    human(s.p50_ns),
                    human(s.p90_ns),
                    human(s.p99_ns),
                    human(s.max_ns),
                ]
            })
            .collect();
        out += &super::table::render(&header, &rows, 1);
        out += &self.unpaired_lines();
        out += &self.call_site_lines();
        if let Some(profile) = &self.profile {
            out += &profile_table(profile);
        }
        if let Some(off_cpu) = &self.off_cpu {
            out += &super::offcpu::table(off_cpu);
        }
        if let Some(cuda) = &self.cuda {
            out += &cuda.table();
        }
        if let Some(mpi) = &self.mpi {
            out += &mpi.table();
        }
        if let Some(gpu) = &self.gpu_device {
            out += &gpu.table();
        }
        for gpu in &self.gpus {
            let show = |v: Option<f64>, unit: &str| v.map_or("n/a".into(), |v| format!("{v:.0}{unit}"));
            out += &format!(
                "GPU {} ({}): {} readings, peak utilization {}, memory used {}, power {}\n",
                gpu.index,
                gpu.name,
                gpu.samples,
                show(gpu.max_gpu_utilization_pct, "%"),
                show(gpu.max_memory_used_bytes, " bytes"),
                show(gpu.max_power_w, " W"),
            );
            if let Some(sm) = gpu.max_traced_process_sm_utilization_pct {
                out += &format!("  traced processes: peak SM utilization {sm:.0}%\n");
            }
            if gpu.gpm {
                out += &format!(
                    "  GPM peaks: SM occupancy {}, tensor-core activity {}, DRAM bandwidth {}\n",
                    show(gpu.max_sm_occupancy_pct, "%"),
                    show(gpu.max_tensor_active_pct, "%"),
                    show(gpu.max_dram_bandwidth_pct, "%"),
                );
            }
        }
        out
    }

    /// The table's first line: what was recorded, in how long, why it stopped, and losses.
    fn headline(&self) -> String {
        let count = |usdt: bool| -> u64 {
            self.probes
                .iter()
                .filter(|p| (p.kind == "usdt") == usdt)
                .map(|p| p.stats.count)
                .sum()
        };
        let hits = if self.probes.iter().any(|p| p.kind == "usdt") {
            format!(" and {} USDT hits", count(true))
        } else {
            String::new()
        };
        // With --min-duration the shorter calls are counted, not recorded as spans.
        let below: Option<u64> = self
            .probes
            .iter()
            .filter_map(|p| p.below_min_duration)
            .reduce(|a, b| a + b);
        let calls = match below {
            Some(below) => format!(
                "{} calls ({} as spans, {below} under --min-duration)",
                count(false),
                count(false).saturating_sub(below)
            ),
            None => format!("{} spans", count(false)),
        };
        let what = match &self.profile {
            Some(profile) if self.probes.is_empty() => format!("{} samples", profile.samples),
            _ => format!(
                "{calls}{hits} from {} probe{}",
                self.probes.len(),
                if self.probes.len() == 1 { "" } else { "s" }
            ),
        };
        format!(
            "{what} in {} ({}), {} lost\n",
            human(self.run.duration_ns),
            self.stop_reason.replace('_', " "),
            self.lost_events
        )
    }

    /// With `--stacks`: each probe's top call sites, a line each (`  91%  12 calls  2.31 s  main
    /// (train.py:88)`) under one naming the probe.
    fn call_site_lines(&self) -> String {
        let mut out = String::new();
        for p in self.probes.iter().filter(|p| !p.call_sites.is_empty()) {
            out += &format!(
                "{}: {} calls, {}, from:\n",
                p.name,
                p.stats.count,
                human(p.stats.total_ns)
            );
            out += &call_site_rows(&p.call_sites);
        }
        out
    }

    /// A line per USDT pair with begins still open at the stop or ends that found none open.
    fn unpaired_lines(&self) -> String {
        let mut out = String::new();
        for p in &self.probes {
            let Some(pair) = p.pair.filter(|u| u.open + u.unmatched_ends > 0) else {
                continue;
            };
            out += &format!(
                "{}: {} still open at the stop, {} end(s) without an open begin\n",
                p.name, pair.open, pair.unmatched_ends
            );
        }
        out
    }

    /// Where the capture stands in a distributed job: the host, each target's rank and the
    /// labels (`on node7: pid 42 rank 3 of 8 (torchrun); labels job=train`); nothing for a
    /// capture with neither ranks nor labels.
    fn job_line(&self) -> String {
        let mut parts: Vec<String> = self
            .targets
            .iter()
            .filter_map(|t| {
                let rank = t.rank.as_ref()?;
                Some(format!("pid {} {} ({})", t.pid, rank.label(), rank.launcher))
            })
            .collect();
        if !self.run.labels.is_empty() {
            let labels: Vec<String> = self.run.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            parts.push(format!("labels {}", labels.join(" ")));
        }
        match parts.is_empty() {
            true => String::new(),
            false => format!("on {}: {}\n", self.run.host, parts.join("; ")),
        }
    }

    /// What became of the launched command, or of the targets that exited during the capture.
    fn command_lines(&self) -> String {
        let mut out = String::new();
        if let Some(command) = &self.command {
            let ended = match (command.exit_code, command.signal) {
                (Some(code), _) => Some(format!("exited with status {code}")),
                (None, Some(signal)) => Some(format!("killed by signal {signal}")),
                (None, None) => None,
            };
            let status = match (command.ended_by_xtrace, ended) {
                (false, Some(ended)) => ended,
                (true, Some(ended)) => {
                    format!("was still running when xtrace stopped; xtrace ended it ({ended})")
                }
                (_, None) => "was still running when xtrace stopped".into(),
            };
            out += &format!(
                "command `{}` (pid {}) {status}\n",
                crate::shell::quote_words(&command.argv),
                command.pid
            );
        }
        if self.command.is_none() && self.targets.len() > 1 {
            for t in self.targets.iter().filter(|t| t.exited) {
                out += &format!("pid {} ({}) exited during the capture\n", t.pid, t.comm);
            }
        }
        out
    }
}

/// One line per call site: share, calls, time and site.
pub(crate) fn call_site_rows(sites: &[crate::pipeline::call_sites::CallSite]) -> String {
    sites
        .iter()
        .map(|s| {
            format!(
                "  {:>3.0}%  {} calls  {}  {}\n",
                s.share * 100.0,
                s.count,
                human(s.total_ns),
                s.site
            )
        })
        .collect()
}

/// The CPU profile's lines of the table: sample count and the hottest functions by self samples.
fn profile_table(profile: &crate::pipeline::family::profile_summary::ProfileSummary) -> String {
    let mut out = format!(
        "{} samples at {} Hz ({} stacks truncated)\n",
        profile.samples, profile.sample_frequency_hz, profile.truncated_stacks
    );
    for python in &profile.python {
        out += &format!(
            "python: process {} {}: {}\n",
            python.pid, python.status, python.detail
        );
    }
    if profile.hot_functions.is_empty() {
        return out;
    }
    out += &format!("{:>7} {:>7} {:>7}  FUNCTION\n", "SELF", "SELF%", "TOTAL%");
    let share = |n: u64| {
        if profile.samples == 0 {
            0.0
        } else {
            n as f64 * 100.0 / profile.samples as f64
        }
    };
    for f in profile.hot_functions.iter().take(10) {
        out += &format!(
            "{:>7} {:>6.1}% {:>6.1}%  {}\n",
            f.self_samples,
            share(f.self_samples),
            share(f.total),
            f.name
        );
    }
    out
}
