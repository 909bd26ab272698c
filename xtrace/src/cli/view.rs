//! `xtrace view DIR`: serves a finished capture with the live view's page (its probe table from
//! summary.json, its flamegraph from stacks.folded), behind the same token, Host and Origin
//! checks, until Ctrl-C or the page's Close button.
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
    pub dir: PathBuf,

    /// Serve on IP:PORT [default: 127.0.0.1 and a free port].
    ///
    /// As with `record --live`: the printed URL holds the token; only an explicit IP address that
    /// is not loopback opens the page to other machines, with a warning; a host name is refused.
    #[arg(long = "listen", value_name = "IP:PORT", default_value = crate::live::DEFAULT_ADDR)]
    pub listen: String,
}

/// Serves the capture until a stop signal or the page's Close button; returns the note to print.
pub async fn run(args: &ViewArgs) -> Result<String> {
    let capture = capture::load(
        &args.dir,
        Load {
            trace: true,
            spans: false,
            counters: true,
        },
    )?;
    let sig = |kind| signal(kind).map_err(|e| Error::io("installing signal handlers", e));
    let (mut int, mut term, mut hup) = (
        sig(SignalKind::interrupt())?,
        sig(SignalKind::terminate())?,
        sig(SignalKind::hangup())?,
    );
    let (live, told) = Live::view(&args.listen, &capture)?;
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
    Ok(format!("closed the view of {}", crate::output::shown(&args.dir)))
}
