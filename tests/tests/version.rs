//! `xtrace --version` names the package version and the commit the binary was built from (no
//! root needed).

use xtrace_tests::xtrace_bin;

#[test]
fn version_names_the_commit_it_was_built_from() {
    let out = std::process::Command::new(xtrace_bin())
        .arg("--version")
        .output()
        .expect("running xtrace --version");
    assert!(out.status.success(), "{out:?}");
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("running git");
    let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
    assert_eq!(head.len(), 12, "not a git checkout: {head:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("xtrace {} ({head})\n", env!("CARGO_PKG_VERSION"))
    );
}
