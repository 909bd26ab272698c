//! Resolving `-U` specs to call sites: which files to search (TARGET, or every module of the
//! process), which notes match the PROVIDER and NAME globs, the kernel form of each site's
//! arguments, and which probes pair into spans (`*_begin`/`*_end`, `*_start`/`*_end`,
//! `*__entry`/`*__return`).
use std::{
    collections::{hash_map::Entry, HashMap, HashSet},
    os::unix::fs::MetadataExt,
};

use xtrace_common::usdt::{string_kind, UsdtSite, MAX_USDT_ARGS};

use super::{
    notes::{read_notes, Unreadable, UsdtNote},
    spec::{RangeOp, UsdtArgType, UsdtSpec},
};
use crate::{
    error::{Error, Result},
    probes::{glob, spec::TargetSpec, uprobe::Plan, uprobe::Scope, ProbeInfo},
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
                let read = std::fs::File::open(&file.open)
                    .map_err(|e| Unreadable::Elf(e.to_string()))
                    .and_then(|f| read_notes(&object::ReadCache::new(f)));
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
        let mut matched = 0;
        let mut skipped: Vec<String> = Vec::new();
        let mut searched: Vec<String> = Vec::new();
        let mut available: Vec<String> = Vec::new();
        for (scope_index, scope) in scopes.iter().enumerate() {
            let (files, quiet) = files_to_search(scope, spec.target.as_ref())?;
            for file in files {
                let Some((key, notes)) = cache.notes(&file, quiet, &mut plan.notices)? else {
                    continue;
                };
                let shown = file.shown.display().to_string();
                if !searched.contains(&shown) {
                    searched.push(shown.clone());
                }
                for note in notes {
                    let label = format!("{}:{}", note.provider, note.name);
                    if !glob::matches(&spec.provider, &note.provider)
                        || !glob::matches(&spec.name, &note.name)
                    {
                        if available.len() < 5 && !available.contains(&label) {
                            available.push(label);
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
                            skipped.push(why);
                            continue;
                        }
                    };
                    matched += 1;
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
        if matched == 0 {
            return Err(not_found(spec, &searched, &skipped, &available));
        }
    }
    pair_spans(plan);
    Ok(())
}

/// The error of `spec`, which matched no probe in the files `searched`: the sites it matched but
/// skipped, else some of the probes there.
fn not_found(spec: &UsdtSpec, searched: &[String], skipped: &[String], available: &[String]) -> Error {
    Error::UsdtNotFound {
        spec: spec.text.clone(),
        searched: describe(searched),
        hint: if let Some(first) = skipped.first() {
            format!("; {} matching site(s) skipped, first {first}", skipped.len())
        } else if available.is_empty() {
            "; those files have no USDT notes (list them with `xtrace list usdt`)".into()
        } else {
            format!("; probes there include {}", available.join(", "))
        },
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
        if string != string_kind::NONE {
            site.strings = (i + 1) as u8;
        }
    }
    Ok((site, args.iter().map(|a| a.signed).collect()))
}

/// End suffixes, each with the begin suffixes it closes.
const END: &[(&str, &[&str])] = &[("_end", &["_begin", "_start"]), ("__return", &["__entry"])];

/// Gives begin/end probes of the same base name (same file and provider) the roles that pair
/// them, with a `usdt_span` probe for their spans named `provider:base`.
fn pair_spans(plan: &mut Plan) {
    let mut ends: Vec<(u32, u32)> = Vec::new();
    // Range probes have their own roles (range_start/range_end are no begin/end pair).
    let ids: Vec<u32> = plan
        .usdt_probes
        .iter()
        .filter(|(_, p)| p.role == Role::Instant)
        .map(|(id, _)| *id)
        .collect();
    for &end_id in &ids {
        let end = plan.probes[end_id as usize].clone();
        let Some((provider, name)) = end.name.split_once(':') else {
            continue;
        };
        let Some((base, begins)) = END
            .iter()
            .find_map(|(suffix, begins)| name.strip_suffix(suffix).map(|base| (base, *begins)))
        else {
            continue;
        };
        let begin_id = begins.iter().find_map(|suffix| {
            let wanted = format!("{provider}:{base}{suffix}");
            ids.iter().copied().find(|&id| {
                plan.probes[id as usize].name == wanted && plan.probes[id as usize].target == end.target
            })
        });
        if let Some(begin_id) = begin_id {
            ends.push((begin_id, end_id));
        }
    }
    ends.sort_unstable();
    for (begin_id, end_id) in ends {
        let end = &plan.probes[end_id as usize];
        let (provider, name) = end.name.split_once(':').unwrap_or(("", &end.name));
        let base = END
            .iter()
            .find_map(|(suffix, _)| name.strip_suffix(suffix))
            .unwrap_or(name);
        let span = ProbeInfo {
            name: format!("{provider}:{base}"),
            kind: crate::probes::ProbeKind::UsdtSpan,
            target: end.target.clone(),
            offset: plan.probes[begin_id as usize].offset,
            capture: Default::default(),
        };
        plan.probes.push(span);
        let span = (plan.probes.len() - 1) as u32;
        if let Some(p) = plan.usdt_probes.get_mut(&begin_id) {
            p.role = Role::Begin { span };
        }
        if let Some(p) = plan.usdt_probes.get_mut(&end_id) {
            p.role = Role::End { span };
        }
    }
}
