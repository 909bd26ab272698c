//! The CPU profile's files: the sampled stacks, named by the in-capture symbolizer
//! (`pipeline::symbolizer`) and folded by the sampling family
//! (`pipeline::family::profile_summary`), written as `stacks.folded` (process name as the root
//! frame, kernel frames suffixed `_[k]`) and an inferno `flamegraph.svg`.
use inferno::flamegraph::color::{BasicPalette, Palette};

use super::flamegraph;
use crate::{error::Result, pipeline::family::profile_summary::Folded};

/// Writes stacks.folded and flamegraph.svg of `folded` into `out` (`total` samples at
/// `frequency_hz`).
pub fn write(
    out: &crate::output::Dir,
    folded: &Folded,
    total: u64,
    frequency_hz: u64,
    icicle: bool,
) -> Result<()> {
    let chart = flamegraph::Chart {
        title: format!("xtrace: {total} samples at {frequency_hz} Hz"),
        subtitle: None,
        count_name: "samples",
        palette: Palette::Basic(BasicPalette::Hot),
        empty: "no samples",
        icicle,
    };
    flamegraph::write(
        out,
        &folded.lines,
        crate::output::STACKS_FOLDED,
        crate::output::FLAMEGRAPH_SVG,
        &chart,
    )
}
