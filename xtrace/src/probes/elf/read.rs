//! Reading an ELF file's symbol tables (its own, or a stripped file's debug file's) into
//! [`ElfSymbols`]: function symbols with their file offsets, IFUNCs placed and sized, cold parts,
//! labels, and the code and PLT sections.
use std::path::Path;

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SectionKind, SymbolKind};

use super::{entry_offset, fitting, segment_offset, target_metadata, CodeRange, ElfSymbols, FunctionSymbol};
use crate::{
    demangle::demangle,
    error::{Error, Result},
    probes::{
        ifunc::{self, Ifunc, ImplementationSizes, OwnCopy},
        names::{is_cold_part, returns_twice, uncalled},
        symver,
    },
};

impl ElfSymbols {
    /// Reads the function symbols of `path`, from its debug file in `dirs` too when it is stripped.
    /// `shown` is the path to name in errors (the file may be opened through /proc/PID/root or
    /// /proc/PID/exe).
    pub fn read(path: &Path, shown: &Path, dirs: &crate::elf::debug_file::DebugDirs) -> Result<Self> {
        let meta = target_metadata(path, shown)?;
        let elf = crate::elf::Elf::read(path).map_err(|e| Error::Unreadable {
            path: shown.to_path_buf(),
            reason: format!("{e}; give an executable or shared library that can be read"),
        })?;
        let data = elf.bytes();
        let file = parse_x86_64(&elf, shown)?;
        let segments = file_segments(&file, data.len());
        // A stripped file's `.symtab` from its separate debug file, where one matches: its
        // addresses are the file's, its sections hold no code (the file's own give offsets and
        // bytes).
        let mut debug = if file.symbols().next().is_none() {
            crate::elf::debug_file::find(path, shown, &file, dirs)
        } else {
            crate::elf::debug_file::Search::default()
        };
        let debug_data = map_debug_file(&debug);
        let debug_elf = debug_data.as_ref().and_then(|data| data.parse().ok());
        if debug_elf.is_none() {
            if let Some(found) = debug.found.take() {
                debug.refused = Some(format!("{} (cannot be read)", found.shown.display()));
            }
        }
        let symtab = debug_elf.as_ref().unwrap_or(&file).symbols();
        let dynamic = file.dynamic_symbols().map(|s| (true, s));
        let mut walk = SymbolWalk::new(data, &segments, &meta);
        for (in_dynsym, symbol) in symtab.map(|s| (false, s)).chain(dynamic) {
            walk.add(in_dynsym, &symbol);
        }
        let SymbolWalk {
            mut functions,
            mut cold_parts,
            mut labels,
            throws,
            ..
        } = walk;
        let sizes = size_implementations(&mut functions, data, &segments);
        mark_entered_specially(&mut functions, file.entry());
        functions.sort_by(|a, b| (&a.name, a.file_offset).cmp(&(&b.name, b.file_offset)));
        functions.dedup_by(|a, b| a.name == b.name && a.file_offset == b.file_offset);
        let mut starts: Vec<u64> = functions.iter().map(|f| f.address).collect();
        starts.sort_unstable();
        starts.dedup();
        cold_parts.sort_by_key(|c| c.address);
        cold_parts.dedup();
        let code = code_sections(&file, data.len());
        labels.retain(|&a| code.iter().any(|c| (c.address..c.address + c.size).contains(&a)));
        labels.sort_unstable();
        labels.dedup();
        let except_tables = file.section_by_name(".gcc_except_table").is_some();
        Ok(ElfSymbols {
            path: shown.to_path_buf(),
            functions,
            stripped: file.symbols().next().is_none() && debug_elf.is_none(),
            debug_file: debug.found.map(|found| found.shown),
            debug_refused: debug.refused,
            cxx_exceptions: throws && except_tables,
            c_cleanups: !throws && except_tables,
            go: [".go.buildinfo", ".note.go.buildid"]
                .iter()
                .any(|name| file.section_by_name(name).is_some()),
            cold_parts,
            code,
            starts,
            labels,
            plt: plt_sections(&file),
            segments,
            sizes,
            by_name: Default::default(),
            scans: Default::default(),
        })
    }
}

/// `elf`, the file named `shown`, parsed as an x86-64 ELF file.
fn parse_x86_64<'d>(elf: &'d crate::elf::Elf, shown: &Path) -> Result<object::File<'d>> {
    let not_elf = |reason: String| Error::NotElf {
        path: shown.to_path_buf(),
        reason,
    };
    if !elf.bytes().starts_with(b"\x7fELF") {
        return Err(not_elf("no ELF magic number".into()));
    }
    let file = elf.parse().map_err(|e| not_elf(e.to_string()))?;
    if file.architecture() != object::Architecture::X86_64 {
        return Err(Error::NotX86_64 {
            path: shown.to_path_buf(),
            architecture: format!("{:?}", file.architecture()),
        });
    }
    Ok(file)
}

/// The loadable segments of `file`, of `len` bytes: (address, bytes in the file, file offset).
/// Only the bytes a segment has in the file, and the file holds: code is never in the part of a
/// segment that only memory has (.bss), and a damaged header can claim more.
fn file_segments(file: &object::File, len: usize) -> Vec<(u64, u64, u64)> {
    file.segments()
        .map(|s| {
            let (offset, size) = s.file_range();
            let size = size.min((len as u64).saturating_sub(offset));
            (s.address(), size, offset)
        })
        .collect()
}

/// The debug file `debug` found, mapped, not read: a debug file may be of gigabytes, of which the
/// symbol table is read.
fn map_debug_file(debug: &crate::elf::debug_file::Search) -> Option<crate::elf::Elf> {
    crate::elf::Elf::map(&debug.found.as_ref()?.path).ok()
}

/// What the symbol tables of a file give, as [`ElfSymbols::read`] walks them (`.symtab`, then
/// `.dynsym`).
struct SymbolWalk<'a> {
    data: &'a [u8],
    segments: &'a [(u64, u64, u64)],
    meta: &'a std::fs::Metadata,
    versions: symver::Versions<'a>,
    /// Where this process maps the same file, to resolve IFUNCs: looked up at the first one.
    own_copy: Option<Option<OwnCopy>>,
    /// The compile unit of the local symbols that follow an `STT_FILE` entry.
    unit: Option<std::sync::Arc<str>>,
    functions: Vec<FunctionSymbol>,
    cold_parts: Vec<CodeRange>,
    /// Addresses other symbols name than functions, sections and files: those in the code are
    /// labels (kept once the code is known).
    labels: Vec<u64>,
    /// A C++ or Rust personality routine is named.
    throws: bool,
}

impl<'a> SymbolWalk<'a> {
    fn new(data: &'a [u8], segments: &'a [(u64, u64, u64)], meta: &'a std::fs::Metadata) -> Self {
        SymbolWalk {
            data,
            segments,
            meta,
            versions: symver::Versions::read(data),
            own_copy: None,
            unit: None,
            functions: Vec::new(),
            cold_parts: Vec::new(),
            labels: Vec::new(),
            throws: false,
        }
    }

    /// Takes in `symbol`, of `.dynsym` or of `.symtab`.
    fn add<'d>(&mut self, in_dynsym: bool, symbol: &impl ObjectSymbol<'d>) {
        if symbol.kind() == SymbolKind::File && !in_dynsym {
            self.unit = symbol.name().ok().filter(|n| !n.is_empty()).map(Into::into);
            return;
        }
        if !matches!(
            symbol.kind(),
            SymbolKind::Text | SymbolKind::Section | SymbolKind::File
        ) && symbol.address() != 0
        {
            self.labels.push(symbol.address());
        }
        let Ok(stored) = symbol.name() else { return };
        self.throws |= matches!(stored, "__gxx_personality_v0" | "rust_eh_personality");
        let is_ifunc = ifunc::is_ifunc(symbol);
        // `is_definition` is false for every IFUNC: one in a section of this file is defined.
        let defined = symbol.is_definition()
            || (is_ifunc && matches!(symbol.section(), object::SymbolSection::Section(_)));
        if symbol.kind() != SymbolKind::Text || !defined || symbol.address() == 0 {
            return;
        }
        if stored.is_empty() {
            return;
        }
        let name = if in_dynsym {
            self.versions.name(stored, symbol.index())
        } else {
            symver::default_version(stored).into()
        };
        let name = name.as_ref();
        let (address, size, ifunc) = if is_ifunc {
            self.resolve_ifunc(symbol.address(), symbol.size())
        } else {
            (symbol.address(), symbol.size(), Ifunc::No)
        };
        let Some((file_offset, room)) = segment_offset(self.segments, address) else {
            return;
        };
        let size = fitting(address, size, room);
        if is_cold_part(name) {
            self.cold_parts.push(CodeRange {
                address,
                size: fitting(address, symbol.size(), room),
                file_offset,
            });
            return;
        }
        self.functions.push(FunctionSymbol {
            name: name.to_string(),
            demangled: demangle(name),
            file_offset,
            address,
            size,
            probe_offset: entry_offset(self.data.get(file_offset as usize..), file_offset, size),
            returns_twice: false,
            uncalled: false,
            ifunc,
            unit: (symbol.is_local() && !in_dynsym)
                .then(|| self.unit.clone())
                .flatten(),
        });
    }

    /// The address and size where the IFUNC whose resolver is at `address` (of `size` bytes) is
    /// probed, and what is known of its implementation: the implementation the resolver picks in
    /// this process's copy of the file (sized later), else the resolver itself.
    fn resolve_ifunc(&mut self, address: u64, size: u64) -> (u64, u64, Ifunc) {
        let meta = self.meta;
        let copy = self.own_copy.get_or_insert_with(|| OwnCopy::find(meta));
        match copy.as_ref().and_then(|c| c.resolve(address)) {
            Some(Ok(implementation)) => (implementation, 0, Ifunc::Resolved { resolver: address }),
            Some(Err(ifunc::NotInFile::Outside)) => (address, size, Ifunc::Outside),
            Some(Err(ifunc::NotInFile::Nothing)) => (address, size, Ifunc::PicksNothing),
            None => (address, size, Ifunc::Unresolved),
        }
    }
}

/// Sizes the resolved IFUNCs of `functions` (and moves their entry probes past `endbr64`), from
/// the file's `data` laid out in `segments`; returns what sizes an implementation.
fn size_implementations(
    functions: &mut [FunctionSymbol],
    data: &[u8],
    segments: &[(u64, u64, u64)],
) -> ImplementationSizes {
    // Where IFUNCs' implementations are sized: their unwind entries, read only for a file
    // that has IFUNCs.
    let unwind = if functions.iter().any(|f| f.ifunc != Ifunc::No) {
        object::read::elf::ElfFile64::<object::Endianness>::parse(data)
            .map(|elf| crate::elf::fde::functions(&elf))
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
        let room = segment_offset(segments, f.address).map_or(0, |(_, room)| room);
        f.size = fitting(f.address, sizes.of(f.address, f.file_offset), room);
        f.probe_offset = entry_offset(data.get(f.file_offset as usize..), f.file_offset, f.size);
    }
    sizes
}

/// Marks the functions that return twice and those entered without a return address (the
/// file's entry point is at `entry`), and their aliases.
fn mark_entered_specially(functions: &mut [FunctionSymbol], entry: u64) {
    // Aliases share the flag: `_setjmp` is traced under whichever of its names is kept.
    let twice: std::collections::HashSet<u64> = functions
        .iter()
        .filter(|f| returns_twice(&f.name))
        .map(|f| f.file_offset)
        .collect();
    // Aliases share this flag too; the entry point is entered by the kernel, whatever its name
    // (`_start`, Go's `_rt0_amd64_linux`, libc.so.6's own `__libc_main`).
    let uncalled: std::collections::HashSet<u64> = functions
        .iter()
        .filter(|f| uncalled(&f.name) || (entry != 0 && f.address == entry))
        .map(|f| f.file_offset)
        .collect();
    for f in functions {
        f.returns_twice = twice.contains(&f.file_offset);
        f.uncalled = uncalled.contains(&f.file_offset);
    }
}

/// The PLT sections' address ranges.
fn plt_sections(file: &object::File) -> Vec<(u64, u64)> {
    [".plt", ".plt.sec", ".plt.got"]
        .iter()
        .filter_map(|name| file.section_by_name(name))
        .map(|s| (s.address(), s.address().saturating_add(s.size())))
        .collect()
}

/// The executable sections of `file`, of `len` bytes. A damaged section header can claim more
/// bytes than the file holds, or addresses past the end of the address space: such a section is
/// no code.
fn code_sections(file: &object::File, len: usize) -> Vec<CodeRange> {
    file.sections()
        .filter(|s| s.kind() == SectionKind::Text)
        .filter_map(|s| {
            let (file_offset, size) = s.file_range()?;
            file_offset.checked_add(size).filter(|&end| end <= len as u64)?;
            s.address().checked_add(size)?;
            Some(CodeRange {
                address: s.address(),
                size,
                file_offset,
            })
        })
        .collect()
}
