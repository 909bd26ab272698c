//! `xtrace convert`: a capture's trace rewritten in the other format beside it — trace.json (or
//! .gz) as trace.perfetto-trace, trace.perfetto-trace as trace.json — event by event through the
//! writer a recording uses ([`super::replay`], [`super::replay_perfetto`]), so that the two traces
//! hold the same spans, instants, counters, async ranges, flows, samples and names. The JSON is
//! read with the streaming parser (any layout), the Perfetto trace packet by packet; the new trace
//! is written through `NAME.partial`, removed if the conversion fails, and never over a trace
//! already there.
use std::{io::Read, path::Path};

use super::replay::{Placement, Replay};
use crate::{
    analysis::{
        capture::malformed,
        trace_file::{self, Progress},
        Error, Result,
    },
    clock::Snapshot,
    output::{self, Sink, TraceFormat},
    pipeline::writer::EventWriter,
};

/// Converts the trace of capture `dir` to `format` (None: the format it is not in), compressed
/// when `gzip`; returns the name of the file written.
pub fn run(dir: &Path, format: Option<TraceFormat>, gzip: bool) -> Result<&'static str> {
    let (path, reader, from) = trace_file::open(dir)?;
    let format = format.unwrap_or(match from {
        TraceFormat::Json => TraceFormat::Perfetto,
        TraceFormat::Perfetto => TraceFormat::Json,
    });
    if from == format {
        return Err(Error::NotConvertible {
            path,
            reason: "it is in that format already; give another --trace-format".into(),
        });
    }
    let summary = crate::analysis::capture::load(
        dir,
        crate::analysis::capture::Load {
            trace: false,
            spans: false,
            counters: false,
            samples: false,
        },
    )?;
    let clock = |at: &str| Snapshot::from_json(&summary.summary["clock"][at]);
    let name = format.file_name(gzip);
    let out = output::prepare(Some(dir), true)?;
    if out
        .kind(name)
        .map_err(|e| crate::error::Error::Output {
            path: out.join(name),
            source: e,
        })?
        .is_some()
    {
        return Err(Error::NotConvertible {
            path: out.join(name),
            reason: "it is there already, and convert never writes over a trace; remove it first".into(),
        });
    }
    let (sink, _) = Sink::new(output::create(&out, name)?, gzip);
    let written = |source| {
        Error::Xtrace(crate::error::Error::Output {
            path: out.join(&output::partial(name)),
            source,
        })
    };
    let mut writer = EventWriter::starting(sink, &[], format, clock("start")).map_err(written)?;
    let mut replay = Replay {
        writer: &mut writer,
        placement: Placement::default(),
        progress: Progress::default(),
        held: None,
    };
    let replayed = match from {
        TraceFormat::Json => replay_events(&path, reader, &mut replay),
        TraceFormat::Perfetto => {
            drop(reader);
            let depths = summary.summary["slice_depths"] == true;
            super::replay_perfetto::replay(dir, &path, &mut replay, depths)
        }
    };
    let finished = replayed.and_then(|()| {
        writer.ending(clock("end")).map_err(written)?;
        writer.finish().and_then(Sink::close).map_err(written)?;
        Ok(output::complete(&out, name)?)
    });
    if finished.is_err() {
        // No half-written trace is left to make the capture look cut short.
        let _ = out.remove_file(&output::partial(name));
    }
    finished.map(|()| name)
}

/// Streams the trace.json at `path` from `reader` into `replay`.
pub(super) fn replay_events(path: &Path, reader: Box<dyn Read>, replay: &mut Replay) -> Result<()> {
    let streamed = trace_file::stream(reader, replay).map(|()| replay.release());
    let streamed = match streamed {
        Ok(Err(refused)) => Err(malformed(path, refused)),
        Ok(Ok(())) => Ok(()),
        Err(e) => Err(malformed(path, e)),
    };
    match replay.progress.refused.take() {
        Some(refused) => Err(malformed(path, refused)),
        None => streamed,
    }
}
