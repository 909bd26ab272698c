//! Function spans: resolving `-u [TARGET:]SYMBOL` to files and offsets for each traced process
//! (the probe id is the BPF cookie of both the entry and the return probe), and the scopes TARGETs
//! are resolved in. Where one function's probes go is `placement`'s; attaching is `super::attach`'s.
mod placement;

use placement::unreadable;
pub use placement::{placement, Placed, Untraceable};

use std::{
    borrow::Cow,
    collections::{hash_map::Entry, BTreeMap, HashMap, HashSet},
    os::unix::fs::MetadataExt,
};

use super::{
    elf::{ElfSymbols, FunctionSymbol, SymbolCache},
    entry::{EntryMode, EntrySites},
    exits::{ExitMode, ExitSite},
    ifunc::{Ifunc, InProcess},
    left_out::{self, AtExits, LeftOut},
    spec::{ArgType, TargetSpec, UprobeSpec},
    usdt::plan::{SiteAttachment, UsdtProbe},
    ProbeInfo,
};
use crate::{
    elf::debug_file::DebugDirs,
    error::{Error, Result},
    probes::Capture,
    target::{library_from_cache, Process, TargetFile},
};

/// Where TARGETs are looked up: a running process, a command about to be launched, or the whole
/// system (`-a`: files by path or library name only).
pub enum Scope<'a> {
    Process(&'a Process),
    Command(&'a crate::launch::Program),
    SystemWide,
}

impl Scope<'_> {
    pub(crate) fn resolve(&self, target: &TargetSpec) -> Result<TargetFile> {
        match (self, target) {
            (Scope::Process(p), TargetSpec::MainExecutable) => p.executable(),
            (Scope::Process(p), TargetSpec::Path(path)) => Ok(p.path(path)),
            (Scope::Process(p), TargetSpec::Library(name)) => p.library(name),
            (Scope::Command(program), TargetSpec::MainExecutable) => Ok(program.target()),
            (Scope::SystemWide, TargetSpec::MainExecutable) => Err(Error::Usage(
                "with -a/--system-wide every -u needs a TARGET (a path or library name), as in -u libc:malloc"
                    .into(),
            )),
            (Scope::Command(_) | Scope::SystemWide, TargetSpec::Path(path)) => Ok(TargetFile {
                open: path.clone(),
                shown: path.clone(),
            }),
            (Scope::Command(program), TargetSpec::Library(name)) => {
                match super::needed::find_library(&program.path, name) {
                    Some(file) => Ok(file),
                    None => library_from_cache(name).map_err(|_| Error::LibraryNotNeeded {
                        name: name.clone(),
                        program: program.path.clone(),
                    }),
                }
            }
            (Scope::SystemWide, TargetSpec::Library(name)) => library_from_cache(name),
        }
    }

    /// Where a probe without TARGET is looked for: every module of a process, the command, or
    /// (system-wide) nowhere.
    pub(crate) fn modules(&self) -> Result<Vec<TargetFile>> {
        match self {
            Scope::Process(p) => p.mapped_files(),
            Scope::Command(program) => Ok(vec![program.target()]),
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
    /// Where the function's exits are probed (`span_ret`), or None for a return probe
    /// (`span_exit`).
    pub exits: Option<Vec<ExitSite>>,
    /// Whether the entry probe is on a Go function's stack-check branch
    /// ([`super::entry::on_go_stack_check`]).
    pub go_stack_check: bool,
    /// Go code: with its exits probed at their instructions, its open calls are kept per
    /// goroutine (`ENTRY_GO`).
    pub go: bool,
}

/// What the plan holds for watching (`cuda::late`): the id of the block's first probe and the `dlopen` probes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Watch {
    pub block: u32,
    pub loaders: Vec<u32>,
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
    pub cuda: BTreeMap<u32, crate::model::cuda_api::Function>,
    /// With `--mpi`: the MPI function of each probe, and the MPI libraries' datatypes.
    pub mpi: super::mpi_plan::MpiPlan,
    /// The range sources recorded, when the tool library's probes are in the plan.
    pub ranges: Option<super::ranges::Wanted>,
    /// Warnings for the user (a stripped file, C++ exception tables), one line each.
    pub notices: Vec<String>,
    /// With `--cuda`: the `dlopen` probes and the probe ids kept for CUDA libraries loaded later.
    pub watch: Option<Watch>,
    /// `--stacks`: `call_stack` is attached at every function entry too (not at `dlopen`'s), and
    /// `usdt_stack` at the sites of instant and begin USDT probes.
    pub stacks: bool,
}

impl Plan {
    /// Whether probe `id`'s entry reads a string argument (`str`, `str:N`): where the kernel takes
    /// sleepable uprobes its entry program is the sleepable one, whose reads can fault pages in.
    pub fn reads_strings(&self, id: u32) -> bool {
        self.probes
            .get(id as usize)
            .is_some_and(|p| p.capture.args.iter().any(|t| t.is_str()))
    }

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

/// A function's probe id, its entry probe's file offset, and where its exits are probed (see
/// [`Attachment::exits`]).
type Planned = (u32, u64, Option<Vec<ExitSite>>);

/// The functions family's planning (`-u`): its specs, and where entries and returns are probed.
#[derive(Clone, Debug)]
pub struct Functions {
    /// A function matched by several specs takes the first one's value types: exact names go
    /// before globs, so `-u 'f*' -u 'f(i32)'` captures f's argument.
    pub specs: Vec<UprobeSpec>,
    pub entries: EntryMode,
    pub exits: ExitMode,
}

impl Functions {
    /// The family's planning for `specs` as given: sorted, exact names first.
    pub fn new(specs: &[UprobeSpec], entries: EntryMode, exits: ExitMode) -> Self {
        let mut specs = specs.to_vec();
        specs.sort_by_key(|s| super::glob::is_glob(&s.symbol));
        Functions {
            specs,
            entries,
            exits,
        }
    }
}

impl super::planner::Planner for Functions {
    fn plan(&self, plan: &mut Plan, at: &mut super::planner::Planning<'_>) -> Result<()> {
        plan_functions(
            plan,
            &self.specs,
            (at.scopes, at.elves),
            at.max_probes,
            (self.entries, self.exits),
        )
    }
}

/// Adds every spec's functions in every scope to `plan`; fails on the first spec that cannot be
/// resolved, or when more than `max_probes` functions match, before anything is attached.
/// `entries` says where entries are probed, `exits` how returns are.
fn plan_functions(
    plan: &mut Plan,
    specs: &[UprobeSpec],
    (scopes, elves): (&[Scope], &mut SymbolCache),
    max_probes: usize,
    (entries, exits): (EntryMode, ExitMode),
) -> Result<()> {
    // The probes planned before (of no function), left as they are.
    let before = plan.probes.len();
    let mut in_process = InProcess::default();
    let mut entry_sites = EntrySites::default();
    // Each probe's function, by probe id: its symbol's file offset and compile unit.
    let mut places: Vec<super::names::Place> = Vec::new();
    // The probe id and exit sites of each (file shown, its device and inode, entry offset, an
    // IFUNC left out) planned; or why it is not traced.
    // By file (device and inode: one file may be named two ways, a launched command by its path
    // and by `./name`) and entry offset.
    let mut ids: HashMap<(u64, u64, u64, bool), std::result::Result<Planned, Untraceable>> = HashMap::new();
    // Each function once per scope, however many specs match it: twice, each call would enter
    // twice and return once.
    let mut attached: HashSet<(usize, (u64, u64, u64, bool))> = HashSet::new();
    // The spec whose value types each probe takes (the first to match it).
    let mut typed_by: HashMap<u32, String> = HashMap::new();
    // Per file shown: how many functions' exits are probed at instructions, and why.
    let mut at_exits: BTreeMap<String, AtExits> = BTreeMap::new();
    // What globs matched that is not traced, and why.
    let mut left_out = LeftOut::default();
    // Each TARGET resolved and opened once per scope, for every spec that names it: a plan of a
    // thousand `-u lib:name` would otherwise read the process's mappings a thousand times.
    let mut opened: HashMap<(usize, &TargetSpec), Opened> = HashMap::new();
    for spec in specs {
        for (scope_index, scope) in scopes.iter().enumerate() {
            let target = match opened.entry((scope_index, &spec.target)) {
                Entry::Occupied(known) => known.into_mut(),
                Entry::Vacant(new) => new.insert(Opened {
                    file: scope.resolve(&spec.target)?,
                    code: None,
                }),
            };
            // Read (and its kind of file checked) before it is opened: opening a FIFO would wait.
            let (symbols, first) = elves.get(&target.file)?;
            if first {
                file_notices(&mut plan.notices, &target.file, symbols, exits);
            }
            let functions = symbols.find(&spec.symbol)?;
            let (file, (code, meta)) = target.code()?;
            for function in functions {
                let function = &*in_scope(function, scope, (file, code), symbols, &mut in_process);
                let shown = file.shown.display().to_string();
                let key = probe_key(meta, function);
                let planned = match ids.get(&key) {
                    Some(known) => {
                        if let Ok((id, ..)) = known {
                            let first = typed_by.get(id).map_or("", String::as_str);
                            typed_again(plan, *id, spec, first, function);
                        }
                        known.clone()
                    }
                    None => {
                        let known = match placement(
                            (entries, exits),
                            (file, code),
                            symbols,
                            function,
                            spec.args.len(),
                            &mut entry_sites,
                        )? {
                            Ok((entry, sites)) => Ok({
                                places.push(super::names::Place {
                                    offset: function.file_offset,
                                    unit: function.unit.clone(),
                                });
                                new_probe(
                                    plan,
                                    &mut at_exits,
                                    exits,
                                    spec,
                                    file,
                                    symbols,
                                    (function, entry, sites),
                                )
                            }),
                            Err(why) => Err(why),
                        };
                        if let Err(why) = &known {
                            left_out.add(why, shown, function.demangled.clone());
                        }
                        if let Ok((id, ..)) = &known {
                            typed_by.entry(*id).or_insert_with(|| spec.text.clone());
                        }
                        ids.insert(key, known.clone());
                        known
                    }
                };
                let (id, offset, sites) = match planned {
                    Ok(planned) => planned,
                    // Named exactly: refused. Matched by a glob: left out (one warning per file).
                    Err(why) if !super::glob::is_glob(&spec.symbol) => {
                        return Err(why.into_error(file.shown.clone(), function.demangled.clone()))
                    }
                    Err(_) => continue,
                };
                if !attached.insert((scope_index, key)) {
                    continue;
                }
                let attachment =
                    attachment((file, code), symbols, function, (id, offset, sites), scope_index)?;
                plan.attachments.push(attachment);
            }
            if plan.probes.len() - before > max_probes {
                return Err(Error::TooManyProbes {
                    spec: spec.text.clone(),
                    max: max_probes,
                });
            }
        }
    }
    left_out::exit_notices(at_exits, exits, &mut plan.notices);
    left_out.notices(&mut plan.notices);
    super::names::tell_apart(&mut plan.probes[before..], &places);
    Ok(())
}

/// A TARGET's file as resolved in a scope, and once its symbols are read, opened for its
/// functions' instructions (entry, exits).
struct Opened {
    file: TargetFile,
    code: Option<(std::fs::File, std::fs::Metadata)>,
}

impl Opened {
    /// The file and, opened on the first call, its code.
    fn code(&mut self) -> Result<(&TargetFile, &(std::fs::File, std::fs::Metadata))> {
        let Opened { file, code } = self;
        let code = match code {
            Some(code) => code,
            None => {
                let opened = std::fs::File::open(&file.open).map_err(unreadable(file))?;
                let meta = opened.metadata().map_err(unreadable(file))?;
                code.insert((opened, meta))
            }
        };
        Ok((file, code))
    }
}

/// What a planned probe is known by: its file's device and inode, its entry offset, and whether
/// it is an IFUNC left out (which is not the resolver at its address).
fn probe_key(meta: &std::fs::Metadata, function: &FunctionSymbol) -> (u64, u64, u64, bool) {
    (
        meta.dev(),
        meta.ino(),
        function.probe_offset,
        function.ifunc.unplaced(),
    )
}

/// The attachment of `function` (of `symbols`, the symbols of `file`, read through `code`) in
/// scope `scope` as planned: probe id, entry offset, exit sites.
fn attachment(
    (file, code): (&TargetFile, &std::fs::File),
    symbols: &ElfSymbols,
    function: &FunctionSymbol,
    (probe_id, offset, exits): Planned,
    scope: usize,
) -> Result<Attachment> {
    let go = symbols.go_code(function);
    let go_stack_check =
        go && super::entry::on_go_stack_check(code, function, offset).map_err(unreadable(file))?;
    Ok(Attachment {
        probe_id,
        file: file.clone(),
        offset,
        scope,
        exits,
        go_stack_check,
        go,
    })
}

/// What to know of `file` (whose symbols are `symbols`) before tracing it: that it is stripped,
/// and what return probes do to Go code and to code that throws.
fn file_notices(notices: &mut Vec<String>, file: &TargetFile, symbols: &ElfSymbols, exits: ExitMode) {
    if symbols.stripped {
        notices.push(format!(
            "{} is stripped (no .symtab): only its exported .dynsym functions can be traced{}",
            file.shown.display(),
            super::elf::debug_file_hint(symbols.debug_refused.as_deref())
        ));
    }
    if symbols.go && exits == ExitMode::Uretprobe {
        notices.push(format!(
            "{} is Go code: with --exits uretprobe, the Go runtime aborts the process \
             (\"unexpected return pc\") when it walks a goroutine's stack inside a traced \
             call (stack growth, garbage collection, preemption), because return probes \
             replace return addresses",
            file.shown.display()
        ));
    }
    if symbols.cxx_exceptions && exits == ExitMode::Uretprobe {
        notices.push(format!(
            "{} has exception tables: with --exits uretprobe, an exception or panic that \
             unwinds through a traced function (thrown inside, caught outside) aborts the \
             process, because return probes replace return addresses",
            file.shown.display()
        ));
    }
}

/// Says so when `spec` types the values of probe `id` (of `function`), which the spec `first`
/// typed already, otherwise: the first spec's types apply.
fn typed_again(plan: &mut Plan, id: u32, spec: &UprobeSpec, first: &str, function: &FunctionSymbol) {
    let capture = &plan.probes[id as usize].capture;
    let typed = !spec.args.is_empty() || spec.ret.is_some();
    let note = format!(
        "-u '{}': `{}` is traced already through -u '{first}', whose value types apply",
        spec.text, function.demangled
    );
    if typed && (capture.args != spec.args || capture.ret != spec.ret) && !plan.notices.contains(&note) {
        plan.notices.push(note);
    }
}

/// `function` of `symbols` (the symbols of `file`, read through `code`) as traced in `scope`: an
/// IFUNC at the implementation a traced process's own slots for it say its resolver picked there
/// ([`InProcess`]), when they say so: for one xtrace could not resolve itself, and for one it
/// did, as the process may see other CPU features (`GLIBC_TUNABLES`); else as it is.
pub fn in_scope<'f>(
    function: &'f FunctionSymbol,
    scope: &Scope,
    (file, code): (&TargetFile, &std::fs::File),
    symbols: &ElfSymbols,
    in_process: &mut InProcess,
) -> Cow<'f, FunctionSymbol> {
    let resolver = match function.ifunc {
        Ifunc::Unresolved => function.address,
        Ifunc::Resolved { resolver } => resolver,
        Ifunc::No | Ifunc::Outside | Ifunc::PicksNothing => return Cow::Borrowed(function),
    };
    let resolved = match scope {
        Scope::Process(process) => in_process
            .resolve(process, (file, symbols), resolver)
            .filter(|&implementation| implementation != function.address)
            .and_then(|implementation| symbols.at_implementation(function, (resolver, implementation), code)),
        _ => None,
    };
    resolved.map_or(Cow::Borrowed(function), Cow::Owned)
}

/// Adds the probe of `function`, whose entry is probed at file offset `entry` and exits at
/// `sites` (see [`placement`]), to `plan` and returns its id, entry and exit sites, counting in
/// `at_exits` how its exits are probed.
fn new_probe(
    plan: &mut Plan,
    at_exits: &mut BTreeMap<String, AtExits>,
    exits: ExitMode,
    spec: &UprobeSpec,
    file: &TargetFile,
    symbols: &ElfSymbols,
    (function, entry, sites): (&FunctionSymbol, u64, Option<Vec<ExitSite>>),
) -> Planned {
    let shown = file.shown.display().to_string();
    let count = at_exits.entry(shown.clone()).or_default();
    count.go = symbols.go;
    // Under auto, only a function whose code could not be read is left exposed; the others with
    // return probes are leaves.
    let exposed =
        exits == ExitMode::Ret || (exits == ExitMode::Auto && symbols.cxx_exceptions && function.size == 0);
    if sites.is_none() && symbols.c_cleanups {
        count.cleanups += 1;
    }
    match &sites {
        Some(_) if function.returns_twice => count.twice += 1,
        Some(_) => count.probed += 1,
        None if exposed => count.not += 1,
        None => {}
    }
    plan.probes.push(ProbeInfo {
        name: function.demangled.clone(),
        kind: super::ProbeKind::Uprobe,
        target: shown,
        offset: entry,
        capture: Capture {
            args: spec.args.clone(),
            ret: spec.ret,
            go: symbols.go_code(function),
        },
    });
    ((plan.probes.len() - 1) as u32, entry, sites)
}

/// The file `spec` names in `scope` and its function symbols (what `xtrace list symbols` shows).
pub fn symbols_for(spec: &UprobeSpec, scope: &Scope, dirs: &DebugDirs) -> Result<(TargetFile, ElfSymbols)> {
    let file = scope.resolve(&spec.target)?;
    let symbols = ElfSymbols::read(&file.open, &file.shown, dirs)?;
    Ok((file, symbols))
}

/// The `STR_LENS` entry of each probe with an argument read as a long string (`str:N`, N past what
/// an `ArgsEvent` keeps), by probe id; Go code's strings are kept to 63 bytes.
pub fn str_lens(plan: &Plan) -> Vec<(u32, xtrace_common::probe::StrLens)> {
    let short = xtrace_common::event::ARG_STR_LEN - 1;
    plan.probes
        .iter()
        .enumerate()
        .filter(|(_, p)| !p.capture.go)
        .filter_map(|(id, p)| {
            let mut lens = [0u16; 8];
            for (i, t) in p.capture.args.iter().enumerate() {
                if let Some(max) = t.string_max().filter(|&max| max > short) {
                    lens[i] = max as u16;
                }
            }
            lens.iter().any(|&n| n > 0).then_some((id as u32, lens))
        })
        .collect()
}

/// The `ARG_SPECS` entry of each probe that captures arguments, by probe id.
pub fn arg_specs(plan: &Plan) -> Vec<(u32, u32)> {
    use xtrace_common::probe::args;
    let typed = plan
        .probes
        .iter()
        .enumerate()
        .filter(|(_, p)| !p.capture.args.is_empty() || p.capture.ret.is_some_and(ArgType::is_str))
        .map(|(id, p)| {
            // Go code: argument registers, and string lengths, of Go's ABI.
            let abi = if p.capture.go { args::GO_ABI } else { 0 };
            let ret = match p.capture.ret {
                Some(t) if t.is_str() => args::RET_STRING,
                _ => 0,
            };
            let spec = p.capture.args.iter().enumerate().fold(abi | ret, |spec, (i, t)| {
                let string = if t.is_str() { args::string(i) } else { 0 };
                spec | args::int(i) | string
            });
            (id as u32, spec)
        });
    let cuda = plan
        .cuda
        .iter()
        .map(|(id, f)| (*id, f.op.spec() | args::ALWAYS_SENT));
    let mpi = plan.mpi.functions.iter().map(|(id, f)| (*id, f.spec()));
    typed.chain(cuda).chain(mpi).collect()
}
