//! `cargo xtask setup`: makes a fresh Debian 12 machine able to build and test xtrace, idempotently.
//! Owns the checks (cheap when everything is present) and the installs: Debian packages, the
//! `nightly` toolchain with rust-src, bpf-linker 0.10.0, and what `dist` builds the release with
//! (the musl target, zig and cargo-zigbuild). Other subcommands call it first.
use std::{
    path::Path,
    process::{Command, Stdio},
};

use anyhow::{bail, Result};

use crate::util::{self, cargo_bin_dir, display, is_root, prepend_to_path, stdout_of};

/// Debian packages the fixtures and tests need: cc, c++, sys/sdt.h, bpftool, setpriv, Python
/// with venv for the range tests' third-party clients, the readers the export tests open
/// xtrace's files with (`go tool pprof`, `callgrind_annotate`), libc's debug file, whose
/// local functions tests trace by name (`__pthread_disable_asynccancel`), and c++filt (binutils)
/// with libLLVM 14, whose C++ names the demangling is compared with c++filt's on, and Chromium
/// with its chromedriver, in which the live view's page is tested (tests/tools/live_page.py), and
/// Open MPI, whose `mpirun` starts the MPI tests' ranks.
const PACKAGES: &[&str] = &[
    "gcc",
    "g++",
    "systemtap-sdt-dev",
    "bpftool",
    "util-linux",
    "python3",
    "python3-venv",
    "golang-go",
    "valgrind",
    "libc6-dbg",
    "binutils",
    "libllvm14",
    // The live view's browser test.
    "chromium",
    "chromium-driver",
    // The store tests start a ClickHouse server of their own (18.16 on Debian 12).
    "clickhouse-server",
    // The MPI tests' launcher and compiler wrapper (Open MPI 4.1 on Debian 12).
    "openmpi-bin",
    "libopenmpi-dev",
    // The network test watches xtrace's connections with it.
    "strace",
    // musl-gcc: the release's static xtrace builds the store's bundled SQLite for musl with it.
    "musl-tools",
];

/// The PyPI packages the range tests drive (NVIDIA's NVTX3 bindings, Intel's ITT bindings, and
/// NVIDIA's NVTX v2 library `libnvToolsExt.so.1` as PyTorch 2.0 and 2.1 load it), and Perfetto's
/// trace protobuf definitions with the protobuf runtime that reads them (tests/tools/
/// perfetto_decode.py checks every trace.perfetto-trace the tests write), and selenium, which
/// drives Chromium through chromedriver for the live view's test (tests/tools/live_page.py), pinned,
/// installed into `<target>/xtrace-pyenv`.
pub const PYTHON_CLIENTS: &[&str] = &[
    "nvtx==0.2.17",
    "ittapi==1.2.2",
    "nvidia-nvtx-cu12==12.1.105",
    "perfetto==0.59.1",
    "protobuf==7.36.2",
    "selenium==4.50.0",
];
const BPF_LINKER_VERSION: &str = "0.10.0";

/// The release's tools (`cargo xtask dist`), pinned, installed into `<target>/xtrace-distenv`:
/// zig links the tool library against glibc 2.17's symbol versions, cargo-zigbuild drives it.
/// Both are PyPI wheels of prebuilt binaries, so nothing is compiled to install them.
pub const DIST_TOOLS: &[&str] = &["ziglang==0.15.2", "cargo-zigbuild==0.24.1"];
/// The target of the release's static binary.
pub const MUSL_TARGET: &str = "x86_64-unknown-linux-musl";

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Verbosity {
    /// One line per step (the `setup` subcommand).
    EveryStep,
    /// Only steps that installed something (build, test, demo).
    ChangesOnly,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Present,
    Installed,
}

/// A setup step: checks, installs when missing, says which it did.
type Step = fn() -> Result<State>;

pub fn run(verbosity: Verbosity) -> Result<()> {
    let steps: [(&str, Step); 10] = [
        (
            "Debian packages (gcc g++ systemtap-sdt-dev bpftool util-linux python3 python3-venv \
             golang-go valgrind libc6-dbg binutils libllvm14 chromium chromium-driver \
             clickhouse-server openmpi-bin libopenmpi-dev strace)",
            debian_packages,
        ),
        (
            "kernel matrix (qemu-system-x86 busybox-static linux-image-amd64)",
            kernel_matrix_packages,
        ),
        ("nightly toolchain", nightly_toolchain),
        ("rust-src for nightly", rust_src),
        ("clippy and rustfmt for stable", stable_lints),
        ("clippy for nightly", nightly_clippy),
        ("bpf-linker 0.10.0", bpf_linker),
        (
            "Python packages nvtx 0.2.17, ittapi 1.2.2, nvidia-nvtx-cu12 12.1.105, perfetto 0.59.1, \
             protobuf 7.36.2",
            python_clients,
        ),
        ("rust target x86_64-unknown-linux-musl (dist)", musl_target),
        (
            "release tools ziglang 0.15.2, cargo-zigbuild 0.24.1 (dist)",
            dist_tools,
        ),
    ];
    for (what, step) in steps {
        let state = step()?;
        if verbosity == Verbosity::EveryStep || state == State::Installed {
            let state = if state == State::Present {
                "present"
            } else {
                "installed"
            };
            println!("setup: {what}: {state}");
        }
    }
    Ok(())
}

/// Runs an install command; on failure, one message naming `what` and the command to try by hand.
fn install(what: &str, cmd: &mut Command) -> Result<()> {
    // `cargo install ...`, not `/root/.rustup/toolchains/.../bin/cargo install ...`.
    let program = Path::new(cmd.get_program())
        .file_name()
        .unwrap_or_default()
        .to_string_lossy();
    let args: Vec<_> = cmd.get_args().map(|arg| arg.to_string_lossy()).collect();
    let hint = format!("{program} {}", args.join(" "));
    match cmd.status() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => bail!("could not install {what} ({status}); try by hand: {hint}"),
        Err(err) => bail!("could not install {what} ({err}); try by hand: {hint}"),
    }
}

fn debian_packages() -> Result<State> {
    apt_packages(PACKAGES, &[])
}

/// What the kernel matrix boots (`cargo xtask test --kernel`, and CI): qemu, the static busybox
/// of the guest's initramfs, and Debian 12's stock kernel, whose package installs its modules in
/// /lib/modules (the guest loads virtio and 9p from there). Without recommends: qemu's pull in a
/// desktop's worth of packages.
const KERNEL_MATRIX_PACKAGES: &[&str] = &["qemu-system-x86", "busybox-static", "linux-image-amd64"];

fn kernel_matrix_packages() -> Result<State> {
    let state = apt_packages(KERNEL_MATRIX_PACKAGES, &["--no-install-recommends"])?;
    crate::kernel::debian_kernel()
        .map_err(|e| anyhow::anyhow!("{e} (linux-image-amd64 is installed: is this Debian 12?)"))?;
    Ok(state)
}

/// Installs the Debian packages of `wanted` that are missing, with `apt-get install -y FLAGS`.
fn apt_packages(wanted: &[&str], flags: &[&str]) -> Result<State> {
    if stdout_of(Command::new("dpkg-query").arg("--version")).is_none() {
        bail!("dpkg-query not found: this is not a Debian system; install the equivalents of {wanted:?}");
    }
    let installed = |pkg: &&str| {
        stdout_of(Command::new("dpkg-query").args(["-W", "-f=${Status}", pkg]))
            .is_some_and(|status| status.trim() == "install ok installed")
    };
    let missing: Vec<&str> = wanted.iter().filter(|pkg| !installed(pkg)).copied().collect();
    if missing.is_empty() {
        return Ok(State::Present);
    }
    let list = missing.join(" ");
    let hint = format!(
        "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y {}{list}",
        flags.iter().map(|f| format!("{f} ")).collect::<String>()
    );
    if !is_root() {
        bail!("Debian packages {list} are missing and installing them needs root; run as root: {hint}");
    }
    let apt = || {
        let mut cmd = Command::new("apt-get");
        cmd.env("DEBIAN_FRONTEND", "noninteractive").stdin(Stdio::null());
        cmd
    };
    let (mut update, mut add) = (apt(), apt());
    update.arg("update");
    add.args(["install", "-y"]).args(flags).args(&missing);
    for cmd in [&mut update, &mut add] {
        if !cmd.status().is_ok_and(|status| status.success()) {
            bail!(
                "could not install Debian packages {list} (`{}` failed); try by hand: {hint}",
                display(cmd)
            );
        }
    }
    let still: Vec<&str> = missing.iter().filter(|pkg| !installed(pkg)).copied().collect();
    if !still.is_empty() {
        bail!(
            "Debian packages {} are still missing after apt-get install; try by hand: {hint}",
            still.join(" ")
        );
    }
    Ok(State::Installed)
}

fn nightly_toolchain() -> Result<State> {
    let Some(list) = stdout_of(Command::new("rustup").args(["toolchain", "list"])) else {
        bail!("`rustup toolchain list` failed: rustup is needed; install it from https://rustup.rs");
    };
    // `nightly-<host>`, not a dated `nightly-2025-01-01-<host>`.
    let is_nightly = |line: &str| {
        line.strip_prefix("nightly-")
            .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_digit()))
    };
    if list.lines().any(is_nightly) {
        return Ok(State::Present);
    }
    let mut cmd = Command::new("rustup");
    cmd.args([
        "toolchain",
        "install",
        "nightly",
        "--profile",
        "minimal",
        "--component",
        "rust-src",
    ]);
    install("the nightly toolchain", &mut cmd)?;
    Ok(State::Installed)
}

fn rust_src() -> Result<State> {
    add_components("nightly", &["rust-src"])
}

/// Whether `toolchain` has `component` installed.
fn has_component(toolchain: &str, component: &str) -> bool {
    stdout_of(Command::new("rustup").args(["component", "list", "--toolchain", toolchain, "--installed"]))
        .is_some_and(|list| list.lines().any(|line| line.trim().starts_with(component)))
}

/// Adds the components of `toolchain` that are missing (the lint step needs them).
fn add_components(toolchain: &str, components: &[&str]) -> Result<State> {
    let missing: Vec<&str> = components
        .iter()
        .filter(|c| !has_component(toolchain, c))
        .copied()
        .collect();
    if missing.is_empty() {
        return Ok(State::Present);
    }
    let mut cmd = Command::new("rustup");
    cmd.args(["component", "add", "--toolchain", toolchain])
        .args(&missing);
    install(&format!("{} for {toolchain}", missing.join(" and ")), &mut cmd)?;
    Ok(State::Installed)
}

/// clippy and rustfmt of the toolchain that builds xtrace (`cargo xtask lint`).
fn stable_lints() -> Result<State> {
    add_components("stable", &["clippy", "rustfmt"])
}

/// clippy of nightly, which lints the kernel crate for its BPF target (`cargo xtask lint`).
fn nightly_clippy() -> Result<State> {
    add_components("nightly", &["clippy"])
}

/// Whether `bin --version` reports bpf-linker 0.10.0.
fn bpf_linker_ok(bin: &Path) -> bool {
    stdout_of(Command::new(bin).arg("--version"))
        .is_some_and(|out| out.split_whitespace().nth(1) == Some(BPF_LINKER_VERSION))
}

fn bpf_linker() -> Result<State> {
    if bpf_linker_ok(Path::new("bpf-linker")) {
        return Ok(State::Present);
    }
    let Some(bin_dir) = cargo_bin_dir() else {
        bail!("neither $CARGO_HOME nor $HOME is set, so bpf-linker cannot be located");
    };
    // Installed by cargo but not (first) on PATH: children find it once its directory leads PATH.
    let state = if bpf_linker_ok(&bin_dir.join("bpf-linker")) {
        State::Present
    } else {
        let mut cmd = util::cargo();
        cmd.args(["install", &format!("bpf-linker@{BPF_LINKER_VERSION}"), "--locked"]);
        install("bpf-linker 0.10.0", &mut cmd)?;
        if !bpf_linker_ok(&bin_dir.join("bpf-linker")) {
            bail!(
                "bpf-linker {BPF_LINKER_VERSION} is not in {} after installing; try by hand: {}",
                bin_dir.display(),
                display(&cmd)
            );
        }
        State::Installed
    };
    prepend_to_path(&bin_dir)?;
    Ok(state)
}

/// The venv of the range tests' Python clients: `<target>/xtrace-pyenv`.
fn python_clients() -> Result<State> {
    let ws = util::Workspace::locate()?;
    pip_venv(
        &ws.target.join("xtrace-pyenv"),
        PYTHON_CLIENTS,
        "the tests' Python packages",
    )
}

/// The venv of the release's tools: `<target>/xtrace-distenv` (see [`DIST_TOOLS`]).
fn dist_tools() -> Result<State> {
    let ws = util::Workspace::locate()?;
    pip_venv(&dist_venv(&ws), DIST_TOOLS, "the release's tools")
}

/// Where [`DIST_TOOLS`] are installed; its bin/ holds cargo-zigbuild and a python3 with zig.
pub fn dist_venv(ws: &util::Workspace) -> std::path::PathBuf {
    ws.target.join("xtrace-distenv")
}

/// The standard library of the musl target, which the release's static xtrace is built for.
fn musl_target() -> Result<State> {
    let installed = stdout_of(Command::new("rustup").args(["target", "list", "--installed"]))
        .is_some_and(|list| list.lines().any(|line| line.trim() == MUSL_TARGET));
    if installed {
        return Ok(State::Present);
    }
    let mut cmd = Command::new("rustup");
    cmd.args(["target", "add", MUSL_TARGET]);
    install(&format!("the rust target {MUSL_TARGET}"), &mut cmd)?;
    Ok(State::Installed)
}

/// A venv at `venv`, created with Debian's python3 and filled from PyPI when a pinned package of
/// `specs` is missing.
fn pip_venv(venv: &Path, specs: &[&str], what: &str) -> Result<State> {
    let python = venv.join("bin/python3");
    let has = |spec: &str| {
        let (name, version) = spec.split_once("==").unwrap_or((spec, ""));
        stdout_of(Command::new(&python).args(["-m", "pip", "show", name]))
            .is_some_and(|out| out.lines().any(|l| l == format!("Version: {version}")))
    };
    if specs.iter().all(|spec| has(spec)) {
        return Ok(State::Present);
    }
    if !python.exists() {
        let mut cmd = Command::new("/usr/bin/python3");
        cmd.args(["-m", "venv"]).arg(venv);
        install(&format!("a Python venv for {what} (python3-venv)"), &mut cmd)?;
    }
    let mut cmd = Command::new(&python);
    cmd.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
        .args(specs);
    install(&format!("{what} from PyPI (needs network access)"), &mut cmd)?;
    if let Some(missing) = specs.iter().find(|spec| !has(spec)) {
        bail!(
            "{missing} is still missing from {} after pip install; try by hand: {}",
            venv.display(),
            display(&cmd)
        );
    }
    Ok(State::Installed)
}
