//! The release `cargo xtask dist` writes, tested as a production host would get it: the tarball
//! (env `XTRACE_DIST`) unpacked into an empty directory, its xtrace static and working, its tool
//! library needing no glibc newer than the baseline (env `XTRACE_DIST_GLIBC`), and the .deb (env
//! `XTRACE_DEB`) holding the same files where Debian keeps them. A plain test run has no release,
//! so these tests are ignored there; `cargo xtask dist` runs them with `--ignored`, as root.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use object::{
    elf,
    read::elf::{Dyn as _, FileHeader as _, ProgramHeader as _, SectionHeader as _},
    Endianness,
};
use xtrace_tests::{args, bpf::Attachments, fixtures::fixtures, output::Outputs, TempDir};

/// The file named by env `var`, which `cargo xtask dist` sets.
fn release_file(var: &str) -> PathBuf {
    let path = PathBuf::from(
        std::env::var_os(var)
            .unwrap_or_else(|| panic!("{var} is not set: `cargo xtask dist` runs this test")),
    );
    assert!(path.is_file(), "{var}={} is not a file", path.display());
    path
}

/// `xtrace-VERSION-x86_64-linux`, the tarball's only top directory.
fn release_name() -> String {
    format!("xtrace-{}-x86_64-linux", env!("CARGO_PKG_VERSION"))
}

/// The tarball unpacked into `tmp`, which held nothing before; returns its top directory.
fn unpack(tmp: &TempDir) -> PathBuf {
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    run_ok(
        Command::new("tar")
            .arg("-xzf")
            .arg(release_file("XTRACE_DIST"))
            .arg("-C")
            .arg(tmp.path()),
    );
    let entries: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(entries, [release_name()], "the tarball has one top directory");
    tmp.join(&release_name())
}

/// Runs `cmd`, expects exit 0, returns its stdout.
fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The file names of docs/reference/`dir`, sorted.
fn reference(dir: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/reference")
        .join(dir);
    let mut names: Vec<String> = std::fs::read_dir(path)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
#[ignore = "needs the release: `cargo xtask dist` runs it"]
fn tarball_holds_xtrace_the_tool_library_pages_completions_and_licences() {
    let listing = run_ok(Command::new("tar").arg("-tzf").arg(release_file("XTRACE_DIST")));
    let mut files: Vec<&str> = listing.lines().filter(|l| !l.ends_with('/')).collect();
    files.sort_unstable();
    let top = release_name();
    let mut expected: Vec<String> = ["xtrace", "libxtrace_tool.so", "README.md", "CHANGELOG.md"]
        .iter()
        .chain(&["LICENSE-MIT", "LICENSE-APACHE"])
        .map(|f| format!("{top}/{f}"))
        .collect();
    expected.extend(reference("man").iter().map(|f| format!("{top}/man/man1/{f}")));
    expected.extend(
        reference("completions")
            .iter()
            .map(|f| format!("{top}/completions/{f}")),
    );
    expected.sort_unstable();
    assert_eq!(files, expected);
    assert!(reference("man").contains(&"xtrace-record.1".to_string()));
}

/// A static binary has no program interpreter (PT_INTERP) and needs no shared library.
#[test]
#[ignore = "needs the release: `cargo xtask dist` runs it"]
fn release_xtrace_is_statically_linked() {
    let tmp = TempDir::new("dist-static");
    let data = std::fs::read(unpack(&tmp).join("xtrace")).unwrap();
    let header = elf::FileHeader64::<Endianness>::parse(&*data).unwrap();
    let endian = header.endian().unwrap();
    assert_eq!(header.e_machine(endian), elf::EM_X86_64);
    let segments = header.program_headers(endian, &*data).unwrap();
    assert!(
        segments.iter().all(|p| p.p_type(endian) != elf::PT_INTERP),
        "xtrace has a PT_INTERP"
    );
    assert_eq!(
        needed(&data),
        Vec::<String>::new(),
        "xtrace needs shared libraries"
    );
}

/// The DT_NEEDED entries of an ELF file.
fn needed(data: &[u8]) -> Vec<String> {
    let header = elf::FileHeader64::<Endianness>::parse(data).unwrap();
    let endian = header.endian().unwrap();
    let sections = header.sections(endian, data).unwrap();
    let Some((dynamic, link)) = sections.dynamic(endian, data).unwrap() else {
        return Vec::new();
    };
    let strings = sections.strings(endian, data, link).unwrap();
    dynamic
        .iter()
        .filter(|d| d.tag32(endian) == Some(elf::DT_NEEDED))
        .map(|d| String::from_utf8_lossy(d.string(endian, strings).unwrap()).into_owned())
        .collect()
}

/// `(major, minor)` of a `GLIBC_2.17` version name.
fn glibc_version(name: &str) -> Option<(u32, u32)> {
    let (major, minor) = name.strip_prefix("GLIBC_")?.split_once('.')?;
    let minor = minor.split('.').next()?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// Every version the tool library needs of glibc, from its .gnu.version_r, is at most the
/// release's baseline, and it needs no library but glibc's own.
#[test]
#[ignore = "needs the release: `cargo xtask dist` runs it"]
fn tool_library_needs_no_glibc_newer_than_the_baseline() {
    let baseline = std::env::var("XTRACE_DIST_GLIBC").expect("XTRACE_DIST_GLIBC is set by cargo xtask dist");
    let baseline = glibc_version(&format!("GLIBC_{baseline}")).expect("XTRACE_DIST_GLIBC is MAJOR.MINOR");
    let tmp = TempDir::new("dist-glibc");
    let data = std::fs::read(unpack(&tmp).join("libxtrace_tool.so")).unwrap();
    let header = elf::FileHeader64::<Endianness>::parse(&*data).unwrap();
    let endian = header.endian().unwrap();
    let sections = header.sections(endian, &*data).unwrap();
    let (mut needs, link) = sections
        .gnu_verneed(endian, &*data)
        .unwrap()
        .expect("a .gnu.version_r");
    let strings = sections.strings(endian, &*data, link).unwrap();
    let mut versions = Vec::new();
    while let Some((need, mut aux)) = needs.next().unwrap() {
        let file = String::from_utf8_lossy(need.file(endian, strings).unwrap()).into_owned();
        while let Some(aux) = aux.next().unwrap() {
            versions.push((
                file.clone(),
                String::from_utf8_lossy(aux.name(endian, strings).unwrap()).into_owned(),
            ));
        }
    }
    let newest = versions
        .iter()
        .filter_map(|(_, v)| glibc_version(v))
        .max()
        .expect("GLIBC_ versions");
    assert!(
        newest <= baseline,
        "the tool library needs glibc {newest:?}, over {baseline:?}: {versions:?}"
    );
    assert!(newest >= (2, 2), "{versions:?}");
    let glibc = [
        "libc.so.6",
        "libm.so.6",
        "libdl.so.2",
        "libpthread.so.0",
        "librt.so.1",
        "ld-linux-x86-64.so.2",
    ];
    for lib in needed(&data) {
        assert!(
            glibc.contains(&lib.as_str()),
            "the tool library needs {lib}, which is not glibc's"
        );
    }
}

/// The kernel raises a USDT semaphore through the first writable mapping of its file page: a page
/// the RELRO segment shares would be made read-only under it (see xtrace/tool/build.rs).
#[test]
#[ignore = "needs the release: `cargo xtask dist` runs it"]
fn tool_library_semaphores_share_no_page_with_relro() {
    let tmp = TempDir::new("dist-relro");
    let data = std::fs::read(unpack(&tmp).join("libxtrace_tool.so")).unwrap();
    let header = elf::FileHeader64::<Endianness>::parse(&*data).unwrap();
    let endian = header.endian().unwrap();
    let sections = header.sections(endian, &*data).unwrap();
    let (_, probes) = sections
        .section_by_name(endian, b".probes")
        .expect("a .probes section");
    let first = probes.sh_offset(endian) / 4096;
    let last = (probes.sh_offset(endian) + probes.sh_size(endian) - 1) / 4096;
    let segments = header.program_headers(endian, &*data).unwrap();
    let relro = segments
        .iter()
        .find(|p| p.p_type(endian) == elf::PT_GNU_RELRO)
        .expect("a PT_GNU_RELRO segment");
    let (start, size) = (relro.p_offset(endian), relro.p_filesz(endian).max(1));
    let relro_pages = start / 4096..=(start + size - 1) / 4096;
    assert!(
        !relro_pages.contains(&first) && !relro_pages.contains(&last),
        ".probes on file pages {first}..={last}, RELRO on {relro_pages:?}"
    );
}

/// From a directory holding nothing but the release: `--version`, `check`, and a capture of the
/// `profile` fixture with CPU sampling that counts samples and leaves nothing attached.
#[test]
#[ignore = "needs the release: `cargo xtask dist` runs it"]
fn unpacked_xtrace_runs_version_check_and_a_capture() {
    assert_root();
    let tmp = TempDir::new("dist-run");
    let xtrace = unpack(&tmp).join("xtrace");
    let version = run_ok(Command::new(&xtrace).arg("--version"));
    assert!(
        version.starts_with(&format!("xtrace {} (", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    run_ok(Command::new(&xtrace).arg("check"));
    let out = TempDir::new("dist-capture");
    let before = Attachments::snapshot();
    run_ok(
        Command::new(&xtrace)
            .args(args!["-d", "0.5", "-F", "99", "-o", out.join("out"), "--"])
            .args(args![&fixtures().profile, "split", "300"]),
    );
    before.assert_none_left();
    let outputs = Outputs::read_profiled(&out.join("out"));
    let samples = outputs.summary["samples"].as_u64().unwrap();
    assert!(samples > 0, "{}", outputs.summary);
}

fn assert_root() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "the release's run test loads BPF programs: run `cargo xtask dist` as root"
    );
}

/// The .deb's files, its control fields, and its xtrace found through /usr/bin, which finds the
/// tool library beside its resolved path (the library's variables a `--nvtx` command gets).
#[test]
#[ignore = "needs the release: `cargo xtask dist` runs it"]
fn deb_installs_xtrace_the_tool_library_pages_and_completions() {
    let deb = release_file("XTRACE_DEB");
    let fields = run_ok(Command::new("dpkg-deb").arg("--field").arg(&deb).args([
        "Package",
        "Version",
        "Architecture",
    ]));
    assert_eq!(
        fields,
        format!(
            "Package: xtrace\nVersion: {}\nArchitecture: amd64\n",
            env!("CARGO_PKG_VERSION")
        )
    );
    let root = TempDir::new("dist-deb");
    run_ok(
        Command::new("dpkg-deb")
            .arg("--extract")
            .arg(&deb)
            .arg(root.path()),
    );
    let mut expected = vec![
        "usr/lib/xtrace/xtrace".to_string(),
        "usr/lib/xtrace/libxtrace_tool.so".into(),
        "usr/share/bash-completion/completions/xtrace".into(),
        "usr/share/zsh/vendor-completions/_xtrace".into(),
        "usr/share/fish/vendor_completions.d/xtrace.fish".into(),
        "usr/share/doc/xtrace/README.md".into(),
        "usr/share/doc/xtrace/changelog.gz".into(),
        "usr/share/doc/xtrace/copyright".into(),
    ];
    expected.extend(
        reference("man")
            .iter()
            .map(|page| format!("usr/share/man/man1/{page}.gz")),
    );
    for file in &expected {
        assert!(root.join(file).is_file(), "the .deb has no {file}");
    }
    let files = run_ok(Command::new("find").arg(root.path()).args(["-type", "f"]));
    assert_eq!(files.lines().count(), expected.len(), "{files}");
    let bin = root.join("usr/bin/xtrace");
    assert_eq!(
        std::fs::read_link(&bin).unwrap(),
        Path::new("../lib/xtrace/xtrace")
    );
    let version = run_ok(Command::new(&bin).arg("--version"));
    assert!(
        version.starts_with(&format!("xtrace {} (", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    assert_root();
    let out = TempDir::new("dist-deb-out");
    let printed = run_ok(
        Command::new(&bin)
            .args(args!["--nvtx", "-o", out.join("out"), "--", "sh", "-c"])
            .arg("echo \"$NVTX_INJECTION64_PATH\""),
    );
    let tool = std::fs::canonicalize(root.join("usr/lib/xtrace/libxtrace_tool.so")).unwrap();
    assert!(printed.lines().any(|l| Path::new(l) == tool), "{printed}");
}
