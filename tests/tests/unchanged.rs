//! A tracer must never change what the traced program does. Every function of the C library
//! (some 2,200 probes: IFUNC implementations such as glibc's EVEX `strchrnul`, versioned symbols,
//! functions that start with vector instructions the kernel's uprobes would skip) traced over a
//! launched Python that formats, hashes and encodes: its output and exit status are the untraced
//! run's. Before entry probes kept off such vector instructions, the launched command never ran:
//! xtrace's own launcher, already traced, printed `%s: %s: %s` and exited 127.

use std::process::Command;

use xtrace_tests::{args, bpf::Attachments, require_bpf, run::Xtrace, TempDir};

const CODE: &str = "import json, decimal, hashlib, zlib, math\n\
print('%s=%d %5.2f' % ('k', 42, math.exp(1.5)))\n\
print(json.dumps({'a': [1, 2.5, 'x'], 'b': None}, sort_keys=True))\n\
print(decimal.Decimal('1.1') * 3, hashlib.sha256(b'abc').hexdigest())\n\
print(len(zlib.compress(b'xtrace' * 1000)), ','.join(sorted('traced')))";

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn tracing_all_of_libc_leaves_a_programs_output_unchanged() {
    if !require_bpf() {
        return;
    }
    let untraced = Command::new("python3")
        .args(["-c", CODE])
        .output()
        .expect("running python3");
    assert!(untraced.status.success(), "{untraced:?}");
    let expected = String::from_utf8(untraced.stdout).expect("UTF-8 output");
    assert_eq!(expected.lines().count(), 4, "{expected}");

    let tmp = TempDir::new("unchanged-libc");
    let out = tmp.join("out");
    let before = Attachments::snapshot();
    let finished = Xtrace::spawn(args![
        "-q", "-u", "libc:*", "-o", &out, "--", "python3", "-c", CODE
    ])
    .wait();
    finished.assert_success();
    before.assert_none_left();
    assert_eq!(finished.stdout, expected);
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).expect("summary.json"))
            .expect("summary.json is JSON");
    assert_eq!(summary["command"]["exit_code"], 0);
    // The string functions the output went through were traced, not just attached.
    let count = |name: &str| {
        summary["probes"]
            .as_array()
            .expect("probes")
            .iter()
            .find(|p| p["name"] == name)
            .and_then(|p| p["count"].as_u64())
            .unwrap_or_else(|| panic!("no probe {name}"))
    };
    for name in ["strlen", "memcpy", "strchrnul", "malloc"] {
        assert!(count(name) > 0, "{name} was called and traced");
    }
}
