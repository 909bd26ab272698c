//! Booting the guest: an initramfs of busybox and the kernel's virtio and 9p modules mounts the
//! host's root read-only over 9p and hands over to guest-init.sh; qemu runs it with KVM when a
//! guest under KVM starts here, with TCG (software emulation) when not. The serial console is
//! read line by line, echoed, and kept for the report.
use std::{
    fmt,
    io::{BufRead, BufReader, Read, Write},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc::{self, Receiver, RecvTimeoutError},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use super::GuestKernel;
use crate::util::{self, BadInput};

/// The qemu the matrix runs.
pub const QEMU: &str = "qemu-system-x86_64";
/// The static busybox the initramfs runs (Debian package busybox-static).
const BUSYBOX: &str = "/bin/busybox";
/// How long a guest under KVM may take to print the kernel's banner before TCG is used.
const KVM_PROBE: Duration = Duration::from_secs(15);
/// How long the smoke set's guest run may take.
pub const GUEST_TIMEOUT: Duration = Duration::from_secs(20 * 60);

/// The initramfs's /init: load the modules, mount the host's root, switch to guest-init.sh.
const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox mount -t devtmpfs devtmpfs /dev
/bin/busybox mount -t proc proc /proc
for m in /mod/*.ko; do
    /bin/busybox insmod "$m" || echo "kmatrix: error: insmod $m failed"
done
if ! /bin/busybox mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=262144 \
        hostroot /newroot; then
    echo "kmatrix: error: the host's root did not mount over 9p"
    echo "kmatrix: done"
    /bin/busybox poweroff -f
fi
/bin/busybox umount /proc /dev
exec /bin/busybox switch_root /newroot "$kmatrix_dir/guest-init.sh"
"#;

/// How qemu runs the guest.
pub enum Accel {
    Kvm,
    /// Software emulation, and why not KVM.
    Tcg(String),
}

impl fmt::Display for Accel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Accel::Kvm => write!(f, "KVM"),
            Accel::Tcg(why) => write!(f, "TCG, software emulation: {why}"),
        }
    }
}

impl Accel {
    fn args(&self) -> &'static [&'static str] {
        match self {
            Accel::Kvm => &["-accel", "kvm", "-cpu", "host"],
            Accel::Tcg(_) => &["-accel", "tcg,thread=multi", "-cpu", "max"],
        }
    }
}

/// What a guest run printed.
pub struct Boot {
    pub accel: Accel,
    pub lines: Vec<String>,
    /// Why the run ended early: the guest's own `kmatrix: error:` line, or a timeout.
    pub error: Option<String>,
}

/// Fails with one line naming the package when qemu is not installed.
pub fn require_qemu() -> Result<()> {
    if util::stdout_of(Command::new(QEMU).arg("--version")).is_none() {
        return Err(BadInput(format!(
            "{QEMU} not found: install Debian's qemu-system-x86 (`cargo xtask setup` does, as root)"
        ))
        .into());
    }
    Ok(())
}

/// Kernel parameters of the guest beside the console's: the strictest setting a host may have
/// where it changes what xtrace can do, so that the smoke set shows xtrace needs no more (the host
/// suite runs with the defaults). `proc_mem.force_override=never` (Linux 6.12, and Debian 12's
/// 6.1): writes through /proc/PID/mem may not go into memory the process may not write itself,
/// as `--inject` must into a library's code; it writes with PTRACE_POKEDATA.
const KERNEL_PARAMETERS: &str = "proc_mem.force_override=never";

/// Boots `kernel` with the plan in `dir` and reads its console until it powers off, or for at most
/// `timeout`.
pub fn boot(kernel: &GuestKernel, dir: &Path, timeout: Duration) -> Result<Boot> {
    let initramfs = initramfs(kernel, dir)?;
    let accel = choose_accel(kernel);
    println!(
        "kernel matrix: booting {} under qemu with {accel}",
        kernel.release
    );
    let mut cmd = qemu(kernel, &accel);
    cmd.arg("-initrd")
        .arg(&initramfs)
        .args(["-m", "2048", "-smp", "2"])
        .arg("-append")
        .arg(format!(
            "console=ttyS0 quiet panic=-1 {KERNEL_PARAMETERS} kmatrix_dir={}",
            dir.display()
        ))
        .args([
            "-fsdev",
            "local,id=root,path=/,security_model=none,readonly=on,multidevs=remap",
        ])
        .args(["-device", "virtio-9p-pci,fsdev=root,mount_tag=hostroot"])
        .stderr(Stdio::inherit());
    let (mut child, lines) = spawn(&mut cmd)?;
    let log_path = dir.join("console.log");
    let mut log =
        std::fs::File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let deadline = Instant::now() + timeout;
    let (mut kept, mut error) = (Vec::new(), None);
    loop {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                println!("guest | {}", line.trim_end_matches('\r'));
                let _ = writeln!(log, "{line}");
                if let Some(why) = line.trim_end().strip_prefix("kmatrix: error: ") {
                    error.get_or_insert_with(|| why.to_owned());
                }
                kept.push(line);
            }
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                error = Some(format!("the guest did not finish in {} s", timeout.as_secs()));
                break;
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    if error.is_none() && !kept.iter().any(|l| l.trim_end() == "kmatrix: done") {
        error = Some("the guest stopped before its `kmatrix: done` line".into());
    }
    Ok(Boot {
        accel,
        lines: kept,
        error,
    })
}

/// qemu without display or network, console on stdout, exiting when the guest reboots or panics.
fn qemu(kernel: &GuestKernel, accel: &Accel) -> Command {
    let mut cmd = Command::new(QEMU);
    cmd.args(accel.args())
        .args(["-machine", "q35", "-display", "none", "-serial", "stdio"])
        .args(["-nic", "none", "-no-reboot", "-kernel"])
        .arg(&kernel.path)
        .stdin(Stdio::null());
    cmd
}

/// Starts `cmd` with stdout piped; its lines arrive on the receiver.
fn spawn(cmd: &mut Command) -> Result<(Child, Receiver<String>)> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start `{}`", util::display(cmd)))?;
    let stdout = child.stdout.take().context("qemu's stdout is piped")?;
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = Vec::new();
        // The console is bytes, not always UTF-8 (the firmware's escape sequences).
        while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            if tx
                .send(String::from_utf8_lossy(&line).trim_end_matches('\n').to_owned())
                .is_err()
            {
                break;
            }
            line.clear();
        }
    });
    Ok((child, rx))
}

/// KVM when /dev/kvm opens and a guest under it prints the kernel's banner in time; else TCG.
fn choose_accel(kernel: &GuestKernel) -> Accel {
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        return Accel::Tcg(format!("/dev/kvm: {e}"));
    }
    let mut cmd = qemu(kernel, &Accel::Kvm);
    cmd.args(["-m", "256", "-append", "console=ttyS0 panic=-1"])
        .stderr(Stdio::piped());
    let Ok((mut child, lines)) = spawn(&mut cmd) else {
        return Accel::Tcg("qemu did not start with KVM".into());
    };
    let deadline = Instant::now() + KVM_PROBE;
    let started = loop {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) if line.contains("Linux version") => break true,
            Ok(_) => {}
            Err(_) => break false,
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    if started {
        return Accel::Kvm;
    }
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.read_to_string(&mut stderr);
    }
    match stderr.lines().find(|l| !l.trim().is_empty()) {
        Some(line) => Accel::Tcg(format!("a guest under KVM failed here: {}", line.trim())),
        None => Accel::Tcg(format!(
            "a guest under KVM printed nothing in {} s here",
            KVM_PROBE.as_secs()
        )),
    }
}

/// `<dir>/initramfs-<release>.cpio`: busybox, the modules in load order, and [`INIT`].
fn initramfs(kernel: &GuestKernel, dir: &Path) -> Result<PathBuf> {
    let stage = dir.join(format!("initramfs-{}", kernel.release));
    let _ = std::fs::remove_dir_all(&stage);
    for sub in ["bin", "mod", "dev", "proc", "newroot"] {
        std::fs::create_dir_all(stage.join(sub)).with_context(|| format!("creating {}", stage.display()))?;
    }
    if !Path::new(BUSYBOX).is_file() {
        return Err(BadInput(format!(
            "{BUSYBOX} not found: install Debian's busybox-static (`cargo xtask setup` does, as root)"
        ))
        .into());
    }
    std::fs::copy(BUSYBOX, stage.join("bin/busybox")).context("copying busybox")?;
    for (n, module) in kernel.root_modules()?.iter().enumerate() {
        let name = module.file_name().context("a module path has a file name")?;
        let to = stage
            .join("mod")
            .join(format!("{n:02}-{}", name.to_string_lossy()));
        std::fs::copy(module, &to).with_context(|| format!("copying {}", module.display()))?;
    }
    std::fs::write(stage.join("init"), INIT)?;
    util::make_executable(&stage.join("init"))?;
    let cpio = dir.join(format!("initramfs-{}.cpio", kernel.release));
    let mut cmd = Command::new(BUSYBOX);
    cmd.args([
        "sh",
        "-c",
        "busybox find . | busybox cpio -o -H newc > \"$0\" 2>/dev/null",
    ])
    .arg(&cpio)
    .current_dir(&stage)
    .env("PATH", stage.join("bin"));
    util::run("packing the guest's initramfs", &mut cmd)?;
    if !cpio.metadata().is_ok_and(|m| m.len() > 0) {
        bail!("packing the guest's initramfs left {} empty", cpio.display());
    }
    Ok(cpio)
}
