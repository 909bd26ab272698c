//! The xtrace command: parse arguments, run, print the summary or one line of error.
use std::{io::Write, process::ExitCode};

use clap::{error::ErrorKind, Parser};
use xtrace::{
    cli::{
        convert, diff, flamegraph, generate, list, merge, report, status::Console, store, view, Cli, Command,
    },
    output::stdio::{print_err, print_out},
    session,
};

/// `eprintln!` that never panics (see [`print_err`]).
macro_rules! err {
    ($($arg:tt)*) => { print_err(&format!($($arg)*)) };
}

/// `print!` that never panics (see [`print_out`]): a failure is said in one line, and the
/// command's exit code becomes 2.
macro_rules! out {
    ($($arg:tt)*) => { stdout_written(print_out(format!($($arg)*).as_bytes())) };
}

/// Says why stdout could not be written, if it could not; whether it was.
fn stdout_written(written: Result<(), String>) -> bool {
    written.map_err(|why| err!("xtrace: error: {why}")).is_ok()
}

/// What to say when clap refuses an argument that is not UTF-8: which one, and what to do.
fn not_utf8(args: impl Iterator<Item = std::ffi::OsString>) -> String {
    match args.enumerate().skip(1).find(|(_, a)| a.to_str().is_none()) {
        Some((n, arg)) => format!(
            "argument {n} (`{}`) is not valid UTF-8, which only directories (-o DIR, the \
             captures of report and diff) and a launched command with its arguments (after `--`) \
             may be; give that file a UTF-8 name or a symlink with one",
            arg.to_string_lossy()
        ),
        None => "an argument is not valid UTF-8; see `xtrace --help`".into(),
    }
}

/// Whether file descriptor 1 was closed as the process started, checked before Rust's runtime
/// opens /dev/null in its place (see [`xtrace::output::stdio::stdout_closed`]).
static STDOUT_WAS_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn check_stdout() {
    // SAFETY: fcntl on a descriptor number only reads its flags, or fails with EBADF.
    if unsafe { libc::fcntl(1, libc::F_GETFD) } < 0 {
        STDOUT_WAS_CLOSED.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Run by the dynamic loader with the program's other constructors, before `main` and Rust's
/// runtime.
#[used]
#[unsafe(link_section = ".init_array")]
static CHECK_STDOUT: extern "C" fn() = check_stdout;

fn main() -> ExitCode {
    if STDOUT_WAS_CLOSED.load(std::sync::atomic::Ordering::Relaxed) {
        xtrace::output::stdio::set_stdout_closed();
    }
    // Log lines (xtrace's and its libraries', aya's included) only when RUST_LOG asks for them,
    // e.g. RUST_LOG=debug or RUST_LOG=xtrace=debug.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("off")).init();
    std::panic::set_hook(Box::new(report_panic));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let what = one_line(&e.render().to_string());
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                // clap shows the command's help, whose first line is its description.
                let mut chars = what.chars();
                let described: String = chars
                    .next()
                    .map(|c| c.to_ascii_lowercase())
                    .into_iter()
                    .chain(chars)
                    .collect();
                err!("xtrace: error: a subcommand is missing: {described}; see `xtrace --help`");
            } else if e.kind() == ErrorKind::InvalidUtf8 {
                err!("xtrace: error: {}", not_utf8(std::env::args_os()));
            } else {
                err!("xtrace: error: {what}; see `xtrace --help`");
            }
            return ExitCode::from(2);
        }
    };
    let args = match cli.into_command() {
        Command::Record(args) => args,
        Command::List(args) => return list(&args),
        Command::Report(args) => return report(&args),
        Command::Diff(args) => return diff(&args),
        Command::Convert(args) => return analysed(convert::run(&args)),
        Command::Merge(args) => return analysed(merge::run(&args)),
        Command::Push(args) => return stored(store::push(&args)),
        Command::History(args) => return stored(store::history(&args)),
        Command::Gate(args) => return stored(store::gate(&args)),
        Command::Check => return check(),
        Command::Generate(args) => return noted(generate::run(&args)),
        Command::Flamegraph(args) => return noted(flamegraph::run(&args)),
        Command::View(args) => return serve_view(&args),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            err!("xtrace: error: starting the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let config = args.config();
    let quiet = config.quiet;
    let mut console = Console::new(quiet);
    let result = runtime.block_on(session::record(&config, &mut console));
    match result {
        Ok(mut recording) => {
            let code = summarize(&recording, quiet);
            if let Some(url) = &args.store {
                store_recording(&recording.output, (url, args.store_spans), quiet);
            }
            remove_in_background(&mut recording.teardown, quiet);
            code
        }
        Err(e) => {
            err!("xtrace: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Prints a recording's summary table on stdout and where its outputs are on stderr.
fn summarize(recording: &session::Recording, quiet: bool) -> ExitCode {
    // The outputs are written whatever becomes of the summary on stdout (summary.txt holds it
    // too): a standard output closed from the start only leaves the table out.
    if !quiet {
        if !xtrace::output::stdio::stdout_closed() && !out!("{}", recording.summary.table()) {
            return ExitCode::from(2);
        }
        err!(
            "xtrace: wrote {}/{{{}}}",
            recording.output.display(),
            recording.files.join(",")
        );
    }
    ExitCode::SUCCESS
}

/// `--store`: pushes the capture just written; a store that fails costs a warning that says how
/// to push it later, never the capture.
fn store_recording(dir: &std::path::Path, (url, spans): (&xtrace::store::Url, bool), quiet: bool) {
    let spans_flag = if spans { " --store-spans" } else { "" };
    match xtrace::store::push(dir, url, spans) {
        Ok(xtrace::store::Pushed::Stored { id }) if !quiet => {
            err!("xtrace: stored run {id} in {}", url.shown())
        }
        Ok(_) => {}
        Err(e) => err!(
            "xtrace: warning: the capture was not stored: {e}; send it later with `xtrace push {} --store {}{spans_flag}`",
            xtrace::output::shown(dir),
            url.shown()
        ),
    }
}

/// Hands the uprobes a recording left in the kernel to a helper that removes them in the
/// background, and says so; where no helper can be started, removes them here.
fn remove_in_background(teardown: &mut session::Teardown, quiet: bool) {
    let uprobes = teardown.uprobes();
    if uprobes == 0 {
        return;
    }
    match teardown.hand_off(!quiet) {
        Ok(pid) if !quiet => err!("xtrace: removing {uprobes} uprobes in the background (pid {pid})"),
        Ok(_) => {}
        Err(e) => {
            err!("xtrace: warning: starting a helper to remove {uprobes} uprobes: {e}; removing them now")
        }
    }
}

/// A store command: its text on stdout, its note on stderr; exit 1 when a gate found a regression.
fn stored(outcome: xtrace::store::Result<store::Said>) -> ExitCode {
    match outcome {
        Ok(said) => {
            if !said.text.is_empty() && !stdout_written(print_out(said.text.as_bytes())) {
                return ExitCode::from(2);
            }
            err!("xtrace: {}", said.note);
            ExitCode::from(u8::from(said.regressed))
        }
        Err(e) => {
            err!("xtrace: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// A command whose outcome is one note on stderr (what it wrote), or one error line.
fn noted(outcome: xtrace::error::Result<String>) -> ExitCode {
    match outcome {
        Ok(note) => {
            err!("xtrace: {note}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            err!("xtrace: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// `xtrace check`: one line per item on stdout; exit 0 when recording can work, else 1. A kernel
/// without BPF at all is one error line (exit 2): none of the items could be asked.
fn check() -> ExitCode {
    if let Err(e) = xtrace::bpf::features::require_bpf_syscall() {
        err!("xtrace: error: {e}");
        return ExitCode::from(e.exit_code());
    }
    let items = xtrace::check::items();
    if !out!("{}", xtrace::check::table(&items)) {
        return ExitCode::from(2);
    }
    if xtrace::check::can_record(&items) {
        err!("xtrace: recording can work on this host");
        ExitCode::SUCCESS
    } else {
        err!("xtrace: recording cannot work on this host: fix the items marked missing");
        ExitCode::from(1)
    }
}

/// `xtrace list ...`: the listing on stdout, its count on stderr.
fn list(args: &list::ListArgs) -> ExitCode {
    match list::run(args) {
        Ok((table, note)) => {
            if !out!("{table}") {
                return ExitCode::from(2);
            }
            for line in note.lines() {
                err!("xtrace: {line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            err!("xtrace: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// `xtrace report DIR`: the report on stdout, or a note on stderr about the file written.
fn report(args: &report::ReportArgs) -> ExitCode {
    match report::run(args) {
        Ok(report::Rendered::Stdout(bytes)) => match stdout_written(print_out(&bytes)) {
            true => ExitCode::SUCCESS,
            false => ExitCode::from(2),
        },
        Ok(report::Rendered::Wrote(note)) => {
            err!("xtrace: {note}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            err!("xtrace: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// `xtrace view DIR`: serves until stopped, on a runtime of its own.
fn serve_view(args: &view::ViewArgs) -> ExitCode {
    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => analysed(runtime.block_on(view::run(args))),
        Err(e) => {
            err!("xtrace: error: starting the runtime: {e}");
            ExitCode::from(1)
        }
    }
}

/// `xtrace convert DIR`, `xtrace merge DIR... -o OUT`: a note on stderr saying what was
/// written.
fn analysed(outcome: xtrace::analysis::Result<String>) -> ExitCode {
    match outcome {
        Ok(note) => {
            err!("xtrace: {note}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            err!("xtrace: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// `xtrace diff BASE NEW`: the comparison on stdout; exit 1 when a probe regressed.
fn diff(args: &diff::DiffArgs) -> ExitCode {
    match diff::run(args) {
        Ok(outcome) => {
            if !stdout_written(print_out(outcome.text.as_bytes())) {
                return ExitCode::from(2);
            }
            for path in &outcome.wrote {
                err!("xtrace: wrote {}", xtrace::output::shown(path));
            }
            if outcome.regressed.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            err!("xtrace: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// A panic (a bug in xtrace) as one `xtrace: internal error:` line, the backtrace after it when
/// RUST_BACKTRACE asks for one. The process then exits with 101; everything it attached goes with
/// its fds, and a launched command gets SIGTERM (see `launch::Launch`).
fn report_panic(info: &std::panic::PanicHookInfo) {
    let payload = info.payload();
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    let at = info
        .location()
        .map_or(String::new(), |l| format!(" at {}:{}", l.file(), l.line()));
    let thread = std::thread::current();
    let thread = thread.name().unwrap_or("unnamed");
    err!(
        "xtrace: internal error: {}{at} (thread {thread}); this is a bug in xtrace: please report it, \
         with the output of RUST_BACKTRACE=1",
        one_line(message)
    );
    let backtrace = std::backtrace::Backtrace::capture();
    if backtrace.status() == std::backtrace::BacktraceStatus::Captured {
        // Many lines, on purpose: past print_err, which would escape its newlines.
        let _ = writeln!(std::io::stderr().lock(), "{backtrace}");
    }
}

/// A clap error as one line: its message without the "error:" prefix and the usage block.
fn one_line(rendered: &str) -> String {
    let message = rendered.split("\n\n").next().unwrap_or(rendered);
    let message = message.trim().trim_start_matches("error:").trim();
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}
