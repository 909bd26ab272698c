//! The off-CPU outputs: `offcpu.folded` (nanoseconds off CPU per stack, the process's name as the
//! root frame and the wait as the leaf, e.g. `[futex]`) and its flamegraph `offcpu.svg`, from the
//! stacks the off-CPU family folded (`pipeline::family::offcpu_summary`), and the summary's text
//! lines.
use std::collections::BTreeMap;

use inferno::flamegraph::color::{BasicPalette, Palette};
use xtrace_common::offcpu::is_idle_task;

use super::flamegraph;
use crate::{
    error::Result,
    output,
    pipeline::{
        family::offcpu_summary::{Named, OffCpuSummary},
        offcpu::{INTERRUPT_WAKER, UNSEEN_WAKER},
    },
};

/// Writes offcpu.folded and offcpu.svg of `folded` (nanoseconds per folded stack, `total_ns` in
/// all) into `out`.
pub fn write(out: &output::Dir, folded: &BTreeMap<String, u64>, total_ns: u64, icicle: bool) -> Result<()> {
    let chart = flamegraph::Chart {
        title: format!("xtrace: {:.3} s off CPU", total_ns as f64 / 1e9),
        subtitle: None,
        count_name: "ns",
        palette: Palette::Basic(BasicPalette::Blue),
        empty: "no time off CPU",
        icicle,
    };
    flamegraph::write(out, folded, output::OFFCPU_FOLDED, output::OFFCPU_SVG, &chart)
}

/// Writes offcpu.folded and offcpu.svg of the stacks `named` into `out`; returns its section.
pub fn write_named(out: &output::Dir, named: &Named, icicle: bool) -> Result<OffCpuSummary> {
    let summary = named.summary();
    write(out, &named.folded, summary.off_cpu_ns, icicle)?;
    Ok(summary)
}

/// The summary's text lines: per thread, time off CPU, its longest waits and its main waker.
pub fn table(summary: &OffCpuSummary) -> String {
    let ms = |ns: u64| format!("{:.1} ms", ns as f64 / 1e6);
    let mut out = format!(
        "\n{} off CPU in {} waits (waits of {} or more with their stacks: {}):\n",
        ms(summary.off_cpu_ns),
        summary.intervals,
        crate::model::duration::human(summary.min_ns),
        summary.sent
    );
    for t in &summary.threads {
        let waits: Vec<String> = t
            .waits
            .iter()
            .take(3)
            .map(|w| format!("{} {}", w.wait, ms(w.ns)))
            .collect();
        let woken = match t.woken_by.first() {
            Some(w) if w.comm == INTERRUPT_WAKER => {
                format!("; woken most from interrupts ({}x)", w.wakeups)
            }
            Some(w) if w.comm == UNSEEN_WAKER => format!("; its wake-ups mostly unseen ({}x)", w.wakeups),
            Some(w) if w.pid == 0 && is_idle_task(w.comm.as_bytes()) => {
                format!("; woken most from the idle task ({}x)", w.wakeups)
            }
            Some(w) => format!("; woken most by {} {}/{} ({}x)", w.comm, w.pid, w.tid, w.wakeups),
            None => String::new(),
        };
        out += &format!(
            "  {} {}/{}: {} in {} waits ({}){woken}\n",
            t.comm,
            t.pid,
            t.tid,
            ms(t.off_cpu_ns),
            t.intervals,
            waits.join(", ")
        );
    }
    out += &super::locks::table(&summary.locks);
    if summary.lost > 0 {
        out += &format!("  {} waits not counted (tables full)\n", summary.lost);
    }
    out
}
