//! Finding the CUDA libraries a target uses and planning a span probe on each traced function:
//! `libcudart.so*` and `libcuda.so*` wherever the process maps them (copies bundled by Python
//! wheels included), and a main executable that links cudart statically.
use std::path::Path;

use crate::{
    error::{Error, Result},
    model::cuda_api::{expected, Function, Library, FUNCTIONS},
    probes::{
        elf::SymbolCache,
        needed::needed_libraries,
        uprobe::{Attachment, Plan, Scope},
        Capture, ProbeInfo,
    },
    target::{library_from_cache, library_matches, TargetFile},
};

/// The library `path` provides, by its file name.
pub(crate) fn library_of(path: &Path) -> Option<Library> {
    let path = path.to_string_lossy();
    if library_matches(&path, "libcudart") {
        Some(Library::Runtime)
    } else if library_matches(&path, "libcuda") {
        Some(Library::Driver)
    } else {
        None
    }
}

/// The CUDA libraries of one scope, with the library each provides.
fn libraries(scope: &Scope, elves: &mut SymbolCache) -> Result<Vec<(TargetFile, Library)>> {
    let mut found = Vec::new();
    let mut candidates = match scope {
        Scope::SystemWide => Vec::new(),
        _ => scope.modules()?,
    };
    if let Scope::Command(program) = scope {
        candidates.extend(needed_libraries(&program.path));
    }
    if !matches!(scope, Scope::Process(_)) {
        // Not running yet, or every process: also the system's libraries (libcudart loads
        // libcuda with dlopen).
        candidates.extend(
            ["libcudart", "libcuda"]
                .iter()
                .filter_map(|n| library_from_cache(n).ok()),
        );
    }
    let mut unique: Vec<TargetFile> = Vec::new();
    for file in candidates {
        if !unique.iter().any(|u| u.shown == file.shown) {
            unique.push(file);
        }
    }
    let candidates = unique;
    for (index, file) in candidates.into_iter().enumerate() {
        match library_of(&file.shown) {
            Some(library) => found.push((file, library)),
            // The main executable (first in a process's modules), when it links cudart statically.
            None if index == 0
                && !matches!(scope, Scope::SystemWide)
                && elves
                    .get(&file)
                    .is_ok_and(|(s, _)| s.functions.iter().any(|f| f.name == "cudaLaunchKernel")) =>
            {
                found.push((file, Library::Runtime));
            }
            None => {}
        }
    }
    Ok(found)
}

/// Adds a span probe on every CUDA function found in every scope; records each probe's function
/// in `plan.cuda`. Returns how many libraries were found; notices name the functions a library
/// lacks. `required` (`--cuda` given) makes finding none an error.
pub fn plan(plan: &mut Plan, (scopes, elves): (&[Scope], &mut SymbolCache), required: bool) -> Result<usize> {
    let mut libraries_found = 0;
    let mut seen: Vec<std::path::PathBuf> = Vec::new();
    for (scope_index, scope) in scopes.iter().enumerate() {
        for (file, library) in libraries(scope, elves)? {
            let (symbols, _) = elves.get(&file)?;
            libraries_found += 1;
            let first_time = !seen.contains(&file.shown);
            seen.push(file.shown.clone());
            let mut missing = Vec::new();
            for function in FUNCTIONS.iter().filter(|f| f.library == library) {
                let Some(symbol) = symbols.functions.iter().find(|s| s.name == function.name) else {
                    if expected(function) {
                        missing.push(function.name);
                    }
                    continue;
                };
                let id = probe_id(plan, &file, symbol.probe_offset, function);
                plan.attachments.push(Attachment {
                    probe_id: id,
                    file: file.clone(),
                    offset: symbol.probe_offset,
                    scope: scope_index,
                    exits: None,
                    go_stack_check: false,
                    go: false,
                });
            }
            if let (Some(notice), true) = (lacks(&file.shown, &missing), first_time) {
                plan.notices.push(notice);
            }
        }
    }
    if libraries_found == 0 && required {
        return Err(Error::Usage(
            "--cuda: the target has no CUDA library (libcudart.so*, libcuda.so*) loaded or linked, \
             no cudart linked statically, and no libc dlopen to watch for one (system-wide, or \
             glibc before 2.34); attach with --pid once the program has loaded CUDA"
                .into(),
        ));
    }
    Ok(libraries_found)
}

/// The warning for library `file` that lacks the expected CUDA functions `missing`, if any.
pub fn lacks(file: &std::path::Path, missing: &[&str]) -> Option<String> {
    (!missing.is_empty()).then(|| {
        format!(
            "{} lacks {} CUDA function{}, not traced: {}",
            file.display(),
            missing.len(),
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", ")
        )
    })
}

/// The probe id of `function` at `offset` in `file`, adding the probe the first time.
fn probe_id(plan: &mut Plan, file: &TargetFile, offset: u64, function: &Function) -> u32 {
    let (id, added) = plan.probe_at(ProbeInfo {
        name: function.name.to_string(),
        kind: crate::probes::ProbeKind::Cuda,
        target: file.shown.display().to_string(),
        offset,
        capture: Capture::default(),
    });
    if added {
        plan.cuda.insert(id, *function);
    }
    id
}

/// Whether any of `process`'s mapped files is a CUDA library (for turning `--cuda` on by itself).
pub fn maps_cuda(files: &[TargetFile]) -> bool {
    files.iter().any(|f| library_of(&f.shown).is_some())
}
