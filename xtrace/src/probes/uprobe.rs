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
    spec::{ArgType, TargetSpec, UprobeSpec},
    ProbeInfo,
};
use crate::{
    bpf::uprobe_multi::{self, MultiLink, MultiProgram, MultiTarget},
    error::{Error, Result},
    pipeline::values::Capture,
    target::{library_from_cache, Process, TargetFile},
};

/// Where TARGETs are looked up: a running process, a command about to be launched, or the whole
/// system (`-a`: files by path or library name only).
pub enum Scope<'a> {
    Process(&'a Process),
    Command(&'a Path),
    SystemWide,
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
            (Scope::SystemWide, TargetSpec::MainExecutable) => Err(Error::Usage(
                "with -a/--system-wide every -u needs a TARGET (a path or library name), as in -u libc:malloc"
                    .into(),
            )),
            (Scope::Command(_) | Scope::SystemWide, TargetSpec::Path(path)) => Ok(TargetFile {
                open: path.clone(),
                shown: path.clone(),
            }),
            (Scope::Command(_) | Scope::SystemWide, TargetSpec::Library(name)) => {
                library_from_cache(name)
            }
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
    /// Warnings for the user (a stripped file, C++ exception tables), one line each.
    pub notices: Vec<String>,
}

/// Resolves every spec in every scope; fails on the first spec that cannot be resolved, or when
/// more than `max_probes` functions match, before anything is attached.
pub fn plan(specs: &[UprobeSpec], scopes: &[Scope], max_probes: usize) -> Result<Plan> {
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
                Entry::Vacant(new) => {
                    let symbols = ElfSymbols::read(&file.open, &file.shown)?;
                    if symbols.stripped {
                        plan.notices.push(format!(
                            "{} is stripped (no .symtab): only its exported .dynsym functions can be traced",
                            file.shown.display()
                        ));
                    }
                    if symbols.cxx_exceptions {
                        plan.notices.push(format!(
                            "{} throws C++ exceptions: one that unwinds through a traced function (thrown \
                             inside, caught outside) aborts the process, because return probes replace \
                             return addresses; trace functions that catch, not those thrown through",
                            file.shown.display()
                        ));
                    }
                    new.insert(symbols)
                }
            };
            for (name, offset) in symbols.lookup(&spec.symbol)? {
                let shown = file.shown.display().to_string();
                let id = *ids.entry((shown.clone(), offset)).or_insert_with(|| {
                    plan.probes.push(ProbeInfo {
                        name,
                        kind: "uprobe",
                        target: shown,
                        offset,
                        capture: Capture {
                            args: spec.args.clone(),
                            ret: spec.ret,
                        },
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
            if plan.probes.len() > max_probes {
                return Err(Error::TooManyProbes {
                    spec: spec.text.clone(),
                    max: max_probes,
                });
            }
        }
    }
    Ok(plan)
}

/// The file `spec` names in `scope` and its function symbols (what `xtrace list symbols` shows).
pub fn symbols_for(spec: &UprobeSpec, scope: &Scope) -> Result<(TargetFile, ElfSymbols)> {
    let file = scope.resolve(&spec.target)?;
    let symbols = ElfSymbols::read(&file.open, &file.shown)?;
    Ok((file, symbols))
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

/// How the span programs were attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    /// One uprobe_multi link per file, process and program (Linux 6.6+): detaching costs one
    /// grace period per link.
    UprobeMulti,
    /// One perf-event uprobe per offset, process and program (older kernels, or
    /// `XTRACE_UPROBE_ATTACH=perf_event`): detaching costs a grace period per uprobe.
    PerfEvent,
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::UprobeMulti => "uprobe_multi",
            Mechanism::PerfEvent => "perf_event",
        }
    }
}

/// The environment variable that forces perf-event uprobes (for kernels whose uprobe_multi
/// misbehaves, and for testing that path).
pub const ATTACH_ENV: &str = "XTRACE_UPROBE_ATTACH";

/// Attached span probes. Dropping it detaches entry probes before return probes, so calls in flight
/// still complete their spans and no entry is pushed without a return probe to pop it.
#[derive(Debug)]
pub struct Attached {
    pub mechanism: Mechanism,
    /// Kernel uprobes placed (entry and return).
    pub uprobes: usize,
    enter: Vec<MultiLink>,
    exit: Vec<MultiLink>,
    programs: Vec<MultiProgram>,
}

impl Attached {
    /// Detaches every span probe (see the type's documentation for the order).
    pub fn detach(mut self, ebpf: &mut Ebpf) {
        self.enter.clear();
        self.exit.clear();
        self.programs.clear();
        if self.mechanism == Mechanism::PerfEvent {
            for name in ["span_enter", "span_exit"] {
                if let Ok(program) = program(ebpf, name) {
                    let _ = program.unload();
                }
            }
        }
    }
}

/// Attachments grouped per link: (scope, file, shown name) → (offsets, cookies).
type Groups<'a> = Vec<((usize, &'a TargetFile), Vec<u64>, Vec<u64>)>;

fn groups(plan: &Plan) -> Groups<'_> {
    let mut groups: Groups = Vec::new();
    for a in &plan.attachments {
        let key = (a.scope, &a.file);
        let index = match groups
            .iter()
            .position(|(k, _, _)| k.0 == key.0 && k.1.open == key.1.open)
        {
            Some(index) => index,
            None => {
                groups.push((key, Vec::new(), Vec::new()));
                groups.len() - 1
            }
        };
        groups[index].1.push(a.offset);
        groups[index].2.push(u64::from(a.probe_id));
    }
    groups
}

/// Attaches with uprobe_multi links; `Ok(None)` when the kernel does not support them.
fn attach_multi(ebpf: &Ebpf, plan: &Plan, pids: &[Option<u32>]) -> Result<Option<Attached>> {
    let programs = match uprobe_multi::load(ebpf, &["span_exit", "span_enter"]) {
        Ok(programs) => programs,
        Err(Error::Io { source, .. }) if unsupported(&source) => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut attached = Attached {
        mechanism: Mechanism::UprobeMulti,
        uprobes: 0,
        enter: Vec::new(),
        exit: Vec::new(),
        programs: Vec::new(),
    };
    for program in &programs {
        let ret = program.name() == "span_exit";
        for ((scope, file), offsets, cookies) in groups(plan) {
            let target = MultiTarget {
                path: &file.open,
                offsets: &offsets,
                cookies: &cookies,
                ref_ctr_offsets: None,
                pid: pids[scope],
                ret,
            };
            let link = match program.attach(&target) {
                Ok(link) => link,
                Err(e) if attached.uprobes == 0 && unsupported(&e) => return Ok(None),
                Err(e) => {
                    let whom = pids[scope].map_or("every process".into(), |pid| format!("pid {pid}"));
                    return Err(Error::io(
                        format!(
                            "attaching {} to {} offsets in {} for {whom}",
                            program.name(),
                            offsets.len(),
                            file.shown.display(),
                        ),
                        e,
                    ));
                }
            };
            attached.uprobes += offsets.len();
            if ret {
                attached.exit.push(link);
            } else {
                attached.enter.push(link);
            }
        }
    }
    attached.programs = programs;
    Ok(Some(attached))
}

/// The kernel's internal "operation not supported" (524), which reaches user space unchanged.
const ENOTSUPP: i32 = 524;

/// Errors with which a kernel older than 6.6 refuses uprobe_multi programs or links.
fn unsupported(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP | ENOTSUPP))
}

/// Attaches with one perf-event uprobe per offset through aya.
fn attach_perf_event(ebpf: &mut Ebpf, plan: &Plan, pids: &[Option<u32>]) -> Result<Attached> {
    let mut uprobes = 0;
    for name in ["span_exit", "span_enter"] {
        let program = program(ebpf, name)?;
        program.load().map_err(|source| Error::Attach {
            what: format!("loading {name}"),
            source,
        })?;
        for a in &plan.attachments {
            let scope = match pids[a.scope] {
                Some(pid) => {
                    UProbeScope::OneProcess(NonZeroU32::new(pid).ok_or(Error::NoSuchProcess { pid: 0 })?)
                }
                None => UProbeScope::AllProcesses,
            };
            let whom = pids[a.scope].map_or("every process".into(), |pid| format!("pid {pid}"));
            let point = UProbeAttachPoint {
                location: UProbeAttachLocation::AbsoluteOffset(a.offset),
                cookie: Some(u64::from(a.probe_id)),
            };
            program
                .attach(point, &a.file.open, scope)
                .map_err(|source| Error::Attach {
                    what: format!(
                        "{name} to {}:{} for {whom}",
                        a.file.shown.display(),
                        plan.probes[a.probe_id as usize].name
                    ),
                    source,
                })?;
            uprobes += 1;
        }
    }
    Ok(Attached {
        mechanism: Mechanism::PerfEvent,
        uprobes,
        enter: Vec::new(),
        exit: Vec::new(),
        programs: Vec::new(),
    })
}

/// The `ARG_SPECS` entry of each probe that captures arguments, by probe id.
pub fn arg_specs(plan: &Plan) -> Vec<(u32, u32)> {
    use xtrace_common::probe::args;
    plan.probes
        .iter()
        .enumerate()
        .filter(|(_, p)| !p.capture.args.is_empty())
        .map(|(id, p)| {
            let spec = p.capture.args.iter().enumerate().fold(0, |spec, (i, t)| {
                let string = if *t == ArgType::Str { args::string(i) } else { 0 };
                spec | args::int(i) | string
            });
            (id as u32, spec)
        })
        .collect()
}

/// Loads the span programs and attaches every planned probe; `pids[scope]` is each scope's
/// process (None: every process). Return probes go first so that no entry is ever left without its return. uprobe_multi
/// links are used where the kernel has them, unless `XTRACE_UPROBE_ATTACH=perf_event`. The
/// thread-exit tracepoint that keeps the per-thread map small is attached last.
pub fn attach(ebpf: &mut Ebpf, plan: &Plan, pids: &[Option<u32>]) -> Result<Attached> {
    let forced = std::env::var(ATTACH_ENV).ok();
    let attached = match forced.as_deref() {
        Some("perf_event") => attach_perf_event(ebpf, plan, pids)?,
        Some("uprobe_multi") => attach_multi(ebpf, plan, pids)?.ok_or_else(|| {
            Error::io(
                format!("{ATTACH_ENV}=uprobe_multi"),
                std::io::Error::other("this kernel refuses uprobe_multi links (Linux 6.6+)"),
            )
        })?,
        None | Some("") => match attach_multi(ebpf, plan, pids)? {
            Some(attached) => attached,
            None => attach_perf_event(ebpf, plan, pids)?,
        },
        Some(other) => {
            return Err(Error::BadEnvironment {
                name: ATTACH_ENV,
                value: other.to_string(),
                expected: "uprobe_multi or perf_event",
            })
        }
    };
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
