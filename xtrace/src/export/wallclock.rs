//! wallclock.folded and wallclock.svg (`--off-cpu` with CPU sampling): where the traced threads
//! spent wall-clock time, running and waiting, on one flamegraph in nanoseconds. On-CPU stacks
//! come from stacks.folded, each sample weighing one sampling period; off-CPU stacks from
//! offcpu.folded, their frames annotated `_[i]`, which the flamegraph shows without the
//! annotation but in aqua, apart from the running frames' warm colours (kernel frames orange).
use std::collections::BTreeMap;

use inferno::flamegraph::color::{MultiPalette, Palette};

use super::flamegraph;
use crate::{
    analysis::capture::parse_folded,
    error::{Error, Result},
    output,
};

/// Marks an off-CPU frame: inferno draws `_[i]` frames aqua and shows their names without it.
const OFF_CPU: &str = "_[i]";

/// `stack` (root first) with every frame but the root marked off CPU.
fn off_cpu_stack(stack: &str) -> String {
    let mut frames = stack.split(';');
    let mut line = frames.next().unwrap_or_default().to_string();
    for frame in frames {
        line.push(';');
        line.push_str(frame);
        line.push_str(OFF_CPU);
    }
    line
}

/// The two profiles as one, in nanoseconds: `on_cpu` samples at `frequency_hz`, `off_cpu` ns.
fn combine(on_cpu: &[(String, u64)], off_cpu: &[(String, u64)], frequency_hz: u64) -> BTreeMap<String, u64> {
    let period_ns = 1_000_000_000 / frequency_hz.max(1);
    let mut folded: BTreeMap<String, u64> = BTreeMap::new();
    for (stack, samples) in on_cpu {
        *folded.entry(stack.clone()).or_default() += samples.saturating_mul(period_ns);
    }
    for (stack, ns) in off_cpu {
        *folded.entry(off_cpu_stack(stack)).or_default() += ns;
    }
    folded
}

/// Writes wallclock.folded and wallclock.svg into `out` from its stacks.folded and offcpu.folded.
pub fn write(out: &output::Dir, frequency_hz: u64, icicle: bool) -> Result<()> {
    let read = |name: &str| -> Result<Vec<(String, u64)>> {
        let path = out.join(name);
        let text = std::fs::read_to_string(&path).map_err(|source| Error::Output {
            path: path.clone(),
            source,
        })?;
        parse_folded(&text).map_err(|reason| Error::Output {
            path,
            source: std::io::Error::other(reason),
        })
    };
    let folded = combine(
        &read(output::STACKS_FOLDED)?,
        &read(output::OFFCPU_FOLDED)?,
        frequency_hz,
    );
    let total: u64 = folded.values().sum();
    let chart = flamegraph::Chart {
        title: format!("xtrace: {:.3} s of wall-clock time", total as f64 / 1e9),
        subtitle: Some("on CPU in warm colours, off CPU in aqua".into()),
        count_name: "ns",
        palette: Palette::Multi(MultiPalette::Java),
        empty: "no samples and no time off CPU",
        icicle,
    };
    flamegraph::write(
        out,
        &folded,
        output::WALLCLOCK_FOLDED,
        output::WALLCLOCK_SVG,
        &chart,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_weigh_a_period_and_waits_are_marked() {
        let on = vec![
            ("app;main;work".to_string(), 3),
            ("app;main;read_k_[k]".to_string(), 1),
        ];
        let off = vec![("app;main;wait;[futex]".to_string(), 5_000_000)];
        let folded = combine(&on, &off, 1000);
        assert_eq!(folded["app;main;work"], 3_000_000);
        assert_eq!(folded["app;main;read_k_[k]"], 1_000_000);
        assert_eq!(folded["app;main_[i];wait_[i];[futex]_[i]"], 5_000_000);
        assert_eq!(folded.len(), 3);
    }
}
