//! Stopping a recording on perf-event uprobes (kernels before 6.6, where each uprobe takes ~80 ms
//! to remove, and `XTRACE_UPROBE_ATTACH=perf_event`): xtrace stops its programs on every uprobe at
//! the stop, writes complete outputs, and exits within a second of Ctrl-C; a background helper
//! (`xtrace-detach`) removes the uprobes, and once it has ended the traced process's code is as
//! its file has it and nothing of xtrace's is left. Fixture: `many rounds`, 300 functions,
//! glob_fn_K called K % 5 + 1 times in each round (900 calls), a round for each line on stdin
//! (glob_fn_299 once for `last`).

use std::{
    collections::BTreeMap,
    fs,
    os::unix::fs::FileExt,
    time::{Duration, Instant},
};

use xtrace_common::probe::counter::AFTER_STOP;
use xtrace_tests::{
    args,
    bpf::{counter_of_held_programs, Attachments},
    fixtures::{fixtures, Fixture},
    output::{u64_field, Outputs},
    require_bpf,
    run::Xtrace,
    TempDir,
};

/// How long the helper may take to remove 600 uprobes: ~50 s at the ~80 ms each Linux 6.1 and
/// 6.18 take, with room for a slow emulated guest.
const REMOVAL_TIMEOUT: Duration = Duration::from_secs(300);

/// The first code byte of each glob_fn_K as process `pid` has it mapped, and as the file has it.
fn first_bytes(pid: u32) -> (Vec<u8>, Vec<u8>) {
    let program = &fixtures().many;
    let listed = Xtrace::spawn(args!["list", "symbols", program, "glob_fn_*"]).wait();
    listed.assert_success();
    let offsets: BTreeMap<String, u64> = listed
        .stdout
        .lines()
        .skip(1)
        .map(|row| {
            let columns: Vec<&str> = row.split_whitespace().collect();
            let offset = u64::from_str_radix(columns[0].trim_start_matches("0x"), 16).expect("hex offset");
            (columns[columns.len() - 1].to_owned(), offset)
        })
        .filter(|(name, _)| name != "glob_fn_alias")
        .collect();
    assert_eq!(offsets.len(), 300, "{offsets:?}");
    // The executable mapping of the program: start address and file offset.
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).expect("reading the fixture's maps");
    let (start, end, file_offset) = maps
        .lines()
        .filter(|l| l.ends_with(program.to_str().expect("UTF-8 path")))
        .find_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let (start, end) = fields[0].split_once('-')?;
            let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
            fields[1]
                .contains('x')
                .then(|| (hex(start), hex(end), hex(fields[2])))
        })
        .expect("the fixture's executable mapping");
    let mem = fs::File::open(format!("/proc/{pid}/mem")).expect("opening the fixture's memory");
    let file = fs::File::open(program).expect("opening the fixture");
    let (mut mapped, mut on_disk) = (Vec::new(), Vec::new());
    for offset in offsets.values() {
        let address = start + offset - file_offset;
        assert!(address < end, "{offset:#x} is outside the executable mapping");
        let mut byte = [0u8];
        mem.read_exact_at(&mut byte, address)
            .expect("reading the fixture's code");
        mapped.push(byte[0]);
        file.read_exact_at(&mut byte, *offset)
            .expect("reading the fixture's file");
        on_disk.push(byte[0]);
    }
    (mapped, on_disk)
}

/// The int3 instruction a uprobe puts in place of the probed instruction's first byte.
const INT3: u8 = 0xcc;

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn perf_event_uprobes_are_removed_in_the_background_after_complete_outputs() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().many, &["rounds"]);
    fixture.wait_ready();
    let pid = fixture.pid();
    let (untraced, on_disk) = first_bytes(pid);
    assert_eq!(untraced, on_disk, "the fixture's code before xtrace");
    let before = Attachments::snapshot();
    let tmp = TempDir::new("teardown");
    let out = tmp.join("out");
    let mut xtrace = Xtrace::spawn_with_env(
        args!["-p", pid.to_string(), "-u", "glob_fn_*", "-o", &out],
        &[("XTRACE_UPROBE_ATTACH", "perf_event")],
    );
    xtrace.wait_attached();
    before.assert_attached_since();
    fixture.send("go");
    assert_eq!(fixture.next_line(), "done");

    let stopped = Instant::now();
    let stopped_at = std::time::SystemTime::now();
    xtrace.signal(libc::SIGINT);
    xtrace.wait_exit();
    let took = stopped.elapsed();
    // Read at once: the helper has just begun removing the uprobes, return probes last.
    let (traced, _) = first_bytes(pid);
    let finished = xtrace.wait();
    finished.assert_success();
    // Complete outputs, with exactly the round that ran while recording.
    let outputs = Outputs::read(&out);
    // Within a second, whatever the number of uprobes: stopping the programs, and, once the
    // outputs are written, handing the uprobes over and exiting. (Writing the outputs is not
    // counted: it takes 3 s for a debug build in a guest under software emulation.)
    let written = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().modified().unwrap())
        .max()
        .expect("files written");
    let exited_after_outputs = took.saturating_sub(written.duration_since(stopped_at).unwrap_or_default());
    let stopping = Duration::from_nanos(u64_field(&outputs.summary, "detach_ns"));
    let shown = format!("exited {took:?} after SIGINT; stderr: {:?}", finished.stderr);
    assert!(
        stopping < Duration::from_secs(1),
        "stopping took {stopping:?}; {shown}"
    );
    assert!(
        exited_after_outputs < Duration::from_secs(1),
        "exited {exited_after_outputs:?} after the outputs were written; {shown}"
    );
    assert_eq!(outputs.summary["attach_mechanism"], "perf_event");
    assert_eq!(u64_field(&outputs.summary, "uprobes"), 600);
    assert_eq!(outputs.lost_events(), 0);
    for k in 0..300 {
        let name = format!("glob_fn_{k:03}");
        assert_eq!(outputs.probe_count(&name), k % 5 + 1, "{name}");
    }
    assert_eq!(outputs.spans().len(), 900);
    assert!(
        !fs::read_dir(&out)
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().ends_with(".partial")),
        "a file was left unfinished"
    );

    // The uprobes are still in the process, held by the helper, and their programs return at
    // once: a call of glob_fn_299 (whose uprobes the helper removes among the last) reaches its
    // entry and return programs, which count it as after the stop and do nothing else.
    let helper = finished
        .background_helper()
        .expect("a helper removes the uprobes");
    assert!(
        finished.stderr.contains(&format!(
            "xtrace: removing 600 uprobes in the background (pid {helper})"
        )),
        "{:?}",
        finished.stderr
    );
    assert_eq!(
        fs::read_to_string(format!("/proc/{helper}/comm"))
            .expect("the helper runs")
            .trim(),
        "xtrace-detach"
    );
    assert!(
        traced.iter().all(|b| *b == INT3),
        "a uprobe at every function: {traced:x?}"
    );
    assert_eq!(counter_of_held_programs(helper, AFTER_STOP), 0);
    fixture.send("last");
    assert_eq!(fixture.next_line(), "done");
    assert_eq!(counter_of_held_programs(helper, AFTER_STOP), 2);

    finished.wait_background_removal(REMOVAL_TIMEOUT);
    before.assert_none_left();
    let (after, _) = first_bytes(pid);
    assert_eq!(after, on_disk, "the fixture's code after the helper ended");
    assert!(fixture.is_running());
}
