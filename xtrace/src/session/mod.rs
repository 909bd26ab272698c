//! One recording, in phases, each a type that owns what it started:
//! [`prepare::Prepared`] (input checked, targets resolved, probes planned, the output directory
//! ready; nothing in the kernel), [`start::Started`] (programs loaded and attached, a launched
//! command released, the pipeline fed), [`stop::Stopped`] (recorded until a stop condition, then
//! detached) and the finish (what is left read, the outputs written). Every stop path ends with
//! complete outputs; every error path drops what its phase holds (the kernel's attachments are
//! file descriptors), and a file cut short keeps the name it is written under, `NAME.partial`
//! (see `output::create`).
mod changes;
mod config;
mod drain;
mod finish;
mod flight;
mod kernel;
mod prepare;
mod run;
mod specs;
mod start;
mod stop;
mod targets;

pub use config::{Config, Flight, GpuPeriod, StartAt, TargetChoice};
pub use run::Progress;

use crate::{
    error::{Error, Result},
    export::summary::Summary,
};

/// The log target of the session's lines (`RUST_LOG=xtrace::session=debug`), whichever phase's
/// file writes them.
const SESSION_LOG: &str = "xtrace::session";

/// Wraps an I/O error on output file `path`.
fn output_error(path: &std::path::Path) -> impl Fn(std::io::Error) -> Error + Copy + '_ {
    move |source| Error::Output {
        path: path.to_path_buf(),
        source,
    }
}

/// What a finished recording hands back to the CLI.
pub struct Recording {
    pub summary: Summary,
    pub output: std::path::PathBuf,
    /// The files written into `output`, trace first.
    pub files: Vec<&'static str>,
    /// Uprobes still to remove from the kernel, inert (perf-event uprobes take long): hand them
    /// to a helper with [`Teardown::hand_off`], or drop them to remove them here.
    pub teardown: Teardown,
}

/// What the CLI shows while recording; the library itself prints nothing.
pub trait Observer {
    /// Something the user should know that does not stop the recording (one line).
    fn warning(&mut self, text: &str);
    /// Every probe is attached and recording has started.
    fn attached(&mut self, notice: &str);
    /// Something that happened while recording (probes attached to a library loaded late).
    fn notice(&mut self, text: &str);
    /// A few times a second while recording.
    fn progress(&mut self, progress: &Progress);
    /// Recording stopped; outputs are being written.
    fn stopped(&mut self) {}
    /// Where the live view is served (`--live`): shown even with `-q`, as its URL is the only
    /// way in.
    fn live_view(&mut self, text: &str);
}

/// A line for the user about something that happened while recording.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Said {
    /// Something done (probes attached to a library loaded late).
    Notice(String),
    /// Something that could not be done, or that limits what the recording shows.
    Warning(String),
}

impl Said {
    /// Hands the line to the observer as what it is.
    fn tell(self, observer: &mut dyn Observer) {
        match self {
            Said::Notice(text) => observer.notice(&text),
            Said::Warning(text) => observer.warning(&text),
        }
    }
}

pub use crate::probes::teardown::Teardown;

/// Records what `config` asks for until a stop condition, telling `observer` what happens.
pub async fn record(config: &Config, observer: &mut dyn Observer) -> Result<Recording> {
    let prepared = prepare::Prepared::new(config, observer)?;
    let started = prepared.start(observer).await?;
    let stopped = started.run(observer).await;
    stopped.finish(observer).await
}
