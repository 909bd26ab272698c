//! Outputs derived from a finished capture directory, written at the end of a recording and by
//! `xtrace report`: span-flamegraph.svg (when there are spans) and profile.pb.gz (samples and
//! spans). They are read back from the files just written, so a recording and a later report
//! give the same bytes. Above [`SPAN_LIMIT`] spans the recorder leaves the span parts out (they
//! would hold every span in memory); `xtrace report` makes them from the capture afterwards.

use crate::{
    analysis::{
        self,
        capture::{self, Load},
        spans,
    },
    error::{Error, Result},
    export::{pprof, span_flamegraph},
    output,
};

/// Spans beyond which a recording writes no span flamegraph and a samples-only profile.
pub const SPAN_LIMIT: u64 = 1_000_000;

/// An analysis error on files xtrace has just written is xtrace's own failure.
fn internal(e: analysis::Error) -> Error {
    match e {
        analysis::Error::Xtrace(e) => e,
        other => Error::io(
            "reading back the capture",
            std::io::Error::other(other.to_string()),
        ),
    }
}

/// Writes the derived outputs of the capture in `out`, which holds `spans` spans; returns the
/// names of the files written.
pub fn write(out: &output::Dir, spans: u64, icicle: bool) -> Result<Vec<&'static str>> {
    let with_spans = spans > 0 && spans <= SPAN_LIMIT;
    let what = Load {
        trace: with_spans,
        spans: with_spans,
        counters: false,
        samples: false,
    };
    // Read through the directory's descriptor, like everything written there.
    let capture = capture::load(&out.by_descriptor(), what).map_err(internal)?;
    let nesting = spans::nest(&capture.spans);
    let stacks = spans::stacks(&capture, &nesting);
    let mut written = Vec::new();
    if !stacks.is_empty() {
        let svg = span_flamegraph::svg(&stacks, icicle).map_err(|source| Error::Output {
            path: out.join(output::SPAN_FLAMEGRAPH_SVG),
            source,
        })?;
        output::write(out, output::SPAN_FLAMEGRAPH_SVG, &svg)?;
        written.push(output::SPAN_FLAMEGRAPH_SVG);
    }
    if !stacks.is_empty() || !capture.folded.is_empty() {
        let bytes = pprof::encode(&pprof::Input {
            folded: &capture.folded,
            sample_hz: capture.sample_hz(),
            span_stacks: &stacks,
            duration_ns: capture.field("duration_ns"),
        })
        .map_err(|source| Error::Output {
            path: out.join(output::PROFILE_PB_GZ),
            source,
        })?;
        output::write(out, output::PROFILE_PB_GZ, &bytes)?;
        written.push(output::PROFILE_PB_GZ);
    }
    Ok(written)
}
