//! `xtrace view DIR`: serves a finished capture with the live view's page (its probe table from
//! summary.json, its flamegraph from stacks.folded); `xtrace view --diff BASE NEW` serves two
//! captures compared by `xtrace diff`'s own code (its tables, verdicts and differential
//! flamegraph). Behind the same token, Host and Origin checks, until Ctrl-C or the page's Close
//! button.
use std::path::PathBuf;

use clap::Args;
use tokio::signal::unix::{signal, SignalKind};

use crate::{
    analysis::{
        capture::{self, Load},
        Result,
    },
    error::Error,
    live::Live,
    output::stdio::print_err,
};

#[derive(Debug, Args)]
pub struct ViewArgs {
    /// The capture directory to show (written by `xtrace -o DIR`).
    #[arg(required_unless_present = "diff", conflicts_with = "diff")]
    pub dir: Option<PathBuf>,

    /// Show two captures compared instead: the probes' table, verdicts and differential
    /// flamegraph that `xtrace diff BASE NEW` makes (with `--threshold` and `--min-count`).
    #[arg(long, num_args = 2, value_names = ["BASE", "NEW"])]
    pub diff: Option<Vec<PathBuf>>,

    /// With `--diff`: judge as `xtrace diff --threshold` does (and by its default).
    #[arg(allow_hyphen_values = true, long, value_name = "PERCENT",
          value_parser = super::diff::parse_percent)]
    pub threshold: Option<f64>,

    /// With `--diff`: judge as `xtrace diff --min-count` does (and by its default).
    #[arg(
        allow_negative_numbers = true,
        long = "min-count",
        value_name = "N",
        requires = "diff"
    )]
    pub min_count: Option<u64>,

    /// Serve on IP:PORT [default: 127.0.0.1 and a free port].
    ///
    /// As with `record --live`: the printed URL holds the token; only an explicit IP address that
    /// is not loopback opens the page to other machines, with a warning; a host name is refused.
    #[arg(long = "listen", value_name = "IP:PORT", default_value = crate::live::DEFAULT_ADDR)]
    pub listen: String,
}

impl ViewArgs {
    fn judging(&self) -> super::diff::Judging {
        let default = super::diff::Judging::default();
        super::diff::Judging {
            threshold: self.threshold.unwrap_or(default.threshold),
            min_count: self.min_count.unwrap_or(default.min_count),
        }
    }
}

/// Serves the capture until a stop signal or the page's Close button; returns the note to print.
pub async fn run(args: &ViewArgs) -> Result<String> {
    let (served, shown) = match (&args.dir, args.diff.as_deref()) {
        (_, Some([base, new])) => (
            Served::Diff(super::diff::comparison(base, new, args.judging())?, base, new),
            format!(
                "the comparison of {} with {}",
                crate::output::shown(new),
                crate::output::shown(base)
            ),
        ),
        (Some(_), _) if args.threshold.is_some() || args.min_count.is_some() => {
            return Err(Error::Usage(
                "--threshold and --min-count judge a comparison: give them with --diff BASE NEW".into(),
            )
            .into())
        }
        (Some(dir), _) => {
            let load = Load {
                trace: true,
                spans: true,
                counters: true,
                samples: false,
            };
            (
                Served::Capture(capture::load(dir, load)?),
                format!("the view of {}", crate::output::shown(dir)),
            )
        }
        // clap requires DIR or --diff BASE NEW.
        _ => return Err(Error::Usage("give a capture directory, or --diff BASE NEW".into()).into()),
    };
    let sig = |kind| signal(kind).map_err(|e| Error::io("installing signal handlers", e));
    let (mut int, mut term, mut hup) = (
        sig(SignalKind::interrupt())?,
        sig(SignalKind::terminate())?,
        sig(SignalKind::hangup())?,
    );
    let (live, told) = match served {
        Served::Capture(capture) => Live::view(&args.listen, &capture)?,
        Served::Diff(compared, base, new) => {
            let page = crate::live::DiffPage {
                base: base.display().to_string(),
                new: new.display().to_string(),
                header: &super::diff::PROBE_HEADER,
                rows: &compared.probe_cells,
                tables: &compared.tables,
                verdict: compared.verdict.trim(),
                flamegraph: compared.svg.is_some(),
            };
            Live::view_diff(&args.listen, &page, compared.svg)?
        }
    };
    for line in &told.notices {
        print_err(&format!("xtrace: {line}"));
    }
    if let Some(warning) = &told.warning {
        print_err(&format!("xtrace: warning: {warning}"));
    }
    print_err("xtrace: serving until Ctrl-C or the page's Close button");
    let shared = live.shared();
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
        _ = hup.recv() => {}
        _ = shared.stop_asked() => {}
    }
    live.close().await;
    Ok(format!("closed {shown}"))
}

/// What is shown.
enum Served<'a> {
    Capture(crate::analysis::capture::Capture),
    /// BASE and NEW compared, BASE, NEW.
    Diff(super::diff::Comparison, &'a PathBuf, &'a PathBuf),
}
