//! Standard output and standard error: whether standard output was closed when xtrace started,
//! writing to either without a panic, and control characters escaped so that a line printed
//! stays one line.
use std::io::Write;

/// Writes `bytes` to stdout. A reader that went away (`xtrace report DIR | head`) is no error and
/// no reason to panic, as `print!` would: what it did not read is dropped. Any other failure (a
/// full disk behind a redirection, /dev/full) is returned as one line to show: a report that
/// silently came out empty would pass for a good one.
pub fn print_out(bytes: &[u8]) -> Result<(), String> {
    if stdout_closed() {
        return Err(format!(
            "cannot write to standard output: {CLOSED}; redirect it to a file or to /dev/null"
        ));
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(format!(
            "cannot write to standard output: {e}; send it where there is room"
        )),
        _ => Ok(()),
    }
}

/// Whether standard output was closed when xtrace started (`xtrace report DIR >&-`): Rust's
/// runtime then opens /dev/null in its place before `main`, where whatever xtrace printed would
/// vanish with exit 0. The binary checks it first (an `.init_array` function) and says so here.
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// What [`print_out`] and `-o -` say of a closed standard output.
pub const CLOSED: &str = "it was closed when xtrace started";

/// Records that standard output was closed when xtrace started.
pub fn set_stdout_closed() {
    STDOUT_CLOSED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether standard output was closed when xtrace started.
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Writes `line` and a newline to stderr; a failure (a hung-up terminal) is ignored, not a panic
/// as with `eprintln!`. A control character in it (from a name or path the user gave: a newline,
/// a terminal escape) is written escaped, as `\n` or `\u{1b}`, so that one message stays one line
/// and cannot drive the terminal.
pub fn print_err(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{}", escape_controls(line));
}

/// `text` with each control character as its Rust escape.
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return text.into();
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect::<String>()
        .into()
}
