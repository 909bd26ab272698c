//! CUDA libraries a target loads after recording started (Python imports torch, which `dlopen`s
//! `libcudart.so*` from its wheel; cudart loads `libcuda.so.1` at its first call). With `--cuda`
//! the plan gets a span probe on `dlopen` in each target's libc, and a block of probe ids, one per
//! CUDA function, whose kernel-map slots exist from the start. When a `dlopen` returns, the
//! process's mappings are read again and each CUDA library not yet traced in it is attached with
//! the block's ids.
use std::{collections::HashSet, os::unix::fs::MetadataExt};

use super::plan::library_of;
use crate::{
    error::Result,
    model::cuda_api::{expected, FUNCTIONS},
    probes::{
        elf::SymbolCache,
        needed::needed_libraries,
        spec::ArgType,
        uprobe::{Attachment, Plan, Scope, Watch},
        Capture, ProbeInfo, ProbeKind,
    },
    target::{library_matches, Process, TargetFile},
};

/// Adds the block of late CUDA probes and a `dlopen` probe in the libc of every scope (a process,
/// or a command's `DT_NEEDED` libc). Returns false, planning nothing, when no scope's libc exports
/// `dlopen` (glibc before 2.34 keeps it in libdl).
pub fn plan_watch(plan: &mut Plan, scopes: &[Scope], elves: &mut SymbolCache) -> Result<bool> {
    let mut loaders = Vec::new();
    let mut attachments = Vec::new();
    for (scope_index, scope) in scopes.iter().enumerate() {
        let files = match scope {
            Scope::Process(_) => scope.modules()?,
            Scope::Command(program) => needed_libraries(&program.path),
            Scope::SystemWide => continue,
        };
        let Some(libc) = files
            .into_iter()
            .find(|f| library_matches(&f.shown.to_string_lossy(), "libc"))
        else {
            continue;
        };
        let Ok((symbols, _)) = elves.get(&libc) else {
            continue;
        };
        let Some(dlopen) = symbols.functions.iter().find(|s| s.name == "dlopen") else {
            continue;
        };
        let (id, _) = plan.probe_at(ProbeInfo {
            name: "dlopen".into(),
            kind: ProbeKind::Loader,
            target: libc.shown.display().to_string(),
            offset: dlopen.probe_offset,
            capture: Capture {
                args: vec![ArgType::Str],
                ret: None,
                go: false,
            },
        });
        if !loaders.contains(&id) {
            loaders.push(id);
        }
        attachments.push(Attachment {
            probe_id: id,
            file: libc,
            offset: dlopen.probe_offset,
            scope: scope_index,
            exits: None,
            go_stack_check: false,
            go: false,
        });
    }
    if loaders.is_empty() {
        return Ok(false);
    }
    plan.attachments.extend(attachments);
    let block = plan.probes.len() as u32;
    for (index, function) in FUNCTIONS.iter().enumerate() {
        // Not attached (no target) until a library providing the function is loaded.
        plan.probes.push(ProbeInfo {
            name: function.name.to_string(),
            kind: ProbeKind::Cuda,
            target: String::new(),
            offset: 0,
            capture: Capture::default(),
        });
        plan.cuda.insert(block + index as u32, *function);
    }
    plan.watch = Some(Watch { block, loaders });
    Ok(true)
}

/// The CUDA libraries traced so far, per scope, and the symbols read.
pub struct Late {
    /// The id of the first kept probe (`Watch::block`).
    block: u32,
    /// (scope, device, inode): a library can be named by several paths (links, the linker cache).
    traced: HashSet<(usize, u64, u64)>,
    elves: SymbolCache,
}

/// Probes planned for a library found late.
pub struct Found {
    pub file: TargetFile,
    pub attachments: Vec<Attachment>,
    /// The expected functions it lacks (see `super::plan::lacks`).
    pub missing: Vec<&'static str>,
}

impl Late {
    /// Starts from the libraries the plan traces already.
    pub fn new(plan: &Plan) -> Option<Late> {
        let block = plan.watch.as_ref()?.block;
        let traced = plan
            .attachments
            .iter()
            .filter(|a| plan.cuda.contains_key(&a.probe_id))
            .filter_map(|a| identity(a.scope, &a.file))
            .collect();
        Some(Late {
            block,
            traced,
            elves: SymbolCache::default(),
        })
    }

    /// The CUDA libraries `process` (scope `scope`) maps that are not traced in it yet, with their
    /// probes planned on the block's ids; the plan's probe entries get the library as their target
    /// (the first library found for an id keeps it).
    pub fn scan(&mut self, plan: &mut Plan, scope: usize, process: &Process) -> Result<Vec<Found>> {
        let mut found = Vec::new();
        for file in process.mapped_files()? {
            let Some(library) = library_of(&file.shown) else {
                continue;
            };
            match identity(scope, &file) {
                Some(key) if self.traced.insert(key) => {}
                _ => continue,
            }
            let Ok((symbols, _)) = self.elves.get(&file) else {
                continue;
            };
            let (mut attachments, mut missing) = (Vec::new(), Vec::new());
            for (index, function) in FUNCTIONS.iter().enumerate() {
                if function.library != library {
                    continue;
                }
                let Some(symbol) = symbols.functions.iter().find(|s| s.name == function.name) else {
                    if expected(function) {
                        missing.push(function.name);
                    }
                    continue;
                };
                let id = self.block + index as u32;
                let probe = &mut plan.probes[id as usize];
                if !probe.is_placed() {
                    probe.target = file.shown.display().to_string();
                    probe.offset = symbol.probe_offset;
                }
                attachments.push(Attachment {
                    probe_id: id,
                    file: file.clone(),
                    offset: symbol.probe_offset,
                    scope,
                    exits: None,
                    go_stack_check: false,
                    go: false,
                });
            }
            if !attachments.is_empty() {
                found.push(Found {
                    file,
                    attachments,
                    missing,
                });
            }
        }
        Ok(found)
    }
}

/// A file in a scope, by device and inode.
fn identity(scope: usize, file: &TargetFile) -> Option<(usize, u64, u64)> {
    let meta = std::fs::metadata(&file.open).ok()?;
    Some((scope, meta.dev(), meta.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_is_watched_through_its_needed_libc() {
        let mut plan = Plan::default();
        let sh = crate::launch::Program::open(std::path::Path::new("/bin/sh")).unwrap();
        assert!(plan_watch(&mut plan, &[Scope::Command(&sh)], &mut SymbolCache::default()).unwrap());
        let watch = plan.watch.clone().expect("a watch");
        assert_eq!(watch.loaders, [0]);
        let dlopen = &plan.probes[0];
        assert_eq!((dlopen.name.as_str(), dlopen.kind), ("dlopen", ProbeKind::Loader));
        assert!(library_matches(&dlopen.target, "libc"), "{}", dlopen.target);
        assert_eq!(plan.attachments.len(), 1);
        assert_eq!(plan.attachments[0].scope, 0);
        // One kept probe per CUDA function, none attached.
        assert_eq!(watch.block, 1);
        assert_eq!(plan.probes.len(), 1 + FUNCTIONS.len());
        assert!(plan.probes[1..]
            .iter()
            .all(|p| !p.is_placed() && p.kind == ProbeKind::Cuda));
        assert_eq!(plan.cuda.len(), FUNCTIONS.len());
    }
}
