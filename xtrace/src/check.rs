//! `xtrace check`: whether this host can record, item by item (kernel, BTF, the BPF features xtrace
//! uses, the settings that limit it, the capabilities held), each with what to do when it falls
//! short. The BPF items are asked of the kernel itself (see `bpf::features`).
use crate::{
    bpf::{
        btf::KernelBtf,
        features::{self, Answer},
    },
    privilege::{self, Capability},
    procfs::kernel_setting,
};

/// How one item stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// Recording cannot work until it is fixed.
    Missing,
    /// Recording works, without what the item gives.
    Limited,
    /// It could not be found out (the kernel was not asked, lacking a capability).
    Unknown,
}

impl Status {
    pub fn word(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Missing => "missing",
            Status::Limited => "limited",
            Status::Unknown => "unknown",
        }
    }
}

/// One line of the check: what, how it stands, and the detail or what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
}

/// The oldest kernel xtrace supports: the oldest that production hosts run (Ubuntu 22.04).
const OLDEST: (u32, u32) = (5, 15);

/// Every item, in the order they are shown.
pub fn items() -> Vec<Item> {
    let btf = KernelBtf::read();
    let caps = privilege::held();
    let mut items = vec![kernel(), btf_item(&btf)];
    let btf = btf.ok();
    items.extend([
        feature("bpf programs", features::uprobe_programs(), Status::Missing, "the kernel loads uprobe programs", "use a kernel built with CONFIG_BPF_SYSCALL and CONFIG_UPROBE_EVENTS"),
        feature("ring buffer", features::ring_buffer(), Status::Missing, "BPF ring buffers carry events to xtrace", "use Linux 5.8 or later"),
        feature("uprobe_multi", features::uprobe_multi(), Status::Limited, "uprobes attach as uprobe_multi links: one attaches many functions, and detaches them at once", "uprobes attach as perf-event uprobes, one per function: removing them takes ~0.1 s each, and finishes in the background after xtrace exits (Linux 6.6 has uprobe_multi)"),
        feature("btf tracepoints", features::btf_tracepoints(btf.as_ref()), Status::Limited, "typed tracepoints (sched_switch) load", "scheduler tracepoints are read untyped"),
        feature("sleepable uprobes", features::sleepable_uprobes(), Status::Limited, "uprobe programs may fault in pages", "a string argument on a page the process has not touched yet cannot be read"),
        lockdown(),
        paranoid(),
        kernel_names(),
        capabilities(caps),
    ]);
    items.extend(optional_capabilities(caps));
    items
}

/// Whether recording can work: no item is missing.
pub fn can_record(items: &[Item]) -> bool {
    items.iter().all(|item| item.status != Status::Missing)
}

/// The items as aligned lines: NAME STATUS DETAIL.
pub fn table(items: &[Item]) -> String {
    let width = items.iter().map(|i| i.name.len()).max().unwrap_or(0);
    items
        .iter()
        .map(|i| format!("{:width$}  {:7}  {}\n", i.name, i.status.word(), i.detail))
        .collect()
}

fn kernel() -> Item {
    let release = release();
    let version = parse_version(&release);
    let (status, detail) = match version {
        Some(v) if v >= OLDEST => (Status::Ok, format!("Linux {release}")),
        Some(_) => (
            Status::Missing,
            format!("Linux {release}: xtrace needs 5.15 or later; upgrade the kernel"),
        ),
        None => (
            Status::Unknown,
            format!("cannot read the version from `{release}`"),
        ),
    };
    Item {
        name: "kernel",
        status,
        detail,
    }
}

/// The running kernel's release, as `uname -r` prints it.
fn release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|r| r.trim().to_string())
        .unwrap_or_default()
}

/// `6.1.0-18-amd64` → (6, 1).
fn parse_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

fn btf_item(btf: &std::io::Result<KernelBtf>) -> Item {
    let (status, detail) = match btf {
        Ok(_) => (Status::Ok, "/sys/kernel/btf/vmlinux".to_string()),
        Err(e) => (
            Status::Missing,
            format!("/sys/kernel/btf/vmlinux: {e}; use a kernel built with CONFIG_DEBUG_INFO_BTF=y"),
        ),
    };
    Item {
        name: "btf",
        status,
        detail,
    }
}

/// A kernel feature: `gives` when present; when absent, `short` is its status and `otherwise`
/// what follows or what to do.
fn feature(name: &'static str, answer: Answer, short: Status, gives: &str, otherwise: &str) -> Item {
    let (status, detail) = match answer {
        Answer::Yes => (Status::Ok, gives.to_string()),
        Answer::No(why) => (short, format!("the kernel refused it ({why}): {otherwise}")),
        Answer::NotPermitted => (
            Status::Unknown,
            "not asked: loading BPF needs CAP_BPF (see capabilities)".to_string(),
        ),
    };
    Item { name, status, detail }
}

/// Kernel lockdown: `confidentiality` refuses the BPF reads of kernel memory that xtrace's
/// programs make (the current task, kernel stacks).
fn lockdown() -> Item {
    let mode = std::fs::read_to_string("/sys/kernel/security/lockdown").ok();
    let selected = mode.as_deref().and_then(|m| {
        let start = m.find('[')? + 1;
        Some(m[start..start + m[start..].find(']')?].to_string())
    });
    let (status, detail) = match selected.as_deref() {
        None => (Status::Ok, "not enabled".to_string()),
        Some("confidentiality") => (
            Status::Missing,
            "confidentiality: the kernel refuses BPF reads of kernel memory; boot with \
             lockdown=integrity or none"
                .to_string(),
        ),
        Some(mode) => (Status::Ok, mode.to_string()),
    };
    Item {
        name: "lockdown",
        status,
        detail,
    }
}

fn paranoid() -> Item {
    let value = kernel_setting("perf_event_paranoid").unwrap_or_else(|| "?".into());
    Item {
        name: "perf_event_paranoid",
        status: Status::Ok,
        detail: format!("{value} (CAP_PERFMON samples whatever it is)"),
    }
}

/// Whether kernel frames in CPU samples will be named (kallsyms shows this user its addresses).
fn kernel_names() -> Item {
    let restrict = kernel_setting("kptr_restrict").unwrap_or_else(|| "?".into());
    match crate::probes::sampler::kernel_names_hidden() {
        None => Item {
            name: "kptr_restrict",
            status: Status::Ok,
            detail: format!("{restrict}: kernel frames in CPU samples are named"),
        },
        Some(why) => Item {
            name: "kptr_restrict",
            status: Status::Limited,
            detail: why,
        },
    }
}

fn capabilities(held: u64) -> Item {
    let has = |cap: Capability| held & cap.bit() != 0;
    let (status, detail) = match privilege::missing(held) {
        None if has(Capability::SysAdmin) && !(has(Capability::Bpf) && has(Capability::Perfmon)) => (
            Status::Ok,
            "CAP_SYS_ADMIN (in place of CAP_BPF and CAP_PERFMON)".to_string(),
        ),
        None => (Status::Ok, "CAP_BPF and CAP_PERFMON".to_string()),
        Some(missing) => (
            Status::Missing,
            format!("missing {missing} (xtrace needs CAP_BPF and CAP_PERFMON, or root): run it with sudo"),
        ),
    };
    Item {
        name: "capabilities",
        status,
        detail,
    }
}

/// The capabilities that only some uses need, each with what it is for.
fn optional_capabilities(held: u64) -> Vec<Item> {
    [
        (
            Capability::SysPtrace,
            "CAP_SYS_PTRACE",
            "--pid of another user's process, and --inject",
        ),
        (
            Capability::Syslog,
            "CAP_SYSLOG",
            "kernel frame names when kernel.kptr_restrict is 1",
        ),
        (
            Capability::SysAdmin,
            "CAP_SYS_ADMIN",
            "--overhead, and libraries replaced on disk since a --pid process loaded them",
        ),
    ]
    .into_iter()
    .map(|(cap, name, what)| {
        let held = held & cap.bit() != 0;
        Item {
            name,
            status: if held { Status::Ok } else { Status::Limited },
            detail: if held {
                format!("held: {what}")
            } else {
                format!("not held: needed for {what}")
            },
        }
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_versions() {
        assert_eq!(parse_version("6.1.0-18-amd64"), Some((6, 1)));
        assert_eq!(parse_version("5.15.0-91-generic"), Some((5, 15)));
        assert_eq!(parse_version("6.18.44"), Some((6, 18)));
        assert_eq!(parse_version("garbage"), None);
        assert!(parse_version("5.14.0-362.el9.x86_64").unwrap() < OLDEST);
    }

    #[test]
    fn only_a_missing_item_stops_recording() {
        let item = |status| Item {
            name: "x",
            status,
            detail: String::new(),
        };
        assert!(can_record(&[
            item(Status::Ok),
            item(Status::Limited),
            item(Status::Unknown)
        ]));
        assert!(!can_record(&[item(Status::Ok), item(Status::Missing)]));
    }

    #[test]
    fn capabilities_name_what_is_missing() {
        let bpf = Capability::Bpf.bit();
        let perfmon = Capability::Perfmon.bit();
        assert_eq!(capabilities(bpf | perfmon).status, Status::Ok);
        let without_bpf = capabilities(perfmon);
        assert_eq!(without_bpf.status, Status::Missing);
        assert!(
            without_bpf.detail.starts_with("missing CAP_BPF ("),
            "{}",
            without_bpf.detail
        );
        assert_eq!(
            capabilities(Capability::SysAdmin.bit()).detail,
            "CAP_SYS_ADMIN (in place of CAP_BPF and CAP_PERFMON)"
        );
        let optional = optional_capabilities(Capability::Syslog.bit());
        let statuses: Vec<_> = optional.iter().map(|i| (i.name, i.status)).collect();
        assert_eq!(
            statuses,
            [
                ("CAP_SYS_PTRACE", Status::Limited),
                ("CAP_SYSLOG", Status::Ok),
                ("CAP_SYS_ADMIN", Status::Limited)
            ]
        );
    }
}
