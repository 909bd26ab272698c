//! Python files are named by their module path: one package installed in two virtualenvs gives
//! the same frame names in both captures (so `report` and `diff` pair its functions), and two
//! modules of one file name stay apart. Runs on Debian's python3.11.

use std::path::{Path, PathBuf};

use xtrace_tests::{args, output::Outputs, require_bpf, run::Xtrace, TempDir};

const PYTHON: &str = "/usr/bin/python3.11";

/// A module with a busy `hot()`, line 4, run for `deadline` seconds of the monotonic clock.
const HOT: &str = "import time\n\n\ndef hot(deadline):\n    n = 0\n    while time.monotonic() < deadline:\n        n += 1\n    return n\n";

/// `pkg.work.run(seconds)`: hot() of `pkg/work.py` and of `pkg/sub/work.py` in turn, 10 ms each.
const RUN: &str = "\n\ndef run(seconds):\n    from pkg.sub import work as inner\n    end = time.monotonic() + seconds\n    while time.monotonic() < end:\n        hot(min(end, time.monotonic() + 0.01))\n        inner.hot(min(end, time.monotonic() + 0.01))\n";

/// Installs `pkg` (pkg/work.py, pkg/sub/work.py) in `ROOT/lib/python3.11/site-packages`, as a
/// virtualenv does; returns that directory.
fn install(root: &Path) -> PathBuf {
    let site = root.join("lib/python3.11/site-packages");
    std::fs::create_dir_all(site.join("pkg/sub")).unwrap();
    std::fs::write(site.join("pkg/__init__.py"), "").unwrap();
    std::fs::write(site.join("pkg/sub/__init__.py"), "").unwrap();
    std::fs::write(site.join("pkg/work.py"), format!("{HOT}{RUN}")).unwrap();
    std::fs::write(site.join("pkg/sub/work.py"), HOT).unwrap();
    site
}

/// The sorted Python frames of the package in `out`'s stacks, with their samples.
fn package_frames(out: &Outputs) -> Vec<String> {
    let mut frames: Vec<String> = out
        .folded()
        .iter()
        .flat_map(|(stack, _)| stack.split(';').map(str::to_string).collect::<Vec<_>>())
        .filter(|f| f.contains("(pkg/"))
        .collect();
    frames.sort();
    frames.dedup();
    frames
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_package_in_two_virtualenvs_is_named_alike_and_its_modules_apart() {
    if !require_bpf() || !Path::new(PYTHON).is_file() {
        return;
    }
    let tmp = TempDir::new("python-modules");
    let mut captures = Vec::new();
    for env in ["venv-a", "other/venv-b"] {
        let site = install(&tmp.join(env));
        let out = tmp.join(&format!("out-{}", captures.len()));
        let argv = args![
            "-F",
            "999",
            "-o",
            &out,
            "--",
            PYTHON,
            "-c",
            "import pkg.work; pkg.work.run(1.5)"
        ];
        let finished = Xtrace::spawn_with_env(argv, &[("PYTHONPATH", site.to_str().unwrap())]).wait();
        finished.assert_success();
        captures.push(Outputs::read_profiled(&out));
    }
    let (outer, inner) = ("hot (pkg/work.py:4)", "hot (pkg/sub/work.py:4)");
    for out in &captures {
        let (a, b) = (
            out.samples_where(|s| s.ends_with(outer) || s.contains(&format!("{outer};"))),
            out.samples_where(|s| s.contains(inner)),
        );
        assert!(a > 200 && b > 200, "{a} samples in {outer}, {b} in {inner}");
        let at_root = out.samples_where(|s| s.contains("site-packages") || s.contains("venv-"));
        assert_eq!(at_root, 0, "no frame names the install's directory");
    }
    let (a, b) = (package_frames(&captures[0]), package_frames(&captures[1]));
    assert_eq!(a, b, "the two installs' frames");
    assert!(a.contains(&"run (pkg/work.py:11)".to_string()), "{a:?}");
}
