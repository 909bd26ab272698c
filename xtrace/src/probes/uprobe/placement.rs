//! Where one function's probes go: the file offset of its entry probe, whether its exits are
//! probed at their instructions or by a return probe, or why it cannot be traced at all (an IFUNC
//! whose code is unknown, a function entered without a return address, one whose exits cannot be
//! probed where a return probe would break it, an entry instruction the kernel refuses).

use crate::probes::{
    elf::{ElfSymbols, FunctionSymbol},
    entry::{EntryMode, EntrySites},
    exits::{self, ExitMode, ExitSite},
    ifunc::Ifunc,
    insn,
};
use crate::{
    error::{Error, Result},
    target::TargetFile,
};

/// Where a function's probes go: its entry probe's file offset, and where its exits are probed
/// (None: a return probe).
pub type Placed = (u64, Option<Vec<ExitSite>>);

/// Why a matched function is not traced.
#[derive(Clone, Debug)]
pub enum Untraceable {
    /// Its first instruction is one the kernel's uprobes refuse ([`insn::refused`]).
    Refused(String),
    /// It returns twice ([`crate::probes::names::returns_twice`]) and its exit instructions cannot be
    /// probed, while a return probe would break its second return.
    ReturnsTwice,
    /// It is Go code ([`ElfSymbols::go`]) whose exit instructions cannot be probed, while a return
    /// probe would make the Go runtime abort the process.
    GoStack,
    /// It is entered without a return address ([`FunctionSymbol::uncalled`]).
    Uncalled,
    /// It is an IFUNC whose implementation is unknown ([`Ifunc::Unresolved`]).
    Ifunc,
    /// It is an IFUNC whose implementation is outside its file ([`Ifunc::Outside`]).
    IfuncOutside,
    /// It is an IFUNC whose resolver picks nothing ([`Ifunc::PicksNothing`]).
    IfuncPicksNothing,
    /// It unwinds the stack from its own frame ([`crate::probes::names::unwinds_own_stack`]).
    Unwinds,
    /// Its exits are to be probed at their instructions, and it has none that can be (it leaves
    /// through an indirect jump, or never returns): its calls would never end.
    NoExit,
}

impl Untraceable {
    /// The error of a function named exactly (`symbol` of `path`) that cannot be traced so.
    pub(super) fn into_error(self, path: std::path::PathBuf, symbol: String) -> Error {
        match self {
            Untraceable::Refused(why) => Error::Unprobeable { path, symbol, why },
            Untraceable::ReturnsTwice => Error::ReturnsTwice { path, symbol },
            Untraceable::GoStack => Error::GoStack { path, symbol },
            Untraceable::Uncalled => Error::Uncalled { path, symbol },
            Untraceable::Ifunc => Error::IfuncUnresolved { path, symbol },
            Untraceable::IfuncOutside => Error::IfuncOutside { path, symbol },
            Untraceable::IfuncPicksNothing => Error::IfuncPicksNothing { path, symbol },
            Untraceable::Unwinds => Error::UnwindsOwnStack { path, symbol },
            Untraceable::NoExit => Error::NoProbeableExit { path, symbol },
        }
    }
}

/// Where `function`'s probes go (in `file`, read through `code`): the file offset of its entry
/// probe and where its exits are probed (None: a return probe); or why it is not traced.
/// `arguments` is how many argument registers its spec captures.
pub fn placement(
    (entries, exits): (EntryMode, ExitMode),
    (file, code): (&TargetFile, &std::fs::File),
    symbols: &ElfSymbols,
    function: &FunctionSymbol,
    arguments: usize,
    entry_sites: &mut EntrySites,
) -> Result<std::result::Result<Placed, Untraceable>> {
    match function.ifunc {
        Ifunc::Unresolved => return Ok(Err(Untraceable::Ifunc)),
        Ifunc::Outside => return Ok(Err(Untraceable::IfuncOutside)),
        Ifunc::PicksNothing => return Ok(Err(Untraceable::IfuncPicksNothing)),
        Ifunc::No | Ifunc::Resolved { .. } => {}
    }
    if function.uncalled {
        return Ok(Err(Untraceable::Uncalled));
    }
    if crate::probes::names::unwinds_own_stack(&function.name) {
        return Ok(Err(Untraceable::Unwinds));
    }
    let sites = exit_sites(exits, (file, code), symbols, (function, function.probe_offset))?;
    if sites.as_ref().is_none_or(Vec::is_empty) && no_return_probe(exits, symbols, function) {
        // No exit to end its spans at (say `jmp *%r8`), and a return probe is no option.
        return Ok(Err(if function.returns_twice {
            Untraceable::ReturnsTwice
        } else {
            Untraceable::GoStack
        }));
    }
    if sites.as_ref().is_some_and(Vec::is_empty) {
        // Exits wanted at their instructions, in code with exception tables, and none found.
        return Ok(Err(Untraceable::NoExit));
    }
    let moved = entry_sites
        .offset(entries, code, symbols, function, arguments)
        .map_err(unreadable(file))?;
    // A moved entry on an exit (a tail call's `jmp`) would make one probe both: it stays.
    let entry = match &sites {
        Some(sites) if sites.iter().any(|s| s.offset == moved) => function.probe_offset,
        _ => moved,
    };
    // Where the entry probe goes, past what entry moves may pass (a vector instruction the
    // kernel would not run, say), the kernel must take and run the instruction.
    if let Some(why) = insn::refused(code, entry).map_err(unreadable(file))? {
        return Ok(Err(Untraceable::Refused(why)));
    }
    Ok(Ok((entry, sites)))
}

/// The error for a failed read of `file`.
pub(super) fn unreadable(file: &TargetFile) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::Unreadable {
        path: file.shown.clone(),
        reason: e.to_string(),
    }
}

/// Whether a return probe on `function` would break its process under `mode`: it returns twice
/// (under every mode), or it is Go code (unless `--exits uretprobe` asks for return probes).
fn no_return_probe(mode: ExitMode, symbols: &ElfSymbols, function: &FunctionSymbol) -> bool {
    function.returns_twice || (symbols.go && mode != ExitMode::Uretprobe)
}

/// Where `function`'s exits are probed under `mode`, its entry being probed at file offset
/// `entry`: None for a return probe. Where a return probe is no option ([`no_return_probe`]),
/// its exits are probed at their instructions under every mode.
fn exit_sites(
    mode: ExitMode,
    (file, code): (&TargetFile, &std::fs::File),
    symbols: &ElfSymbols,
    (function, entry): (&FunctionSymbol, u64),
) -> Result<Option<Vec<ExitSite>>> {
    let unsafe_return = no_return_probe(mode, symbols, function);
    let wanted = unsafe_return
        || match mode {
            ExitMode::Uretprobe => false,
            ExitMode::Auto => symbols.cxx_exceptions,
            ExitMode::Ret => true,
        };
    if !wanted {
        return Ok(None);
    }
    let found = exits::find(code, symbols, function).map_err(unreadable(file))?;
    let Some(found) = found else {
        return Ok(None); // no size: the code cannot be decoded
    };
    if mode == ExitMode::Auto && !found.calls_out && !unsafe_return {
        // A leaf: nothing it runs can throw through it. (The Go runtime walks a leaf's stack
        // too: when it preempts it, or a signal lands in it.)
        return Ok(None);
    }
    if found.sites.iter().any(|s| s.offset == entry) {
        return Ok(None); // its entry is its exit: one probe cannot be both
    }
    if found.refused {
        return Ok(None); // an exit uprobes refuse (a `cs`-prefixed `jmp`, say): a return probe
    }
    // It may leave through code no symbol names (stripped libc's `pthread_mutex_unlock` ends in
    // `jmp` to an unnamed function): probed at the exits found, such calls would never end. A
    // return probe sees every return, where nothing can unwind through it (no exception tables,
    // not Go) and it returns once; elsewhere the exits found are kept, and a call that leaves
    // unseen is counted unmatched.
    // So does a function with no exit found at all (it never returns), whose spans could never
    // end at one.
    if (found.unseen_exit || found.sites.is_empty()) && !symbols.cxx_exceptions && !unsafe_return {
        return Ok(None);
    }
    Ok(Some(found.sites))
}
