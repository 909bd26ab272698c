//! Off-CPU time (`--off-cpu`): loads and attaches its programs: the scheduler's BTF tracepoints `sched_switch` and
//! `sched_waking`, and the raw tracepoint `sys_exit` that sends a long wait as its thread returns
//! from it; takes the kernel's table of added-up waits and their stacks, read when the capture
//! ends (and, with `--flight`, while it runs).
use aya::{
    maps::{HashMap, MapData, StackTraceMap},
    programs::BtfTracePoint,
    Btf, Ebpf,
};
use xtrace_common::offcpu::{OffCpuKey, OffCpuTotal};

use crate::{
    bpf,
    error::{Error, Result},
};

/// `--off-cpu`'s MIN when it is on by itself (`--pid` without probes), as when given bare: 1 ms.
pub const DEFAULT_MIN_NS: u64 = 1_000_000;

/// Why this kernel cannot measure off-CPU time, in one phrase; None when it can (or when the
/// kernel would not say: the attach then answers). The scheduler's BTF-typed tracepoints must
/// load.
pub fn unavailable() -> Option<String> {
    let btf = crate::bpf::btf::KernelBtf::shared().ok();
    match crate::bpf::features::btf_tracepoints(btf.as_deref()) {
        crate::bpf::features::Answer::No(why) => Some(why),
        _ => None,
    }
}

/// Attaches the off-CPU programs of the loaded object, typed by `btf`, the kernel's BTF as aya
/// parsed it (parsed here when not given).
pub fn attach(ebpf: &mut Ebpf, btf: Option<bpf::loader::TypesBtf>) -> Result<()> {
    let btf = btf
        .unwrap_or_else(Btf::from_sys_fs)
        .map_err(|e| Error::io("/sys/kernel/btf/vmlinux", std::io::Error::other(e)))?;
    // The wake-ups first: every wait the switches see begin then has its wake-up seen.
    for (program, tracepoint) in [
        ("off_cpu_waking", "sched_waking"),
        ("off_cpu_switch", "sched_switch"),
    ] {
        let hook: &mut BtfTracePoint = bpf::program_mut(ebpf, program)?;
        hook.load(tracepoint, &btf).map_err(|source| Error::Attach {
            what: format!("loading {program}"),
            source,
        })?;
        hook.attach().map_err(|source| Error::Attach {
            what: format!("{program} to BTF tracepoint {tracepoint}"),
            source,
        })?;
    }
    bpf::attach_raw_tracepoint(ebpf, "off_cpu_return", "sys_exit")
}

/// Detaches and unloads whichever off-CPU programs did attach, for a capture that goes on
/// without off-CPU time after [`attach`] failed.
pub fn detach(ebpf: &mut Ebpf) {
    for name in ["off_cpu_switch", "off_cpu_waking"] {
        if let Ok(Err(e)) = bpf::program_mut::<BtfTracePoint>(ebpf, name).map(|hook| hook.unload()) {
            log::debug!("unloading {name}: {e}");
        }
    }
    let hook = bpf::program_mut::<aya::programs::RawTracePoint>(ebpf, "off_cpu_return");
    if let Ok(Err(e)) = hook.map(|hook| hook.unload()) {
        log::debug!("unloading off_cpu_return: {e}");
    }
}

/// The kernel's added-up waits and the stacks they name, taken out of the object so they can be
/// read after the programs are detached.
pub struct Tables {
    totals: HashMap<MapData, OffCpuKey, OffCpuTotal>,
    stacks: StackTraceMap<MapData>,
}

impl Tables {
    pub fn take(ebpf: &mut Ebpf) -> Result<Self> {
        let map_err = |name| move |source| Error::Map { name, source };
        Ok(Tables {
            totals: HashMap::try_from(bpf::take_map(ebpf, "OFF_CPU_TOTALS")?)
                .map_err(map_err("OFF_CPU_TOTALS"))?,
            stacks: StackTraceMap::try_from(bpf::take_map(ebpf, "OFF_CPU_STACKS")?)
                .map_err(map_err("OFF_CPU_STACKS"))?,
        })
    }

    /// Every added-up wait with its user stack's addresses, innermost first (empty when the
    /// stack was not walked or is gone).
    pub fn read(&self) -> Vec<(OffCpuKey, OffCpuTotal, Vec<u64>)> {
        self.totals()
            .into_iter()
            .map(|(key, total)| {
                let user = self.stack(key.user_stack);
                (key, total, user)
            })
            .collect()
    }

    /// Every added-up wait, without its stack: while the programs run, what is read once a
    /// second. One batch read (one system call for the whole table), else key by key.
    pub fn totals(&self) -> Vec<(OffCpuKey, OffCpuTotal)> {
        let map = aya::maps::IterableMap::map(&self.totals);
        let read = map
            .info()
            .map_err(std::io::Error::other)
            .and_then(|info| bpf::batch::hash_entries(map, info.max_entries()));
        match read {
            Ok(entries) => entries,
            Err(e) => {
                log::debug!("reading OFF_CPU_TOTALS by batch: {e}; reading it key by key");
                self.totals.iter().filter_map(|entry| entry.ok()).collect()
            }
        }
    }

    /// The frame-pointer user stack `id` of the kernel's stack table, innermost first; empty for
    /// a negative id (no stack) or one the table no longer holds.
    pub fn stack(&self, id: i32) -> Vec<u64> {
        u32::try_from(id)
            .ok()
            .and_then(|id| self.stacks.get(&id, 0).ok())
            .map(|trace| trace.frames().iter().map(|f| f.ip).collect())
            .unwrap_or_default()
    }
}
