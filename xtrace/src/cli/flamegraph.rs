//! `xtrace flamegraph --diff BASE NEW -o diff.svg`: a differential flamegraph of two captures
//! (capture directories holding stacks.folded, or folded-stack files), drawn by inferno: frame
//! widths are NEW's samples, colours the change from BASE (red grew, blue shrank).
use std::path::{Path, PathBuf};

use clap::Args;

use crate::{
    error::{Error, Result},
    output,
};

#[derive(Debug, Args)]
pub struct FlamegraphArgs {
    /// The two captures to compare: directories recorded with CPU sampling (their
    /// stacks.folded), or folded-stack files.
    #[arg(long = "diff", num_args = 2, value_names = ["BASE", "NEW"], required = true)]
    pub diff: Vec<PathBuf>,

    /// Where to write the SVG.
    #[arg(short = 'o', long = "output", value_name = "SVG", default_value = "diff.svg")]
    pub output: PathBuf,

    /// Scale BASE's sample counts to NEW's total, so that captures of different lengths compare
    /// by share rather than by count.
    #[arg(long)]
    pub normalize: bool,
}

/// The folded stacks of a capture argument: `DIR/stacks.folded` or the file itself, each line
/// `frames COUNT` as `xtrace report` reads them, at least one.
fn folded(path: &Path) -> Result<String> {
    let is_dir = path.is_dir();
    let file = if is_dir {
        path.join(crate::output::STACKS_FOLDED)
    } else {
        path.to_path_buf()
    };
    let unreadable = |path: &Path, reason: String| Error::Unreadable {
        path: path.to_path_buf(),
        reason,
    };
    let bytes = match crate::analysis::read_regular(&file) {
        Ok(bytes) => bytes,
        Err(e) if is_dir && e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(crate::analysis::Error::CutShort { partial, .. }) =
                crate::analysis::capture::cut_short(path)
            {
                return Err(unreadable(
                    path,
                    format!("a recording cut short ({partial} was never completed); record it again"),
                ));
            }
            return Err(unreadable(
                path,
                "no stacks.folded in this directory: give a capture recorded with CPU sampling (-F) or a folded-stack file".into(),
            ));
        }
        Err(e) => {
            return Err(unreadable(
                &file,
                format!("{e}; give a capture directory or a folded-stack file"),
            ))
        }
    };
    let not_folded = |why: String| {
        unreadable(
            &file,
            format!("{why}: not folded stacks (lines of `frame;frame;... COUNT`)"),
        )
    };
    let text = String::from_utf8(bytes).map_err(|e| not_folded(e.to_string()))?;
    let stacks = crate::analysis::capture::parse_folded(&text).map_err(not_folded)?;
    if stacks.is_empty() {
        return Err(not_folded("no stack".into()));
    }
    Ok(text)
}

/// The differential flamegraph SVG of two folded-stack texts: widths from `new`, colours from the
/// change since `base`. Also used by `xtrace diff`.
pub fn draw_diff(base: &str, new: &str, title: String, normalize: bool) -> Result<Vec<u8>> {
    let mut diff = Vec::new();
    let options = inferno::differential::Options {
        normalize,
        strip_hex: false,
    };
    inferno::differential::from_readers(options, base.as_bytes(), new.as_bytes(), &mut diff)
        .map_err(|e| Error::Usage(format!("cannot compare the captures: {e}")))?;
    let mut svg = Vec::new();
    let mut options = inferno::flamegraph::Options::default();
    options.title = title;
    options.subtitle = Some("width: NEW's samples; red: more than in BASE, blue: fewer".into());
    options.count_name = "samples".into();
    inferno::flamegraph::from_reader(&mut options, diff.as_slice(), &mut svg)
        .map_err(|e| Error::Usage(format!("cannot draw the differential flamegraph: {e}")))?;
    Ok(svg)
}

/// Writes the differential flamegraph; returns what the CLI reports.
pub fn run(args: &FlamegraphArgs) -> Result<String> {
    let (base, new) = (folded(&args.diff[0])?, folded(&args.diff[1])?);
    let title = format!("xtrace: {} vs {}", args.diff[1].display(), args.diff[0].display());
    let svg = draw_diff(&base, &new, title, args.normalize)?;
    output::write_path(&args.output, &svg)?;
    Ok(format!("wrote {}", output::shown(&args.output)))
}
