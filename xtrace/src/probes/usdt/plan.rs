//! Resolving `-U` specs to call sites: which files to search (TARGET, or every module of the
//! process), which notes match the PROVIDER and NAME globs, the kernel form of each site's
//! arguments; `pairs` then says which probes pair into spans.
use std::{
    collections::{hash_map::Entry, HashMap, HashSet},
    os::unix::fs::MetadataExt,
};

use xtrace_common::{
    event::ARG_STR_LEN,
    usdt::{string_kind, UsdtSite, MAX_USDT_ARGS},
};

use super::{
    notes::{read_notes, Unreadable, UsdtNote},
    spec::{RangeOp, UsdtArgType, UsdtSpec},
};
use crate::{
    error::{Error, Result},
    probes::{
        glob,
        spec::{ArgType, TargetSpec},
        uprobe::Plan,
        uprobe::Scope,
        ProbeInfo,
    },
    target::TargetFile,
};

/// One USDT call site to attach; its index in `Plan::usdt_sites` is the attach cookie.
#[derive(Clone, Debug)]
pub struct SiteAttachment {
    pub file: TargetFile,
    pub offset: u64,
    /// File offset of the probe's semaphore (0: none): the kernel raises it while attached.
    pub ref_ctr_offset: u64,
    pub scope: usize,
    /// What the kernel program reads at this site.
    pub site: UsdtSite,
    /// Per argument: the note marks it signed.
    pub signed: Vec<bool>,
}

/// What a USDT probe's hits become.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// An instant event.
    Instant,
    /// Opens a span of probe `span` on its thread.
    Begin { span: u32 },
    /// Closes the innermost open span of probe `span` on its thread.
    End { span: u32 },
    /// A probe of the tool library: a range, mark or thread name (`pipeline::ranges`).
    Range(RangeOp),
}

/// A USDT probe (provider:name in one file) in the probe table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsdtProbe {
    pub role: Role,
    pub types: Vec<UsdtArgType>,
    /// An end of a pairing with several ends (`-U 'P:B..E1|E2'`): its name, which the spans it
    /// closes record as their `end` argument.
    pub end_name: Option<String>,
}

/// A file's identity: (device, inode).
type FileKey = (u64, u64);

/// The notes of the files read so far.
#[derive(Default)]
struct NoteCache {
    files: HashMap<FileKey, Vec<UsdtNote>>,
}

impl NoteCache {
    /// The identity and notes of `file`; `Ok(None)` when it is not a readable ELF file and `quiet`
    /// (a module found by scanning the process's mappings).
    fn notes(
        &mut self,
        file: &TargetFile,
        quiet: bool,
        notices: &mut Vec<String>,
    ) -> Result<Option<(FileKey, &[UsdtNote])>> {
        let meta = match crate::probes::elf::target_metadata(&file.open, &file.shown) {
            Ok(meta) => meta,
            Err(_) if quiet => return Ok(None),
            Err(e) => return Err(e),
        };
        let key = (meta.dev(), meta.ino());
        let notes = match self.files.entry(key) {
            Entry::Occupied(known) => known.into_mut(),
            Entry::Vacant(new) => {
                let unreadable = |e: &dyn std::fmt::Display| Unreadable::Elf(e.to_string());
                let read = crate::elf::LazyElf::open(&file.open)
                    .map_err(|e| unreadable(&e))
                    .and_then(|lazy| read_notes(&lazy.parse().map_err(|e| unreadable(&e))?));
                let notes = match read {
                    Ok((notes, warnings)) => {
                        for warning in warnings {
                            notices.push(format!("{}: {warning}", file.shown.display()));
                        }
                        notes
                    }
                    Err(_) if quiet => Vec::new(),
                    Err(Unreadable::Elf(reason)) => {
                        return Err(Error::NotElf {
                            path: file.shown.clone(),
                            reason,
                        })
                    }
                    Err(Unreadable::Architecture(architecture)) => {
                        return Err(Error::NotX86_64 {
                            path: file.shown.clone(),
                            architecture,
                        })
                    }
                };
                new.insert(notes)
            }
        };
        Ok(Some((key, notes)))
    }
}

/// The USDT family's planning (`-U`): its specs, exact names first (a probe matched by several
/// specs takes the first one's value types).
#[derive(Clone, Debug)]
pub struct UsdtPlanner {
    pub specs: Vec<UsdtSpec>,
}

impl UsdtPlanner {
    /// The family's planning for `specs` as given: sorted, exact names first.
    pub fn new(specs: &[UsdtSpec]) -> Self {
        let mut specs = specs.to_vec();
        specs.sort_by_key(|s| glob::is_glob(&s.provider) || glob::is_glob(&s.name));
        UsdtPlanner { specs }
    }
}

impl crate::probes::planner::Planner for UsdtPlanner {
    fn plan(&self, plan: &mut Plan, at: &mut crate::probes::planner::Planning<'_>) -> Result<()> {
        self::plan(plan, &self.specs, at.scopes)
    }
}

/// Adds the call sites of every `-U` spec in every scope to `plan`: fails, before anything is
/// attached, on a spec that matches no probe. Sites whose arguments cannot be read are skipped
/// with a notice.
pub fn plan(plan: &mut Plan, specs: &[UsdtSpec], scopes: &[Scope]) -> Result<()> {
    let mut cache = NoteCache::default();
    // By file (its identity: one file may be named two ways), provider and name.
    let mut ids: HashMap<(FileKey, String, String), u32> = HashMap::new();
    // Each probe's site once per scope; two probes whose notes name one address are both placed.
    let mut placed: HashSet<(usize, FileKey, u64, String)> = HashSet::new();
    // The spec whose value types each probe takes (the first to match it).
    let mut typed_by: HashMap<u32, String> = HashMap::new();
    for spec in specs {
        let mut found = Found::default();
        for (scope_index, scope) in scopes.iter().enumerate() {
            let (files, quiet) = files_to_search(scope, spec.target.as_ref())?;
            for file in files {
                let Some((key, notes)) = cache.notes(&file, quiet, &mut plan.notices)? else {
                    continue;
                };
                let shown = file.shown.display().to_string();
                if !found.searched.contains(&shown) {
                    found.searched.push(shown.clone());
                }
                for note in notes {
                    let label = format!("{}:{}", note.provider, note.name);
                    if !glob::matches(&spec.provider, &note.provider) || !spec.names(&note.name) {
                        if found.available.len() < 5 && !found.available.contains(&label) {
                            found.available.push(label);
                        }
                        continue;
                    }
                    let site = match kernel_site(note, &spec.types) {
                        Ok(site) => site,
                        Err(reason) => {
                            let why = format!(
                                "USDT probe {label} at {shown} offset {:#x}: arguments `{}`: {reason}",
                                note.offset, note.args_text
                            );
                            plan.notices.push(format!("skipping {why}"));
                            found.skipped.push(why);
                            continue;
                        }
                    };
                    if !found.named.contains(&note.name) {
                        found.named.push(note.name.clone());
                    }
                    if !placed.insert((scope_index, key, note.offset, label.clone())) {
                        // The same site through another spec: the first spec's types apply.
                        let known = ids.get(&(key, note.provider.clone(), note.name.clone()));
                        let first = known.and_then(|id| typed_by.get(id)).map_or("", String::as_str);
                        let note = format!(
                            "-U '{}': `{label}` is traced already through -U '{first}', whose value types apply",
                            spec.text
                        );
                        if known.is_some_and(|id| {
                            !spec.types.is_empty() && plan.usdt_probes[id].types != spec.types
                        }) && !plan.notices.contains(&note)
                        {
                            plan.notices.push(note);
                        }
                        continue;
                    }
                    let id = *ids
                        .entry((key, note.provider.clone(), note.name.clone()))
                        .or_insert_with(|| {
                            plan.probes.push(ProbeInfo {
                                name: label.clone(),
                                kind: crate::probes::ProbeKind::Usdt,
                                target: shown.clone(),
                                offset: note.offset,
                                capture: Default::default(),
                            });
                            let id = (plan.probes.len() - 1) as u32;
                            typed_by.insert(id, spec.text.clone());
                            plan.usdt_probes.insert(
                                id,
                                UsdtProbe {
                                    role: spec.range.map_or(Role::Instant, Role::Range),
                                    types: spec.types.clone(),
                                    end_name: None,
                                },
                            );
                            id
                        });
                    let (mut site, signed) = site;
                    site.probe_id = id;
                    plan.usdt_sites.push(SiteAttachment {
                        file: file.clone(),
                        offset: note.offset,
                        ref_ctr_offset: note.semaphore_offset.unwrap_or(0),
                        scope: scope_index,
                        site,
                        signed,
                    });
                }
            }
        }
        found.check(spec)?;
    }
    super::pairs::pair_named(plan, specs);
    super::pairs::pair_spans(plan);
    Ok(())
}

/// What one spec's search found.
#[derive(Default)]
struct Found {
    /// The names of the probes it matched (and did not skip): a pairing needs each of its own.
    named: Vec<String>,
    /// Why each matching site skipped was.
    skipped: Vec<String>,
    /// The files searched, as shown.
    searched: Vec<String>,
    /// Up to 5 probes there that it did not match.
    available: Vec<String>,
}

impl Found {
    /// The error of a spec that matched no probe in the files searched, or a pairing one of whose
    /// names did not: the sites it matched but skipped, else some of the probes there.
    fn check(&self, spec: &UsdtSpec) -> Result<()> {
        let hint = if let Some(first) = self.skipped.first() {
            format!("; {} matching site(s) skipped, first {first}", self.skipped.len())
        } else if self.available.is_empty() {
            "; those files have no USDT notes (list them with `xtrace list usdt`)".into()
        } else {
            format!("; probes there include {}", self.available.join(", "))
        };
        let missing = spec
            .pair
            .as_ref()
            .and_then(|p| p.names().find(|n| !self.named.iter().any(|m| m == n)));
        if let Some(missing) = missing {
            return Err(Error::PairNotFound {
                spec: spec.text.clone(),
                provider: spec.provider.clone(),
                name: missing.to_string(),
                searched: describe(&self.searched),
                hint,
            });
        }
        if self.named.is_empty() {
            return Err(Error::UsdtNotFound {
                spec: spec.text.clone(),
                searched: describe(&self.searched),
                hint,
            });
        }
        Ok(())
    }
}

/// The files a TARGET names in `scope`, or (without one) every module of the scope: a launched
/// command's program and the libraries it loads at its start (libstdc++'s `libstdcxx:throw`);
/// the flag says the files were found by scanning, so one that is no ELF file is passed over
/// quietly.
fn files_to_search(scope: &Scope, target: Option<&TargetSpec>) -> Result<(Vec<TargetFile>, bool)> {
    match (target, scope) {
        (Some(target), _) => Ok((vec![scope.resolve(target)?], false)),
        (None, Scope::Command(program)) => {
            let mut files = vec![program.target()];
            files.extend(crate::probes::needed::loaded_at_start(&program.path));
            Ok((files, true))
        }
        (None, _) => Ok((scope.modules()?, true)),
    }
}

/// Notes per file, and warnings about malformed ones.
pub type Listing = (Vec<(TargetFile, Vec<UsdtNote>)>, Vec<String>);

/// The USDT notes of TARGET (or of every module of the scope when `None`), per file, with warnings
/// about malformed notes: what `xtrace list usdt` shows.
pub fn list(scope: &Scope, target: Option<&TargetSpec>) -> Result<Listing> {
    let mut cache = NoteCache::default();
    let mut notices = Vec::new();
    let (files, quiet) = files_to_search(scope, target)?;
    let mut listed = Vec::new();
    for file in files {
        if let Some((_, notes)) = cache.notes(&file, quiet, &mut notices)? {
            if !notes.is_empty() || !quiet {
                listed.push((file, notes.to_vec()));
            }
        }
    }
    Ok((listed, notices))
}

fn describe(files: &[String]) -> String {
    match files {
        [] => "no file".into(),
        [one] => one.clone(),
        [first, rest @ ..] => format!("{first} and {} other module(s)", rest.len()),
    }
}

/// The kernel's form of a note's site, and which arguments are signed.
fn kernel_site(note: &UsdtNote, types: &[UsdtArgType]) -> std::result::Result<(UsdtSite, Vec<bool>), String> {
    kernel_form(note.args.as_ref().map_err(|e| e.to_string())?, types)
}

/// The kernel's form of a site with arguments `args` read as `types` say, and which arguments
/// are signed.
pub fn kernel_form(
    args: &[super::args::ArgSpec],
    types: &[UsdtArgType],
) -> std::result::Result<(UsdtSite, Vec<bool>), String> {
    let mut site = UsdtSite {
        nargs: args.len().min(MAX_USDT_ARGS) as u8,
        ..UsdtSite::default()
    };
    for (i, arg) in args.iter().enumerate().take(MAX_USDT_ARGS) {
        let string = types.get(i).map_or(string_kind::NONE, |t| t.string_kind());
        site.args[i] = arg.to_kernel(string).map_err(|e| format!("argument {i}: {e}"))?;
        // Past what its slot keeps, a string is sent whole too.
        if let Some(UsdtArgType::As(ArgType::StrN(n))) = types.get(i) {
            if usize::from(*n) >= ARG_STR_LEN {
                site.args[i].long = *n;
            }
        }
        if string != string_kind::NONE {
            site.strings = (i + 1) as u8;
        }
    }
    Ok((site, args.iter().map(|a| a.signed).collect()))
}
