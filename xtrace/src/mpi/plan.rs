//! Planning `--mpi`: finding the MPI library a target uses (Open MPI's `libmpi.so*`, MPICH's
//! `libmpich.so*`), a span probe on each MPI function it exports, and the file offsets of its
//! predefined datatype objects (Open MPI's `MPI_INT` is the address of `ompi_mpi_int`), which
//! name a call's datatype and give its bytes.
use object::{Object, ObjectSymbol};

use crate::{
    elf::ExecSegments,
    error::{Error, Result},
    model::mpi_api::{functions, open_mpi_datatype},
    probes::{
        elf::SymbolCache,
        mpi_plan::{Datatype, Datatypes},
        needed::needed_libraries,
        planner::{Planner, Planning},
        uprobe::{Attachment, Plan, Scope},
        Capture, ProbeInfo, ProbeKind,
    },
    target::{library_matches, TargetFile},
};

/// `--mpi`, as a probe family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MpiMode(pub bool);

impl Planner for MpiMode {
    fn plan(&self, plan: &mut Plan, at: &mut Planning<'_>) -> Result<()> {
        if !self.0 {
            return Ok(());
        }
        let mut found = 0;
        for (scope_index, scope) in at.scopes.iter().enumerate() {
            for file in libraries(scope)? {
                found += 1;
                attach(plan, at.elves, &file, scope_index)?;
                add_datatypes(plan, &file);
            }
            // An executable whose code names MPI_INT holds its own copy of the object (a copy
            // relocation), and Open MPI's handles then point there.
            if let Some(program) = main_program(scope)? {
                add_datatypes(plan, &program);
            }
        }
        if found == 0 {
            return Err(Error::Usage(
                "--mpi: the target has no MPI library (libmpi.so*, libmpich.so*) loaded or linked; \
                 point xtrace at the MPI program itself (mpirun ... xtrace --mpi -- PROGRAM), or \
                 trace its functions with -u"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// Whether the file at `path` is an MPI library.
fn is_mpi(path: &str) -> bool {
    library_matches(path, "libmpi") || library_matches(path, "libmpich")
}

/// The MPI libraries of one scope: those a process maps, or a command will load at its start.
fn libraries(scope: &Scope) -> Result<Vec<TargetFile>> {
    let mut candidates = match scope {
        Scope::SystemWide => Vec::new(),
        _ => scope.modules()?,
    };
    if let Scope::Command(program) = scope {
        candidates.extend(needed_libraries(&program.path));
    }
    let mut found: Vec<TargetFile> = Vec::new();
    for file in candidates {
        if is_mpi(&file.shown.to_string_lossy()) && !found.iter().any(|f| f.shown == file.shown) {
            found.push(file);
        }
    }
    Ok(found)
}

/// A span probe on each MPI function `file` exports, and its datatypes.
fn attach(plan: &mut Plan, elves: &mut SymbolCache, file: &TargetFile, scope: usize) -> Result<()> {
    let (symbols, _) = elves.get(file)?;
    let mut attachments = Vec::new();
    for function in functions() {
        let Some(symbol) = symbols.functions.iter().find(|s| s.name == function.name) else {
            continue;
        };
        attachments.push((function, symbol.probe_offset));
    }
    for (function, offset) in attachments {
        let (id, added) = plan.probe_at(ProbeInfo {
            name: function.name.to_string(),
            kind: ProbeKind::Mpi,
            target: file.shown.display().to_string(),
            offset,
            capture: Capture::default(),
        });
        if added {
            plan.mpi.functions.insert(id, function);
        }
        plan.attachments.push(Attachment {
            probe_id: id,
            file: file.clone(),
            offset,
            scope,
            exits: None,
            go_stack_check: false,
            go: false,
        });
    }
    Ok(())
}

/// The main executable of `scope`: a launched command's, or a process's first module.
fn main_program(scope: &Scope) -> Result<Option<TargetFile>> {
    Ok(match scope {
        Scope::SystemWide => None,
        Scope::Command(program) => Some(program.target()),
        _ => scope.modules()?.into_iter().next(),
    })
}

/// Adds `file`'s datatypes to the plan, if it has any, once.
fn add_datatypes(plan: &mut Plan, file: &TargetFile) {
    // Keyed as the process's mappings name the file: a library found by its link name
    // (libmpi.so.40) is mapped by its real one (libmpi.so.40.30.4).
    let real = std::fs::canonicalize(&file.open).unwrap_or_else(|_| file.shown.clone());
    let name = crate::elf::symbolize::module_name(&real.to_string_lossy()).to_string();
    if plan.mpi.datatypes.contains_key(&name) {
        return;
    }
    let found = datatypes(file);
    if !found.by_address.is_empty() {
        plan.mpi.datatypes.insert(name, found);
    }
}

/// `file`'s predefined datatype objects (Open MPI's; MPICH's datatypes are handles that hold
/// their size, and need no table). Its symbols were read once already, to plan its probes; a
/// file that cannot be read again has none (its calls count without bytes).
fn datatypes(file: &TargetFile) -> Datatypes {
    let Ok(elf) = crate::elf::Elf::read(&file.open) else {
        return Datatypes::default();
    };
    let Ok(parsed) = elf.parse() else {
        return Datatypes::default();
    };
    let by_address = parsed
        .dynamic_symbols()
        .filter_map(|symbol| {
            let (name, size) = symbol.name().ok().and_then(open_mpi_datatype)?;
            Some((symbol.address(), Datatype { name, size }))
        })
        .collect();
    Datatypes {
        exec: ExecSegments::of(&parsed),
        by_address,
    }
}
