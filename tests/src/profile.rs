//! Sampling captures of a command run to its end, and the check of the `profile` fixture's
//! split (hot_a 75%, hot_b 25% of its samples), shared by the sampling test binaries.

use std::{ffi::OsString, path::Path};

use crate::{args, bpf::Attachments, output::Outputs, run::Xtrace, TempDir};

/// `xtrace FLAGS -o OUT -- PROGRAM ARGS` to its end (stdin is /dev/null, so the fixture does not
/// wait for a go line); returns the outputs. The command ended by itself, and the summary says so
/// (it said `ended_by_xtrace` in 4 of 20 such runs when the stop came before its waiter had
/// reported its exit).
pub fn profile_command(
    flags: Vec<OsString>,
    program: &Path,
    program_args: &[&str],
    tmp: &TempDir,
) -> Outputs {
    let out = tmp.join("out");
    let before = Attachments::snapshot();
    let mut all = flags;
    all.extend(args!["-o", &out, "--", program]);
    all.extend(program_args.iter().map(OsString::from));
    let finished = Xtrace::spawn(all).wait();
    finished.assert_success();
    before.assert_none_left();
    let out = Outputs::read_profiled(&out);
    let command = &out.summary["command"];
    assert_eq!(command["ended_by_xtrace"], false, "{command}");
    assert_eq!(command["exit_code"], 0, "{command}");
    assert_eq!(out.summary["targets"][0]["exited"], true);
    out
}

pub fn assert_split(out: &Outputs, build: &str, [hot_a, hot_b]: [&str; 2]) {
    let samples = out.summary["samples"].as_u64().unwrap();
    assert!(
        (800..=1200).contains(&samples),
        "{build}: ~1000 samples at 999 Hz for 1 s, got {samples}"
    );
    let (a, b) = out.split_shares([hot_a, hot_b]);
    assert!(
        (a - 75.0).abs() <= 5.0,
        "{build}: {hot_a} {a:.1}%, {hot_b} {b:.1}% of the split's samples, expected 75/25 ± 5"
    );
    // Most samples are named by the hot function itself, not only by a frame further out.
    let named = out.self_share(hot_a) + out.self_share(hot_b);
    assert!(
        named >= 80.0,
        "{build}: {hot_a} and {hot_b} are the innermost frame of {named:.1}% of samples, expected ≥ 80"
    );
    assert_eq!(out.summary["sample_frequency_hz"], 999);
}
