//! The CPython interpreters of this machine, for the tests that run the `pyfix.py` fixture on
//! each: Debian's static python3.11 and pyenv's CPython 3.10 to 3.13 with a shared libpython,
//! those present (a line says which ran and which were skipped); how a frame of the fixture is
//! named on each; and a run of xtrace over the fixture.

use std::path::PathBuf;

use crate::{args, fixtures::script, output::Outputs, run::Xtrace, TempDir};

/// One interpreter to run the fixture on.
pub struct Interpreter {
    pub label: &'static str,
    pub path: PathBuf,
    pub minor: u32,
    /// What its summary line must hold: its version, and how and where it was found.
    pub recognised: [String; 2],
}

/// The interpreters of this machine, most important first, those present; prints a line for
/// each, run or skipped.
pub fn interpreters() -> Vec<Interpreter> {
    let pyenv = std::env::var("PYENV_ROOT").unwrap_or_else(|_| "/root/.pyenv".into());
    let shared = |version: &str, minor: u32| {
        let root = format!("{pyenv}/versions/{version}");
        (
            PathBuf::from(format!("{root}/bin/python3.{minor}")),
            format!("(shared {root}/lib/libpython3.{minor}.so.1.0;"),
        )
    };
    let all = [
        (
            "Debian static 3.11",
            (
                PathBuf::from("/usr/bin/python3.11"),
                "(static /usr/bin/python3.11;".to_string(),
            ),
            11,
        ),
        ("pyenv 3.11.7", shared("3.11.7", 11), 11),
        ("pyenv 3.12.1", shared("3.12.1", 12), 12),
        ("pyenv 3.13.0", shared("3.13.0", 13), 13),
        ("pyenv 3.10.13", shared("3.10.13", 10), 10),
    ];
    all.into_iter()
        .filter_map(|(label, (path, how), minor)| {
            if !path.is_file() {
                eprintln!("python: skipped {label}: {} is not present", path.display());
                return None;
            }
            eprintln!("python: running on {label} ({})", path.display());
            Some(Interpreter {
                label,
                path,
                minor,
                recognised: [format!("CPython 3.{minor}"), how],
            })
        })
        .collect()
}

impl Interpreter {
    /// A function's frame name as xtrace writes it: its qualified name from 3.11 (`co_qualname`),
    /// its bare name on 3.10, which has none.
    pub fn frame(&self, qualname: &str, line: u32) -> String {
        let name = match self.minor {
            10 => qualname.rsplit('.').next().unwrap_or(qualname),
            _ => qualname,
        };
        format!("{name} (pyfix.py:{line})")
    }

    /// Checks summary.json and summary.txt say the interpreter was recognised, and how.
    pub fn assert_recognised(&self, out: &Outputs) {
        let entries = out.summary["python"].as_array().expect("python entries");
        assert_eq!(entries.len(), 1, "{}: {entries:?}", self.label);
        assert_eq!(entries[0]["status"], "recognised", "{}: {entries:?}", self.label);
        let detail = entries[0]["detail"].as_str().unwrap();
        for words in &self.recognised {
            assert!(
                detail.contains(words),
                "{}: {detail:?} lacks {words:?}",
                self.label
            );
        }
        let line = format!("python: process {} recognised: {detail}", entries[0]["pid"]);
        assert!(
            out.summary_txt.contains(&line),
            "{}: {}",
            self.label,
            out.summary_txt
        );
    }

    /// Runs `xtrace -F 999 -o OUT -- PYTHON pyfix.py MODE SECONDS` to its end; the outputs
    /// live as long as the directory returned with them.
    pub fn record(&self, mode: &str, seconds: &str, flags: &[&str]) -> (Outputs, TempDir) {
        let mut all = vec!["-F", "999"];
        all.extend(flags);
        self.run(mode, seconds, &all)
    }

    /// Runs `xtrace FLAGS -o OUT -- PYTHON pyfix.py MODE ARG` to its end.
    pub fn run(&self, mode: &str, arg: &str, flags: &[&str]) -> (Outputs, TempDir) {
        self.run_with(&[], (mode, arg), flags)
    }

    /// Runs `xtrace FLAGS -o OUT -- PYTHON OPTIONS pyfix.py MODE ARG` to its end: `options` are
    /// the interpreter's own (`-X perf`).
    pub fn run_with(
        &self,
        options: &[&str],
        (mode, arg): (&str, &str),
        flags: &[&str],
    ) -> (Outputs, TempDir) {
        let tmp = TempDir::new(&format!("python-{mode}"));
        let out = tmp.join("out");
        let mut argv: Vec<std::ffi::OsString> = flags.iter().map(std::ffi::OsString::from).collect();
        argv.extend(args!["-o", &out, "--", &self.path]);
        argv.extend(options.iter().map(std::ffi::OsString::from));
        argv.extend(args![script("pyfix.py"), mode, arg]);
        let finished = Xtrace::spawn(argv).wait();
        finished.assert_success();
        (Outputs::read_profiled(&out), tmp)
    }
}
