//! Function symbols of an ELF file (`.symtab` and `.dynsym`) with their file offsets, for attaching
//! uprobes by name and for suggesting close names when a name is not found.
use std::{
    collections::{hash_map::Entry, HashMap},
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SectionKind, SymbolKind};

use super::{
    ifunc::{Ifunc, ImplementationSizes, OwnCopy},
    names::{is_cold_part, returns_twice, strip_args, uncalled},
};
use crate::{
    demangle::demangle,
    error::{Error, Result},
    target::TargetFile,
};

/// Symbols of the files read so far, by device and inode: a file that several processes map (or
/// that two probe families need) is read once.
#[derive(Default)]
pub struct SymbolCache {
    files: HashMap<(u64, u64), ElfSymbols>,
}

impl SymbolCache {
    /// The symbols of `file`, and whether this is the first time it was asked for.
    pub fn get(&mut self, file: &TargetFile) -> Result<(&ElfSymbols, bool)> {
        let meta = target_metadata(&file.open, &file.shown)?;
        match self.files.entry((meta.dev(), meta.ino())) {
            Entry::Occupied(known) => Ok((known.into_mut(), false)),
            Entry::Vacant(new) => Ok((new.insert(ElfSymbols::read(&file.open, &file.shown)?), true)),
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
    /// Reads the function symbols of `path`. `shown` is the path to name in errors (the file may be
    /// opened through /proc/PID/root or /proc/PID/exe).
    pub fn read(path: &Path, shown: &Path) -> Result<Self> {
        let unreadable = |reason: String| Error::Unreadable {
            path: shown.to_path_buf(),
            reason,
        };
        let meta = target_metadata(path, shown)?;
        let data = std::fs::read(path).map_err(|e| {
            unreadable(format!(
                "{e}; give an executable or shared library that can be read"
            ))
        })?;
        let not_elf = |reason: String| Error::NotElf {
            path: shown.to_path_buf(),
            reason,
        };
        if !data.starts_with(b"\x7fELF") {
            return Err(not_elf("no ELF magic number".into()));
        }
        let file = object::File::parse(&*data).map_err(|e| not_elf(e.to_string()))?;
        if file.architecture() != object::Architecture::X86_64 {
            return Err(Error::NotX86_64 {
                path: shown.to_path_buf(),
                architecture: format!("{:?}", file.architecture()),
            });
        }
        // Only the bytes a segment has in the file, and the file holds: code is never in the
        // part of a segment that only memory has (.bss), and a damaged header can claim more.
        let segments: Vec<(u64, u64, u64)> = file
            .segments()
            .map(|s| {
                let (offset, size) = s.file_range();
                let size = size.min((data.len() as u64).saturating_sub(offset));
                (s.address(), size, offset)
            })
            .collect();
        let mut functions = Vec::new();
        let mut cold_parts = Vec::new();
        let mut throws = false;
        let versions = super::symver::Versions::read(&data);
        // Where this process maps the same file, to resolve IFUNCs: looked up at the first one.
        let mut own_copy: Option<Option<OwnCopy>> = None;
        let dynamic = file.dynamic_symbols().map(|s| (true, s));
        // A stripped file's `.symtab` from its separate debug file, where one matches: its
        // addresses are the file's, its sections hold no code (the file's own give offsets and
        // bytes).
        let debug = if file.symbols().next().is_none() {
            crate::debug_file::find(path, shown, &file)
        } else {
            crate::debug_file::Search::default()
        };
        // Mapped, not read: a debug file may be of gigabytes, of which the symbol table is read.
        let debug_data = debug.found.as_ref().and_then(|found| {
            let file = std::fs::File::open(&found.path).ok()?;
            // SAFETY: the map is only read, and only while this function runs. A debug file
            // truncated meanwhile would fault (SIGBUS) as under gdb or perf; a package update
            // replaces it by rename, which leaves the mapped one whole.
            unsafe { memmap2::Mmap::map(&file) }.ok()
        });
        let debug_elf = debug_data
            .as_deref()
            .and_then(|data| object::File::parse(data).ok());
        let mut debug = debug;
        if debug_elf.is_none() {
            if let Some(found) = debug.found.take() {
                debug.refused = Some(format!("{} (cannot be read)", found.shown.display()));
            }
        }
        let symtab = debug_elf.as_ref().unwrap_or(&file).symbols();
        // Addresses other symbols name than functions, sections and files: those in the code are
        // labels (kept below, once the code is known).
        let mut labels = Vec::new();
        // The compile unit of the local symbols that follow an `STT_FILE` entry.
        let mut unit: Option<std::sync::Arc<str>> = None;
        for (in_dynsym, symbol) in symtab.map(|s| (false, s)).chain(dynamic) {
            if symbol.kind() == SymbolKind::File && !in_dynsym {
                unit = symbol.name().ok().filter(|n| !n.is_empty()).map(Into::into);
                continue;
            }
            if !matches!(
                symbol.kind(),
                SymbolKind::Text | SymbolKind::Section | SymbolKind::File
            ) && symbol.address() != 0
            {
                labels.push(symbol.address());
            }
            let Ok(stored) = symbol.name() else { continue };
            throws |= matches!(stored, "__gxx_personality_v0" | "rust_eh_personality");
            let is_ifunc = super::ifunc::is_ifunc(&symbol);
            // `is_definition` is false for every IFUNC: one in a section of this file is defined.
            let defined = symbol.is_definition()
                || (is_ifunc && matches!(symbol.section(), object::SymbolSection::Section(_)));
            if symbol.kind() != SymbolKind::Text || !defined || symbol.address() == 0 {
                continue;
            }
            if stored.is_empty() {
                continue;
            }
            let name = if in_dynsym {
                versions.name(stored, symbol.index())
            } else {
                super::symver::default_version(stored).into()
            };
            let name = name.as_ref();
            let mut address = symbol.address();
            let mut size = symbol.size();
            let mut ifunc = Ifunc::No;
            if is_ifunc {
                let copy = own_copy.get_or_insert_with(|| OwnCopy::find(&meta));
                ifunc = match copy.as_ref().and_then(|c| c.resolve(address)) {
                    Some(Ok(implementation)) => {
                        let resolver = address;
                        (address, size) = (implementation, 0);
                        Ifunc::Resolved { resolver }
                    }
                    Some(Err(super::ifunc::NotInFile::Outside)) => Ifunc::Outside,
                    Some(Err(super::ifunc::NotInFile::Nothing)) => Ifunc::PicksNothing,
                    None => Ifunc::Unresolved,
                };
            }
            let Some((file_offset, room)) = segment_offset(&segments, address) else {
                continue;
            };
            size = fitting(address, size, room);
            if is_cold_part(name) {
                cold_parts.push(CodeRange {
                    address,
                    size: fitting(address, symbol.size(), room),
                    file_offset,
                });
                continue;
            }
            functions.push(FunctionSymbol {
                name: name.to_string(),
                demangled: demangle(name),
                file_offset,
                address,
                size,
                probe_offset: entry_offset(data.get(file_offset as usize..), file_offset, size),
                returns_twice: false,
                uncalled: false,
                ifunc,
                unit: (symbol.is_local() && !in_dynsym).then(|| unit.clone()).flatten(),
            });
        }
        // Where IFUNCs' implementations are sized: their unwind entries, read only for a file
        // that has IFUNCs.
        let unwind = if functions.iter().any(|f| f.ifunc != Ifunc::No) {
            object::read::elf::ElfFile64::<object::Endianness>::parse(&*data)
                .map(|elf| crate::export::fde::functions(&elf))
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        let sizes = ImplementationSizes {
            functions: functions
                .iter()
                .filter(|f| f.ifunc == Ifunc::No && f.size > 0)
                .map(|f| (f.address, f.size))
                .collect(),
            unwind,
        };
        for f in functions
            .iter_mut()
            .filter(|f| matches!(f.ifunc, Ifunc::Resolved { .. }))
        {
            let room = segment_offset(&segments, f.address).map_or(0, |(_, room)| room);
            f.size = fitting(f.address, sizes.of(f.address, f.file_offset), room);
            f.probe_offset = entry_offset(data.get(f.file_offset as usize..), f.file_offset, f.size);
        }
        // Aliases share the flag: `_setjmp` is traced under whichever of its names is kept.
        let twice: std::collections::HashSet<u64> = functions
            .iter()
            .filter(|f| returns_twice(&f.name))
            .map(|f| f.file_offset)
            .collect();
        // Aliases share this flag too; the entry point is entered by the kernel, whatever its name
        // (`_start`, Go's `_rt0_amd64_linux`, libc.so.6's own `__libc_main`).
        let entry = file.entry();
        let uncalled: std::collections::HashSet<u64> = functions
            .iter()
            .filter(|f| uncalled(&f.name) || (entry != 0 && f.address == entry))
            .map(|f| f.file_offset)
            .collect();
        for f in &mut functions {
            f.returns_twice = twice.contains(&f.file_offset);
            f.uncalled = uncalled.contains(&f.file_offset);
        }
        functions.sort_by(|a, b| (&a.name, a.file_offset).cmp(&(&b.name, b.file_offset)));
        functions.dedup_by(|a, b| a.name == b.name && a.file_offset == b.file_offset);
        let mut starts: Vec<u64> = functions.iter().map(|f| f.address).collect();
        starts.sort_unstable();
        starts.dedup();
        cold_parts.sort_by_key(|c| c.address);
        cold_parts.dedup();
        let plt = [".plt", ".plt.sec", ".plt.got"]
            .iter()
            .filter_map(|name| file.section_by_name(name))
            .map(|s| (s.address(), s.address().saturating_add(s.size())))
            .collect();
        // A damaged section header can claim more bytes than the file holds, or addresses past
        // the end of the address space: such a section is no code.
        let code: Vec<CodeRange> = file
            .sections()
            .filter(|s| s.kind() == SectionKind::Text)
            .filter_map(|s| {
                let (file_offset, size) = s.file_range()?;
                file_offset
                    .checked_add(size)
                    .filter(|&end| end <= data.len() as u64)?;
                s.address().checked_add(size)?;
                Some(CodeRange {
                    address: s.address(),
                    size,
                    file_offset,
                })
            })
            .collect();
        labels.retain(|&a| code.iter().any(|c| (c.address..c.address + c.size).contains(&a)));
        labels.sort_unstable();
        labels.dedup();
        Ok(ElfSymbols {
            path: shown.to_path_buf(),
            functions,
            stripped: file.symbols().next().is_none() && debug_elf.is_none(),
            debug_file: debug.found.map(|found| found.shown),
            debug_refused: debug.refused,
            cxx_exceptions: throws && file.section_by_name(".gcc_except_table").is_some(),
            c_cleanups: !throws && file.section_by_name(".gcc_except_table").is_some(),
            go: [".go.buildinfo", ".note.go.buildid"]
                .iter()
                .any(|name| file.section_by_name(name).is_some()),
            cold_parts,
            code,
            starts,
            labels,
            plt,
            segments,
            sizes,
        })
    }

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
        let named = |f: &FunctionSymbol, hit: &dyn Fn(&str) -> bool| {
            hit(&f.name)
                || hit(&f.demangled)
                || hit(strip_args(&f.demangled))
                || hit(super::names::without_clones(&f.demangled))
                || super::names::bare(&f.demangled).is_some_and(|b| hit(&b))
        };
        let exactly = |name: &str| name == pattern;
        let globbed = |name: &str| super::glob::matches(pattern, name);
        // A name that reads as a glob but names a function exactly is that function: Go's
        // `main.(*T).M` (not `main.(*ST).M` too), `main.Sum[go.shape.int_0]`.
        let mut found: Vec<&FunctionSymbol> = self.functions.iter().filter(|f| named(f, &exactly)).collect();
        if found.is_empty() && super::glob::is_glob(pattern) {
            found = self.functions.iter().filter(|f| named(f, &globbed)).collect();
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

/// What a stripped file's "not found" says of it, with the debug file found for it but not
/// taken (`PATH (why)`).
pub fn stripped_note(stripped: bool, refused: Option<&str>) -> String {
    match (stripped, refused) {
        (false, _) => String::new(),
        (true, Some(refused)) => format!(
            " (the file is stripped, and {refused} is not its debug file: only its exported \
             .dynsym functions are known)"
        ),
        (true, None) => " (the file is stripped and no debug file of it was found: only its \
                         exported .dynsym functions are known; --debug-dir names where debug files are)"
            .into(),
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

/// The end of [`Error::SymbolNotFound`]'s message: the stripped note, then the close names, or
/// where to see them all.
pub fn not_found_hint(stripped: bool, refused: Option<&str>, close: &[String]) -> String {
    let stripped = stripped_note(stripped, refused);
    if close.is_empty() {
        format!("{stripped}; list the functions with `xtrace list symbols`")
    } else {
        format!("{stripped}; did you mean: {}?", close.join(", "))
    }
}

#[cfg(test)]
mod tests {
    /// A damaged header (a segment or symbol size of 2^64 - 1) gives no offset past the address
    /// space and no size past its segment.
    #[test]
    fn damaged_sizes_are_no_sizes() {
        use super::{fitting, segment_offset};
        let segments = [(0x1000, 0x2000, 0x1000), (0x4000, u64::MAX, u64::MAX)];
        assert_eq!(segment_offset(&segments, 0x1800), Some((0x1800, 0x1800)));
        assert_eq!(segment_offset(&segments, 0x3000), None);
        assert_eq!(segment_offset(&segments, 0x4001), None, "its offset is past 2^64");
        assert_eq!(segment_offset(&segments, 0x4000), Some((u64::MAX, u64::MAX)));
        assert_eq!(fitting(0x1800, 0x1800, 0x1800), 0x1800);
        assert_eq!(fitting(0x1800, 0x1801, 0x1800), 0, "past its segment");
        assert_eq!(fitting(u64::MAX - 4, 8, u64::MAX), 0, "past the address space");
    }

    /// glibc defines `realpath` twice: `realpath@@GLIBC_2.3` (the default) and the older
    /// `realpath@GLIBC_2.2.5`. The plain name is the default one; the older one keeps its version.
    #[test]
    fn versioned_functions_are_named_apart() {
        let libc = std::path::PathBuf::from(crate::test_libc());
        let symbols = super::ElfSymbols::read(&libc, &libc).unwrap();
        let plain = symbols.find("realpath").unwrap();
        assert_eq!(plain.len(), 1, "{plain:?}");
        assert_eq!(plain[0].name, "realpath");
        let old = symbols.find("realpath@GLIBC_2.2.5").unwrap();
        assert_eq!(old.len(), 1, "{old:?}");
        assert_ne!(old[0].file_offset, plain[0].file_offset);
        assert_eq!(symbols.find("realpath*").unwrap().len(), 2);
    }

    /// A local function is known by the source file its `STT_FILE` entry names: libc's static
    /// `free_mem`s (from its debug file, libc6-dbg) each by their own; a global one by none.
    #[test]
    fn local_functions_know_their_source_file() {
        let libc = std::path::PathBuf::from(crate::test_libc());
        let symbols = super::ElfSymbols::read(&libc, &libc).unwrap();
        let found = symbols.find("free_mem").unwrap();
        let units: std::collections::BTreeSet<&str> =
            found.iter().filter_map(|f| f.unit.as_deref()).collect();
        assert!(found.len() > 1 && units.len() == found.len(), "{found:?}");
        assert!(units.contains("setenv.c"), "{units:?}");
        assert_eq!(symbols.find("malloc").unwrap()[0].unit, None);
    }

    #[test]
    fn code_entered_without_a_return_address_is_known() {
        // This test binary's entry point, by name and by the ELF header; main is called.
        let symbols = own();
        let named = |name: &str| symbols.functions.iter().find(|f| f.name == name).unwrap();
        assert!(named("_start").uncalled);
        assert!(!named("main").uncalled);
        assert!(!named("xtrace_elf_test_function").uncalled);
    }

    use super::*;

    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn xtrace_elf_test_function(x: u64) -> u64 {
        std::hint::black_box(x + 1)
    }

    fn own() -> ElfSymbols {
        let exe = std::env::current_exe().unwrap();
        ElfSymbols::read(&exe, &exe).unwrap()
    }

    #[test]
    fn finds_own_function_at_its_file_offset() {
        std::hint::black_box(xtrace_elf_test_function(1));
        let symbols = own();
        let found = symbols.find("xtrace_elf_test_function").unwrap();
        assert_eq!(found.len(), 1);
        let (name, offset) = (&found[0].demangled, &found[0].probe_offset);
        assert_eq!(name, "xtrace_elf_test_function");
        // The bytes at the offset are the function's machine code as loaded in memory.
        let data = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let code = xtrace_elf_test_function as *const u8;
        // SAFETY: reading 8 bytes of our own function's code.
        let in_memory = unsafe { std::slice::from_raw_parts(code, 8) };
        assert_eq!(&data[*offset as usize..*offset as usize + 8], in_memory);
    }

    #[test]
    fn suggests_close_names() {
        let err = own().find("xtrace_elf_test_functoin").unwrap_err().to_string();
        assert!(err.contains("did you mean: xtrace_elf_test_function"), "{err}");
        assert!(!err.contains('\n'));
    }

    #[test]
    fn rejects_non_elf_and_directories() {
        let dir = std::env::temp_dir().join(format!("xtrace-elf-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = dir.join("text");
        std::fs::write(&text, "hello").unwrap();
        assert!(matches!(
            ElfSymbols::read(&text, &text),
            Err(Error::NotElf { .. })
        ));
        let truncated = dir.join("truncated");
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        std::fs::write(&truncated, &exe[..100]).unwrap();
        assert!(matches!(
            ElfSymbols::read(&truncated, &truncated),
            Err(Error::NotElf { .. })
        ));
        assert!(matches!(
            ElfSymbols::read(&dir, &dir),
            Err(Error::NotAFile {
                what: "directory",
                ..
            })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tells_code_that_throws_from_c_with_exception_tables() {
        // This test binary is Rust with panic=unwind; libc has .gcc_except_table for thread
        // cancellation, with C's personality routine.
        assert!(own().cxx_exceptions);
        let libc = PathBuf::from(crate::test_libc());
        let symbols = ElfSymbols::read(&libc, &libc).unwrap();
        assert!(!symbols.cxx_exceptions, "{}", libc.display());
    }
}
