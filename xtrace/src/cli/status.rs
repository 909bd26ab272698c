//! The console side of a recording: the attach notice and, on a terminal, a one-line live status
//! (elapsed, events, events/s, lost, the trace file's size) drawn with indicatif. `-q` silences both.
use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

use crate::{
    model::duration::human,
    session::{Observer, Progress},
};

pub struct Console {
    quiet: bool,
    bar: Option<ProgressBar>,
}

impl Console {
    pub fn new(quiet: bool) -> Self {
        Console { quiet, bar: None }
    }
}

/// 1234567 → "1.2 MB".
fn size(bytes: u64) -> String {
    match bytes {
        0..1_000 => format!("{bytes} B"),
        1_000..1_000_000 => format!("{:.1} kB", bytes as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} MB", bytes as f64 / 1e6),
        _ => format!("{:.2} GB", bytes as f64 / 1e9),
    }
}

/// The status line's text.
pub fn status_line(p: &Progress) -> String {
    format!(
        "{}  {} events  {:.0}/s  {} lost  {} {}",
        human(p.elapsed.as_nanos() as u64),
        p.events,
        p.rate,
        p.lost,
        p.output,
        size(p.output_bytes)
    )
}

impl Console {
    /// One line on stderr, above the live status line when there is one.
    fn line(&self, text: &str) {
        if self.quiet {
            return;
        }
        match &self.bar {
            Some(bar) => bar.suspend(|| crate::output::stdio::print_err(text)),
            None => crate::output::stdio::print_err(text),
        }
    }
}

impl Observer for Console {
    fn warning(&mut self, text: &str) {
        self.line(&format!("xtrace: warning: {text}"));
    }

    fn notice(&mut self, text: &str) {
        self.line(&format!("xtrace: {text}"));
    }

    fn live_view(&mut self, text: &str) {
        let text = format!("xtrace: {text}");
        match &self.bar {
            Some(bar) => bar.suspend(|| crate::output::stdio::print_err(&text)),
            None => crate::output::stdio::print_err(&text),
        }
    }

    fn attached(&mut self, notice: &str) {
        if self.quiet {
            return;
        }
        crate::output::stdio::print_err(&format!("xtrace: {notice}"));
        // Log lines (RUST_LOG) go straight to stderr: drawn between them, the line would be
        // torn, each log line starting after a stale status.
        if std::io::stderr().is_terminal() && log::max_level() == log::LevelFilter::Off {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            self.bar = Some(bar);
        }
    }

    fn progress(&mut self, progress: &Progress) {
        if let Some(bar) = &self.bar {
            bar.set_message(status_line(progress));
            bar.tick();
        }
    }

    fn stopped(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn line() {
        let p = Progress {
            elapsed: Duration::from_millis(2500),
            events: 12345,
            rate: 4000.4,
            lost: 2,
            output: "trace.json.gz",
            output_bytes: 1_500_000,
        };
        assert_eq!(
            status_line(&p),
            "2.500s  12345 events  4000/s  2 lost  trace.json.gz 1.5 MB"
        );
    }
}
