//! Function spans: resolving `-u [TARGET:]SYMBOL` to files and offsets for each traced process, and
//! attaching the `span_exit` (uretprobe) and `span_enter` (uprobe) programs with the probe id as the
//! BPF cookie, scoped to the traced processes. Linux 5.15+ (uprobe cookies).
use std::{
    collections::{hash_map::Entry, HashMap},
    num::NonZeroU32,
    os::unix::fs::MetadataExt,
    path::Path,
};

use aya::{
    programs::{
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope},
        UProbe,
    },
    Ebpf,
};

use super::{
    elf::ElfSymbols,
    spec::{TargetSpec, UprobeSpec},
    ProbeInfo,
};
use crate::{
    error::{Error, Result},
    target::{library_from_cache, Process, TargetFile},
};

/// Where TARGETs are looked up: a running process, or a command about to be launched.
pub enum Scope<'a> {
    Process(&'a Process),
    Command(&'a Path),
}

impl Scope<'_> {
    fn resolve(&self, target: &TargetSpec) -> Result<TargetFile> {
        match (self, target) {
            (Scope::Process(p), TargetSpec::MainExecutable) => p.executable(),
            (Scope::Process(p), TargetSpec::Path(path)) => Ok(p.path(path)),
            (Scope::Process(p), TargetSpec::Library(name)) => p.library(name),
            (Scope::Command(program), TargetSpec::MainExecutable) => Ok(TargetFile {
                open: program.to_path_buf(),
                shown: program.to_path_buf(),
            }),
            (Scope::Command(_), TargetSpec::Path(path)) => Ok(TargetFile {
                open: path.clone(),
                shown: path.clone(),
            }),
            (Scope::Command(_), TargetSpec::Library(name)) => library_from_cache(name),
        }
    }
}

/// One kernel attachment: a probe at a file offset, for the process of scope `scope`.
#[derive(Clone, Debug)]
pub struct Attachment {
    pub probe_id: u32,
    pub file: TargetFile,
    pub offset: u64,
    pub scope: usize,
}

#[derive(Debug, Default)]
pub struct Plan {
    /// Indexed by probe id.
    pub probes: Vec<ProbeInfo>,
    pub attachments: Vec<Attachment>,
}

/// Resolves every spec in every scope; fails on the first spec that cannot be resolved, before
/// anything is attached.
pub fn plan(specs: &[UprobeSpec], scopes: &[Scope]) -> Result<Plan> {
    let mut plan = Plan::default();
    let mut elves: HashMap<(u64, u64), ElfSymbols> = HashMap::new();
    let mut ids: HashMap<(String, u64), u32> = HashMap::new();
    for spec in specs {
        for (scope_index, scope) in scopes.iter().enumerate() {
            let file = scope.resolve(&spec.target)?;
            let meta = std::fs::metadata(&file.open).map_err(|e| Error::Unreadable {
                path: file.shown.clone(),
                reason: e.to_string(),
            })?;
            let key = (meta.dev(), meta.ino());
            let symbols = match elves.entry(key) {
                Entry::Occupied(known) => known.into_mut(),
                Entry::Vacant(new) => new.insert(ElfSymbols::read(&file.open, &file.shown)?),
            };
            for (name, offset) in symbols.lookup(&spec.symbol)? {
                let shown = file.shown.display().to_string();
                let id = *ids.entry((shown.clone(), offset)).or_insert_with(|| {
                    plan.probes.push(ProbeInfo {
                        name,
                        kind: "uprobe",
                        target: shown,
                        offset,
                    });
                    (plan.probes.len() - 1) as u32
                });
                plan.attachments.push(Attachment {
                    probe_id: id,
                    file: file.clone(),
                    offset,
                    scope: scope_index,
                });
            }
        }
    }
    Ok(plan)
}

fn program<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut UProbe> {
    let missing = || {
        Error::io(
            format!("program {name}"),
            std::io::Error::other("missing from the object"),
        )
    };
    ebpf.program_mut(name)
        .ok_or_else(missing)?
        .try_into()
        .map_err(|source| Error::Attach {
            what: name.to_string(),
            source,
        })
}

/// Loads both programs and attaches every planned probe; `pids[scope]` is each scope's process.
/// Return probes go first so that no entry is ever left without its return. The thread-exit
/// tracepoint that keeps the per-thread map small is attached last.
pub fn attach(ebpf: &mut Ebpf, plan: &Plan, pids: &[u32]) -> Result<usize> {
    let mut attached = 0;
    for name in ["span_exit", "span_enter"] {
        let program = program(ebpf, name)?;
        program.load().map_err(|source| Error::Attach {
            what: format!("loading {name}"),
            source,
        })?;
        for a in &plan.attachments {
            let pid = NonZeroU32::new(pids[a.scope]).ok_or(Error::NoSuchProcess { pid: 0 })?;
            let point = UProbeAttachPoint {
                location: UProbeAttachLocation::AbsoluteOffset(a.offset),
                cookie: Some(u64::from(a.probe_id)),
            };
            program
                .attach(point, &a.file.open, UProbeScope::OneProcess(pid))
                .map_err(|source| Error::Attach {
                    what: format!(
                        "{name} to {}:{} in pid {pid}",
                        a.file.shown.display(),
                        plan.probes[a.probe_id as usize].name
                    ),
                    source,
                })?;
            attached += 1;
        }
    }
    let exit: &mut aya::programs::RawTracePoint = ebpf
        .program_mut("thread_exit")
        .ok_or_else(|| {
            Error::io(
                "program thread_exit",
                std::io::Error::other("missing from the object"),
            )
        })?
        .try_into()
        .map_err(|source| Error::Attach {
            what: "thread_exit".into(),
            source,
        })?;
    exit.load().map_err(|source| Error::Attach {
        what: "loading thread_exit".into(),
        source,
    })?;
    exit.attach("sched_process_exit")
        .map_err(|source| Error::Attach {
            what: "thread_exit to sched_process_exit".into(),
            source,
        })?;
    Ok(attached)
}

/// Detaches entry probes before return probes, so calls in flight still complete their spans and no
/// entry is pushed without a return probe to pop it.
pub fn detach(ebpf: &mut Ebpf) {
    for name in ["span_enter", "span_exit"] {
        if let Ok(program) = program(ebpf, name) {
            let _ = program.unload();
        }
    }
}
