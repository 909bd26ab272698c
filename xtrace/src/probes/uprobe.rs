//! Function spans: resolving `-u [TARGET:]SYMBOL` to files and offsets for each traced process
//! (the probe id is the BPF cookie of both the entry and the return probe), and the scopes TARGETs
//! are resolved in. Attaching is `super::attach`'s.
use std::{
    collections::{BTreeMap, HashMap},
    path::Path,
};

use super::{
    elf::{ElfSymbols, SymbolCache},
    spec::{ArgType, TargetSpec, UprobeSpec},
    usdt::plan::{SiteAttachment, UsdtProbe},
    ProbeInfo,
};
use crate::{
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
    pub(crate) fn resolve(&self, target: &TargetSpec) -> Result<TargetFile> {
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

    /// Where a probe without TARGET is looked for: every module of a process, the command, or
    /// (system-wide) nowhere.
    pub(crate) fn modules(&self) -> Result<Vec<TargetFile>> {
        match self {
            Scope::Process(p) => p.mapped_files(),
            Scope::Command(program) => Ok(vec![TargetFile {
                open: program.to_path_buf(),
                shown: program.to_path_buf(),
            }]),
            Scope::SystemWide => Err(Error::Usage(
                "with -a/--system-wide every -U needs a TARGET (a path or library name), as in -U /usr/bin/app:myapp:*"
                    .into(),
            )),
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
    /// Function probes (`-u`), entry and return.
    pub attachments: Vec<Attachment>,
    /// USDT call sites (`-U`), indexed by attach cookie.
    pub usdt_sites: Vec<SiteAttachment>,
    /// The role and argument types of each USDT probe, by probe id.
    pub usdt_probes: BTreeMap<u32, UsdtProbe>,
    /// The CUDA function of each `--cuda` probe, by probe id.
    pub cuda: BTreeMap<u32, crate::cuda::api::Function>,
    /// The range sources recorded, when the tool library's probes are in the plan.
    pub ranges: Option<crate::pipeline::ranges::Wanted>,
    /// Warnings for the user (a stripped file, C++ exception tables), one line each.
    pub notices: Vec<String>,
    /// With `--cuda`: the `dlopen` probes and the probe ids kept for CUDA libraries loaded later.
    pub watch: Option<crate::cuda::late::Watch>,
}

impl Plan {
    /// The id of the probe at `probe`'s target and offset, adding `probe` the first time (then
    /// true).
    pub fn probe_at(&mut self, probe: ProbeInfo) -> (u32, bool) {
        if let Some(id) = self
            .probes
            .iter()
            .position(|p| p.target == probe.target && p.offset == probe.offset)
        {
            return (id as u32, false);
        }
        self.probes.push(probe);
        ((self.probes.len() - 1) as u32, true)
    }
}

/// Resolves every spec in every scope; fails on the first spec that cannot be resolved, or when
/// more than `max_probes` functions match, before anything is attached.
pub fn plan(specs: &[UprobeSpec], scopes: &[Scope], max_probes: usize) -> Result<Plan> {
    let mut plan = Plan::default();
    let mut elves = SymbolCache::default();
    let mut ids: HashMap<(String, u64), u32> = HashMap::new();
    for spec in specs {
        for (scope_index, scope) in scopes.iter().enumerate() {
            let file = scope.resolve(&spec.target)?;
            let (symbols, first) = elves.get(&file)?;
            if first {
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
            }
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

/// The `ARG_SPECS` entry of each probe that captures arguments, by probe id.
pub fn arg_specs(plan: &Plan) -> Vec<(u32, u32)> {
    use xtrace_common::probe::args;
    let typed = plan
        .probes
        .iter()
        .enumerate()
        .filter(|(_, p)| !p.capture.args.is_empty())
        .map(|(id, p)| {
            let spec = p.capture.args.iter().enumerate().fold(0, |spec, (i, t)| {
                let string = if *t == ArgType::Str { args::string(i) } else { 0 };
                spec | args::int(i) | string
            });
            (id as u32, spec)
        });
    let cuda = plan.cuda.iter().map(|(id, f)| (*id, f.op.spec()));
    typed.chain(cuda).collect()
}
