//! `xtrace push DIR --store URL`, `xtrace history --store URL [FUNCTION...]` and `xtrace gate`:
//! captures kept in a store (a SQLite file or ClickHouse), their history across runs, and a
//! regression gate against the spread of stored baseline runs (see `store`).
use std::path::PathBuf;

use clap::Args;

use crate::export::table::{markdown, render};
use crate::store::{self, gate, history, Pushed, Result, Url};

/// What every store command is told of the store.
#[derive(Debug, Args)]
pub struct StoreArg {
    /// The store: sqlite:PATH (a file, made if missing) or clickhouse://HOST:PORT/DB
    /// (ClickHouse's HTTP interface; the database is made if missing).
    ///
    /// ClickHouse credentials come from the environment, never the command line:
    /// XTRACE_STORE_USER, and XTRACE_STORE_PASSWORD or XTRACE_STORE_PASSWORD_FILE (a file holding
    /// the password).
    #[arg(long = "store", value_name = "URL", value_parser = parse_url)]
    pub store: Url,
}

fn parse_url(text: &str) -> Result<Url, String> {
    Url::parse(text).map_err(|e| e.to_string())
}

#[derive(Debug, Args)]
pub struct PushArgs {
    /// The capture to store: a directory written by `xtrace -o DIR`.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,

    #[command(flatten)]
    pub store: StoreArg,

    /// Also store every span of the capture's trace (name, pid, tid, start, duration), as
    /// `record --store-spans` does.
    #[arg(long = "store-spans")]
    pub store_spans: bool,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// The functions to show (probe names as in summary.json); every function stored when none.
    #[arg(value_name = "FUNCTION")]
    pub functions: Vec<String>,

    #[command(flatten)]
    pub store: StoreArg,

    /// One row per value of this label (`--label` of `xtrace record`, e.g. commit), its runs'
    /// calls added up, in the order the values were first recorded; runs without it are left
    /// out. Without it, one row per run, oldest first.
    #[arg(long, value_name = "LABEL")]
    pub by: Option<String>,

    /// Only the runs labelled so: LABEL=VALUE.
    #[arg(long = "where", value_name = "LABEL=VALUE", value_parser = parse_selector)]
    pub selector: Option<(String, String)>,

    /// Also draw each function's p50 and p99 across the rows as a line chart into FILE (SVG).
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

fn parse_selector(text: &str) -> Result<(String, String), String> {
    store::selector(text).map_err(|e| e.to_string())
}

#[derive(Debug, Args)]
pub struct GateArgs {
    #[command(flatten)]
    pub store: StoreArg,

    /// The baseline: the stored runs labelled LABEL=VALUE (at least three).
    #[arg(long, value_name = "LABEL=VALUE", value_parser = parse_selector)]
    pub baseline: (String, String),

    /// The run judged: a capture directory, or the stored runs labelled LABEL=VALUE (their
    /// calls added up).
    #[arg(long, value_name = "DIR|LABEL=VALUE")]
    pub candidate: String,

    /// How far above the slowest baseline run a function's p50 must be to regress: a
    /// percentage such as `5%` or `5`. It must also be 3 standard deviations above the
    /// baseline runs' mean p50.
    #[arg(long, value_name = "PERCENT", default_value = "5%", value_parser = super::diff::parse_percent)]
    pub threshold: f64,

    /// Judge only functions the candidate called at least N times.
    #[arg(long = "min-count", value_name = "N", default_value_t = 20)]
    pub min_count: u64,

    /// Also write the verdicts as Markdown to FILE, for a pull-request comment (the table of
    /// `xtrace diff --markdown`).
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
}

/// What a store command prints: the text for stdout, the note for stderr, and whether a gate
/// found a regression.
pub struct Said {
    pub text: String,
    pub note: String,
    pub regressed: bool,
}

pub fn push(args: &PushArgs) -> Result<Said> {
    let url = &args.store.store;
    let note = match store::push(&args.dir, url, args.store_spans)? {
        Pushed::Stored { id } => format!("stored run {id} in {}", url.shown()),
        Pushed::AlreadyStored { id } => {
            format!("run {id} was already stored in {}; nothing written", url.shown())
        }
    };
    Ok(Said {
        text: String::new(),
        note,
        regressed: false,
    })
}

pub fn history(args: &HistoryArgs) -> Result<Said> {
    let url = &args.store.store;
    let mut store = url.open()?;
    let runs = history::runs(store.as_mut(), args.selector.as_ref())?;
    let grouping = match &args.by {
        Some(label) => history::Grouping::Label(label),
        None => history::Grouping::Run,
    };
    let series = history::series(store.as_mut(), &runs, &args.functions, &grouping)?;
    let header = args.by.as_deref().map_or("RUN".to_string(), str::to_uppercase);
    let mut note = format!(
        "{} runs in {}, {} functions shown",
        runs.len(),
        url.shown(),
        series.len()
    );
    if let Some(path) = &args.svg {
        crate::output::write_path(path, store::plot::svg(&series).as_bytes())?;
        note += &format!("; wrote {}", crate::output::shown(path));
    }
    Ok(Said {
        text: history::render(&series, &header),
        note,
        regressed: false,
    })
}

pub fn gate(args: &GateArgs) -> Result<Said> {
    let url = &args.store.store;
    let mut store = url.open()?;
    let baseline = gate::baseline(store.as_mut(), &args.baseline)?;
    let dir = PathBuf::from(&args.candidate);
    let (candidate, named) = if dir.is_dir() || !args.candidate.contains('=') {
        (
            store::rows::read(&dir, false)?.functions,
            crate::output::shown(&dir),
        )
    } else {
        let selector = store::selector(&args.candidate)?;
        (
            gate::stored_candidate(store.as_mut(), &selector)?,
            args.candidate.clone(),
        )
    };
    let outcome = gate::judge(
        store.as_mut(),
        &baseline,
        &candidate,
        args.threshold,
        args.min_count,
    )?;
    let rows = gate::rows(&outcome);
    let regressed: Vec<&str> = outcome
        .judged
        .iter()
        .filter(|j| j.verdict == "regressed")
        .map(|j| j.name.as_str())
        .collect();
    let base = format!("{}={}", args.baseline.0, args.baseline.1);
    let percent = format!("{}%", (args.threshold * 1000.0).round() / 10.0);
    let verdict = match regressed.len() {
        0 => format!(
            "\nno function regressed beyond {percent} of the slowest of {} baseline runs ({base})\n",
            baseline.len()
        ),
        n => format!(
            "\n{n} function{} regressed beyond {percent} of the slowest of {} baseline runs ({base}): {}\n",
            if n == 1 { "" } else { "s" },
            baseline.len(),
            regressed.join(", ")
        ),
    };
    if let Some(path) = &args.markdown {
        let title = format!("## xtrace gate: {named} against {base}\n\n");
        let table = markdown(&gate::HEADER, &rows, 1);
        crate::output::write_path(path, format!("{title}{table}{verdict}").as_bytes())?;
    }
    Ok(Said {
        text: render(&gate::HEADER, &rows, 1) + &verdict,
        note: format!(
            "judged {} functions of {named} against {} runs in {}",
            outcome.judged.len(),
            baseline.len(),
            url.shown()
        ),
        regressed: outcome.regressed,
    })
}
