//! Function symbols of an ELF file (`.symtab` and `.dynsym`) with their file offsets, for attaching
//! uprobes by name and for suggesting close names when a name is not found.
use std::{
    borrow::Cow,
    collections::{hash_map::Entry, HashMap},
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU32, Ordering},
        OnceLock,
    },
};

use super::{
    ifunc::{Ifunc, ImplementationSizes},
    names::strip_args,
};
use crate::{
    elf::debug_file::DebugDirs,
    error::{Error, Result},
    target::TargetFile,
};

#[cfg(test)]
mod cxxfilt_tests;
mod read;

/// Symbols of the files read so far, by device and inode: a file that several processes map (or
/// that two probe families need) is read once. Stripped files' debug files are looked for in
/// `dirs`.
#[derive(Default)]
pub struct SymbolCache {
    files: HashMap<(u64, u64), ElfSymbols>,
    dirs: DebugDirs,
}

impl SymbolCache {
    pub fn new(dirs: DebugDirs) -> Self {
        SymbolCache {
            files: HashMap::new(),
            dirs,
        }
    }

    /// Where debug files are looked for.
    pub fn dirs(&self) -> &DebugDirs {
        &self.dirs
    }

    /// The symbols of `file`, and whether this is the first time it was asked for.
    pub fn get(&mut self, file: &TargetFile) -> Result<(&ElfSymbols, bool)> {
        let meta = target_metadata(&file.open, &file.shown)?;
        match self.files.entry((meta.dev(), meta.ino())) {
            Entry::Occupied(known) => Ok((known.into_mut(), false)),
            Entry::Vacant(new) => Ok((
                new.insert(ElfSymbols::read(&file.open, &file.shown, &self.dirs)?),
                true,
            )),
        }
    }
}

/// A defined function symbol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionSymbol {
    /// The name as stored (possibly mangled).
    pub name: String,
    /// The readable name.
    pub demangled: String,
    /// Offset of the first instruction in the file: what the kernel's uprobe interface takes.
    pub file_offset: u64,
    /// The symbol's value (virtual address in the file's layout).
    pub address: u64,
    /// The symbol's size in bytes (0 when the symbol table does not say).
    pub size: u64,
    /// Where entry probes go: `file_offset`, or the next instruction when the function starts with
    /// `endbr64`. x86 uprobes single-step `endbr64` (~10 µs a hit) where they emulate the `push`
    /// or `nop` that usually follows (< 1 µs); it changes no register and no memory, so a probe
    /// after it sees the same arguments, stack pointer and return address.
    pub probe_offset: u64,
    /// Some name at this address is of a function that returns twice ([`returns_twice`]).
    pub returns_twice: bool,
    /// It is entered without a return address on the stack ([`uncalled`], or the file's entry
    /// point): where a return probe would write its trampoline lies something else.
    pub uncalled: bool,
    /// Whether the symbol is a GNU indirect function, and then whether the offsets above are of
    /// the implementation its resolver picks ([`super::ifunc`]).
    pub ifunc: Ifunc,
    /// The source file a local symbol was compiled from, as the symbol table's `STT_FILE` entry
    /// before it names it (`malloc.c`); None for a global symbol or a table without one.
    pub unit: Option<std::sync::Arc<str>>,
}

/// `endbr64`, which code built with `-fcf-protection` (Ubuntu's default) starts every function with.
const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// The file offset of file address `address` in `segments` ((address, bytes in the file, file
/// offset) each), when one holds it, and how many bytes of that segment start there.
fn segment_offset(segments: &[(u64, u64, u64)], address: u64) -> Option<(u64, u64)> {
    segments
        .iter()
        .find(|(start, size, _)| address >= *start && address - start < *size)
        .and_then(|(start, size, offset)| {
            let into = address - start;
            Some((into.checked_add(*offset)?, size - into))
        })
}

/// `size` for code at `address` with `room` bytes of its segment from there; 0 (unsized, as a
/// symbol of size 0 is) where it runs past the segment or the address space: damage.
fn fitting(address: u64, size: u64, room: u64) -> u64 {
    if size <= room && address.checked_add(size).is_some() {
        size
    } else {
        0
    }
}

/// Where the entry probe of the function at `file_offset` of `size` bytes, whose code starts with
/// `code`, goes: past a leading `endbr64` (see [`FunctionSymbol::probe_offset`]).
fn entry_offset(code: Option<&[u8]>, file_offset: u64, size: u64) -> u64 {
    match code.and_then(|c| c.get(..4)) {
        Some(first) if first == ENDBR64 && size != 4 => file_offset + 4,
        _ => file_offset,
    }
}

#[derive(Debug)]
pub struct ElfSymbols {
    pub path: PathBuf,
    pub functions: Vec<FunctionSymbol>,
    /// No `.symtab`, and no debug file with one: only the exported functions of `.dynsym` are
    /// known.
    pub stripped: bool,
    /// The separate debug file whose `.symtab` named the functions of this stripped file.
    pub debug_file: Option<PathBuf>,
    /// A debug file found for this stripped file but not taken, and why (`PATH (why)`).
    pub debug_refused: Option<String>,
    /// C++ or Rust code with exception tables (`.gcc_except_table`, and a reference to
    /// `__gxx_personality_v0` or `rust_eh_personality`): an exception or panic unwinding through a
    /// function with a return probe aborts the process, as the unwinder cannot walk the kernel's
    /// trampoline. (C code built with -fexceptions, such as libc for thread cancellation, has the
    /// tables with C's personality routine; it throws nothing and is left out.)
    pub cxx_exceptions: bool,
    /// C code with exception tables (`.gcc_except_table` without a C++ or Rust personality
    /// routine): glibc, for thread cancellation. A thread cancelled, or ending with
    /// `pthread_exit`, beneath a return probe of any function skips the cleanup handlers and
    /// destructors of the frames above it (the unwinder cannot pass the trampoline).
    pub c_cleanups: bool,
    /// Go code (a `.go.buildinfo` section or a `.note.go.buildid` note): the Go runtime walks its
    /// goroutines' stacks (garbage collection, stack growth, preemption, tracebacks) and aborts
    /// the process at a return address it cannot place, such as a return probe's trampoline.
    /// Its functions also take their arguments in Go's register ABI, not the System V one.
    pub go: bool,
    /// The cold parts of split functions (`f.cold`), sorted by address: not functions, but code
    /// their functions jump to (see [`super::exits`]).
    pub cold_parts: Vec<CodeRange>,
    /// The executable sections (`.text`, `.plt`, ...): all the code any jump could come from.
    pub code: Vec<CodeRange>,
    /// Addresses of function entries, sorted: where a tail call can jump.
    starts: Vec<u64>,
    /// Addresses in the code that other symbols name (a label of hand-written assembly, an
    /// untyped global), sorted: code may be entered there too.
    labels: Vec<u64>,
    /// The PLT sections' address ranges: a jump there is a call of another module's function.
    plt: Vec<(u64, u64)>,
    /// The loadable segments: (address, bytes in the file, file offset).
    segments: Vec<(u64, u64, u64)>,
    /// What sizes an IFUNC's implementation.
    sizes: ImplementationSizes,
    /// (hash of one of a function's [`names`], its index in `functions`), sorted: see
    /// [`ElfSymbols::named`].
    by_name: OnceLock<Vec<(u32, u32)>>,
    /// Names looked up by comparing every function's names, before the index is built.
    scans: AtomicU32,
}

/// The names `-u` finds a function by: its stored (mangled) name, the demangled name, that
/// without its parameter list or GCC's clone suffixes, and as a user may write it
/// ([`super::names::bare`]).
fn names(f: &FunctionSymbol) -> impl Iterator<Item = Cow<'_, str>> {
    [
        f.name.as_str(),
        f.demangled.as_str(),
        strip_args(&f.demangled),
        super::names::without_clones(&f.demangled),
    ]
    .into_iter()
    .map(Cow::Borrowed)
    .chain(std::iter::once_with(|| super::names::bare(&f.demangled).map(Cow::Owned)).flatten())
}

/// Names [`ElfSymbols::named`] looks up by comparing every function's names before it builds
/// its index, which costs about three such lookups.
const SCANS_BEFORE_INDEX: u32 = 4;

/// FNV-1a of `name`, 32 bits: the key of [`ElfSymbols::named`]'s index.
fn name_hash(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// A run of code in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodeRange {
    pub address: u64,
    pub size: u64,
    pub file_offset: u64,
}

/// The metadata of the TARGET file at `open` (named `shown` in errors). Refuses one that cannot be
/// read, and what is not a regular file (a directory, a FIFO whose open would block, a device
/// that never ends) before it is opened.
pub fn target_metadata(open: &Path, shown: &Path) -> Result<std::fs::Metadata> {
    let meta = std::fs::metadata(open).map_err(|e| Error::Unreadable {
        path: shown.to_path_buf(),
        reason: format!("{e}; check the path"),
    })?;
    regular_file(&meta, shown)?;
    Ok(meta)
}

fn regular_file(meta: &std::fs::Metadata, shown: &Path) -> Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let kind = meta.file_type();
    let what = if kind.is_file() {
        return Ok(());
    } else if kind.is_dir() {
        "directory"
    } else if kind.is_fifo() {
        "FIFO"
    } else if kind.is_char_device() {
        "character device"
    } else if kind.is_block_device() {
        "block device"
    } else if kind.is_socket() {
        "socket"
    } else {
        "special file"
    };
    Err(Error::NotAFile {
        path: shown.to_path_buf(),
        what,
    })
}

impl ElfSymbols {
    /// Whether `address` is in a PLT section.
    fn in_plt(&self, address: u64) -> bool {
        self.plt.iter().any(|(a, b)| (*a..*b).contains(&address))
    }

    /// Whether file address `address` is in the file's code outside its PLT: where an IFUNC's
    /// implementation can be.
    pub(crate) fn holds_code(&self, address: u64) -> bool {
        let in_code = self
            .code
            .iter()
            .any(|c| (c.address..c.address + c.size).contains(&address));
        in_code && !self.in_plt(address)
    }

    /// IFUNC `function`, whose resolver is at file address `resolver`, as it is probed where that
    /// resolver picked the code at file address `implementation` (in a traced process: see
    /// [`super::ifunc::InProcess`]); `code` reads the file. None when that is no code of the file.
    pub fn at_implementation(
        &self,
        function: &FunctionSymbol,
        (resolver, implementation): (u64, u64),
        code: &std::fs::File,
    ) -> Option<FunctionSymbol> {
        use std::os::unix::fs::FileExt;
        if !self.holds_code(implementation) {
            return None;
        }
        let (file_offset, room) = segment_offset(&self.segments, implementation)?;
        let size = fitting(implementation, self.sizes.of(implementation, file_offset), room);
        let mut first = [0u8; 4];
        let read = code.read_at(&mut first, file_offset).ok()?;
        Some(FunctionSymbol {
            file_offset,
            address: implementation,
            size,
            probe_offset: entry_offset(Some(&first[..read]), file_offset, size),
            ifunc: Ifunc::Resolved { resolver },
            ..function.clone()
        })
    }

    /// Whether `function` is Go code: a function of a Go file whose name is a Go one, qualified by
    /// its package (`main.f`, `runtime.mallocgc`, `main.(*T).M`). The C code of a cgo program
    /// (`c_func`, `_cgo_...`, `crosscall2`, or GCC's clones `f.part.0`, `f.isra.0`) is not: it
    /// takes its arguments in System V's registers and runs on the thread's own stack.
    pub fn go_code(&self, function: &FunctionSymbol) -> bool {
        const C_CLONES: [&str; 5] = [".part.", ".isra.", ".constprop.", ".lto_priv.", ".localalias"];
        self.go && function.name.contains('.') && !C_CLONES.iter().any(|c| function.name.contains(c))
    }

    /// Whether a function starts in `start..=end`, or another symbol names an address there.
    pub(crate) fn starts_in(&self, start: u64, end: u64) -> bool {
        [&self.starts, &self.labels].iter().any(|sorted| {
            let i = sorted.partition_point(|&a| a < start);
            sorted.get(i).is_some_and(|&a| a <= end)
        })
    }

    /// The first function start after `address`, or `u64::MAX`.
    pub(crate) fn next_start(&self, address: u64) -> u64 {
        let i = self.starts.partition_point(|&a| a <= address);
        self.starts.get(i).copied().unwrap_or(u64::MAX)
    }

    /// What a jump from a function to `target`, outside it, lands on.
    pub(crate) fn landing(&self, target: u64) -> super::exits::Landing {
        use super::exits::Landing;
        if self.starts.binary_search(&target).is_ok() || self.in_plt(target) {
            return Landing::Function;
        }
        let after = self.cold_parts.partition_point(|c| c.address <= target);
        match after.checked_sub(1) {
            Some(i)
                if target
                    < self.cold_parts[i]
                        .address
                        .saturating_add(self.cold_parts[i].size.max(1)) =>
            {
                Landing::Cold(i)
            }
            _ => Landing::Unknown,
        }
    }

    /// The functions that `pattern` names: an exact name, or a glob (see [`super::glob`]), matched
    /// against the stored (mangled) name, the demangled name, and the demangled name without its
    /// parameter list. One function per file offset: of several names at one address (aliases),
    /// the one with the fewest leading underscores, then the shortest (an IFUNC whose code is
    /// unknown is kept apart from the resolver it stands at). Sorted by offset; an error
    /// listing up to five close names when nothing matches.
    pub fn find(&self, pattern: &str) -> Result<Vec<&FunctionSymbol>> {
        // A name that reads as a glob but names a function exactly is that function: Go's
        // `main.(*T).M` (not `main.(*ST).M` too), `main.Sum[go.shape.int_0]`.
        let mut found = self.named(pattern);
        if found.is_empty() && super::glob::is_glob(pattern) {
            found = self
                .functions
                .iter()
                .filter(|f| names(f).any(|name| super::glob::matches(pattern, &name)))
                .collect();
        }
        let underscores = |name: &str| name.len() - name.trim_start_matches('_').len();
        // An IFUNC whose code is not known stands at its resolver, and is no alias of it: a glob
        // keeps the resolver, a function the dynamic linker calls, beside the IFUNC it leaves out.
        let unplaced = |f: &FunctionSymbol| f.ifunc.unplaced();
        found.sort_by(|a, b| {
            (
                a.file_offset,
                unplaced(a),
                underscores(&a.name),
                a.name.len(),
                &a.name,
            )
                .cmp(&(
                    b.file_offset,
                    unplaced(b),
                    underscores(&b.name),
                    b.name.len(),
                    &b.name,
                ))
        });
        found.dedup_by_key(|f| (f.file_offset, unplaced(f)));
        if found.is_empty() {
            let query: String = pattern.chars().filter(|c| !matches!(c, '*' | '?')).collect();
            return Err(Error::SymbolNotFound {
                symbol: pattern.to_string(),
                path: self.path.clone(),
                stripped: self.stripped,
                debug_refused: self.debug_refused.clone(),
                close: self.close_names(&query),
            });
        }
        Ok(found)
    }

    /// The functions one of whose [`names`] is `name`, in the order of `functions`. The index is
    /// built at the first lookup: a plan of 1,000 functions looks up 1,000 names, and comparing
    /// each with every function's names was most of its planning (7.5 s of a 1,000-function plan
    /// on Linux 6.1 under qemu's emulation). It holds a 32-bit hash of each distinct name of a
    /// function and the function's index, 8 bytes each (about 3 MB for the 93,000 functions of
    /// librustc_driver at most, where its names as strings took 41 MB), and costs about one scan
    /// of every name to build; a hash shared by other names is told apart by comparing them. The
    /// first `SCANS_BEFORE_INDEX` lookups compare every name instead, so that a plan of a few
    /// names costs what it did.
    fn named(&self, name: &str) -> Vec<&FunctionSymbol> {
        if self.by_name.get().is_none() && self.scans.fetch_add(1, Ordering::Relaxed) < SCANS_BEFORE_INDEX {
            return self
                .functions
                .iter()
                .filter(|f| names(f).any(|n| n == name))
                .collect();
        }
        let by_name = self.by_name.get_or_init(|| {
            let mut by_name = Vec::with_capacity(self.functions.len() * 2);
            for (i, function) in self.functions.iter().enumerate() {
                let mut hashes: Vec<u32> = names(function).map(|n| name_hash(&n)).collect();
                hashes.sort_unstable();
                hashes.dedup();
                by_name.extend(hashes.into_iter().map(|h| (h, i as u32)));
            }
            by_name.sort_unstable();
            by_name
        });
        let hash = name_hash(name);
        let first = by_name.partition_point(|&(h, _)| h < hash);
        by_name[first..]
            .iter()
            .take_while(|&&(h, _)| h == hash)
            .map(|&(_, i)| &self.functions[i as usize])
            .filter(|f| names(f).any(|n| n == name))
            .collect()
    }

    /// Up to five function names close to `symbol`, closest first.
    fn close_names(&self, symbol: &str) -> Vec<String> {
        // Offered as a user may write them (see `names::bare`).
        let mut scored: Vec<(f64, String)> = self
            .functions
            .iter()
            .map(|f| {
                let name =
                    super::names::bare(&f.demangled).unwrap_or_else(|| strip_args(&f.demangled).to_string());
                let mut score = strsim::jaro_winkler(symbol, &name);
                if name.contains(symbol) || symbol.contains(name.as_str()) {
                    score += 0.5;
                }
                (score, name)
            })
            .filter(|(score, _)| *score > 0.7)
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut names: Vec<String> = Vec::new();
        for (_, name) in scored {
            if !names.contains(&name) {
                names.push(name);
            }
            if names.len() == 5 {
                break;
            }
        }
        names
    }
}

/// The end of the notice that a file is stripped: what to do about it, or which debug file was
/// found and not taken, and why.
pub fn debug_file_hint(refused: Option<&str>) -> String {
    match refused {
        Some(refused) => format!("; {refused} is not its debug file"),
        None => "; install its debug file (such as Debian's -dbgsym package), or name the directory \
                 that holds it with --debug-dir"
            .into(),
    }
}

#[cfg(test)]
#[path = "elf_tests.rs"]
mod tests;
