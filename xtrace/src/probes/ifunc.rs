//! GNU indirect functions (IFUNCs, `STT_GNU_IFUNC`): a symbol whose address is a resolver that the
//! dynamic linker runs at load time; calls go to the implementation it returns. glibc picks
//! `strlen`, `memcpy`, `memset`, `strcmp` and most of libm's math this way by CPU features, so a
//! uprobe on the symbol's own address sees one call per process (the resolver's) and never the
//! function's. xtrace probes the implementation instead, found where xtrace's own process maps the
//! same file (libc, libm, ld.so, libgcc_s): there the resolver is run again, in-process, as the
//! dynamic linker ran it. Only code xtrace has already loaded itself is ever run; a library it has
//! not loaded is never loaded to resolve one (its constructors would run as root). In a traced
//! process (`--pid`), an IFUNC of any other library (a container's own libc, say) is resolved by
//! reading what the dynamic linker wrote there: the library's own slots for it (`IRELATIVE`
//! relocations, and `GLOB_DAT` or bound `JUMP_SLOT` ones naming it) in `/proc/PID/mem`.
use std::{
    collections::HashMap,
    ffi::CStr,
    os::unix::fs::{FileExt, MetadataExt},
    path::PathBuf,
};

use object::{
    elf, Object, ObjectSegment, ObjectSymbol, ObjectSymbolTable, RelocationFlags, RelocationTarget,
};

use super::elf::ElfSymbols;
use crate::target::{Process, TargetFile};

/// What a function symbol is to IFUNC resolution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Ifunc {
    /// An ordinary function.
    #[default]
    No,
    /// An IFUNC, shown and probed at the implementation its resolver (at file address
    /// `resolver`) picks on this machine.
    Resolved { resolver: u64 },
    /// An IFUNC of a library xtrace has not loaded itself: its implementation is unknown, and a
    /// probe on the resolver would record only the dynamic linker's one call.
    Unresolved,
    /// An IFUNC whose resolver picks code outside its file: glibc's `time` and `gettimeofday`
    /// pick the kernel's vDSO, where no uprobe can go.
    Outside,
    /// An IFUNC whose resolver picks nothing (a null address): glibc's `__x86_cacheinfo`, whose
    /// resolver only fills in data. Nothing calls it.
    PicksNothing,
}

impl Ifunc {
    /// Whether its code is unknown, or none of its file's: such an IFUNC stands at its resolver's
    /// address but is no alias of the resolver.
    pub fn unplaced(self) -> bool {
        matches!(self, Ifunc::Unresolved | Ifunc::Outside | Ifunc::PicksNothing)
    }
}

/// What an IFUNC resolver picked, when it is no code of its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotInFile {
    /// Code elsewhere (the vDSO).
    Outside,
    /// A null address.
    Nothing,
}

/// Where xtrace's own process maps one file: its load bias (added to a file address gives the
/// address in this process) and its executable segments, as file addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnCopy {
    bias: u64,
    code: Vec<(u64, u64)>,
}

/// Whether `symbol` is an IFUNC (`STT_GNU_IFUNC`).
pub fn is_ifunc<'d>(symbol: &impl ObjectSymbol<'d>) -> bool {
    matches!(symbol.flags(), object::SymbolFlags::Elf { st_info, .. }
        if st_info & 0xf == elf::STT_GNU_IFUNC)
}

impl OwnCopy {
    /// The copy of the file of `meta` (by device and inode) that this process has loaded, if any.
    pub fn find(meta: &std::fs::Metadata) -> Option<OwnCopy> {
        let mut wanted = Wanted {
            dev: meta.dev(),
            ino: meta.ino(),
            found: None,
        };
        // SAFETY: the callback only reads the `dl_phdr_info` the C library passes it, for the
        // duration of the call, and writes through the pointer to `wanted` we pass along.
        unsafe { libc::dl_iterate_phdr(Some(visit), (&raw mut wanted).cast()) };
        wanted.found
    }

    /// Runs the IFUNC resolver at file address `resolver` and returns what it picks: the file
    /// address of the implementation, when both are code of this file; else what it picked
    /// instead (code outside the file, the vDSO, or nothing); None when the resolver is no code of
    /// the file (it is not run).
    pub fn resolve(&self, resolver: u64) -> Option<Result<u64, NotInFile>> {
        if !self.is_code(resolver) {
            return None;
        }
        let address = usize::try_from(resolver.wrapping_add(self.bias)).ok()?;
        // SAFETY: `address` is code of a library this process has loaded and relocated (it lies
        // in an executable segment of that mapping), and the symbol there is an IFUNC resolver:
        // on x86-64 the dynamic linker calls such a resolver with no arguments and takes the
        // implementation's address from its return value, which is what is done here. Resolvers
        // read CPU features the dynamic linker set up before this process ran.
        let picked = unsafe {
            let resolve: extern "C" fn() -> usize = std::mem::transmute(address);
            resolve()
        };
        let implementation = (picked as u64).wrapping_sub(self.bias);
        Some(match picked {
            0 => Err(NotInFile::Nothing),
            _ if self.is_code(implementation) => Ok(implementation),
            _ => Err(NotInFile::Outside),
        })
    }

    fn is_code(&self, address: u64) -> bool {
        self.code
            .iter()
            .any(|&(start, end)| (start..end).contains(&address))
    }
}

struct Wanted {
    dev: u64,
    ino: u64,
    found: Option<OwnCopy>,
}

/// `dl_iterate_phdr`'s callback: records the module whose file is `Wanted`'s, and stops there.
unsafe extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: dl_iterate_phdr passes a valid info for the duration of the call and our `data`.
    let (info, wanted) = unsafe { (&*info, &mut *data.cast::<Wanted>()) };
    if info.dlpi_name.is_null() || info.dlpi_phdr.is_null() {
        return 0;
    }
    // SAFETY: a non-null dlpi_name is a NUL-terminated string owned by the dynamic linker.
    let name = unsafe { CStr::from_ptr(info.dlpi_name) };
    let Ok(name) = name.to_str() else { return 0 };
    // The main program has an empty name, the vDSO no file: neither is a library to resolve in.
    let Ok(meta) = std::fs::metadata(name) else {
        return 0;
    };
    if (meta.dev(), meta.ino()) != (wanted.dev, wanted.ino) {
        return 0;
    }
    // SAFETY: dlpi_phdr points to dlpi_phnum program headers of the loaded module.
    let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    let code = headers
        .iter()
        .filter(|h| h.p_type == libc::PT_LOAD && h.p_flags & libc::PF_X != 0)
        .map(|h| (h.p_vaddr, h.p_vaddr + h.p_memsz))
        .collect();
    wanted.found = Some(OwnCopy {
        bias: info.dlpi_addr,
        code,
    });
    1
}

/// What sizes an IFUNC's implementation, which has no symbol of its own in a stripped file.
#[derive(Debug, Default)]
pub struct ImplementationSizes {
    /// The functions' sizes by address: an implementation the symbol table also names
    /// (`__strlen_avx2` in an unstripped libc) has that symbol's size.
    pub functions: HashMap<u64, u64>,
    /// Else the function the unwind entry (`.eh_frame` FDE) that starts there covers: file-offset
    /// ranges, read only for a file with IFUNCs.
    pub unwind: Vec<std::ops::Range<u64>>,
}

impl ImplementationSizes {
    /// The size of the code at `address` (file offset `file_offset`); 0 when unknown.
    pub fn of(&self, address: u64, file_offset: u64) -> u64 {
        self.functions.get(&address).copied().unwrap_or_else(|| {
            crate::elf::fde::find(&self.unwind, file_offset)
                .filter(|range| range.start == file_offset)
                .map_or(0, |range| range.end - range.start)
        })
    }
}

/// IFUNCs resolved in traced processes, from the slots the dynamic linker filled: per process and
/// file, each resolver's implementation (file addresses).
#[derive(Default)]
pub struct InProcess {
    resolved: HashMap<(u32, PathBuf), HashMap<u64, u64>>,
    /// Each file's slots, by device and inode: read once however many processes map it.
    files: HashMap<(u64, u64), Option<std::rc::Rc<FileSlots>>>,
}

/// What every process that maps a file shares about its IFUNC slots: (slot, resolver) as file
/// addresses, and the page address of the segment that holds file offset 0.
struct FileSlots {
    slots: Vec<(u64, u64)>,
    at_zero: u64,
}

impl InProcess {
    /// The file address of the code the IFUNC resolver at file address `resolver` of `file` (whose
    /// symbols are `symbols`) picked in `process`, when one of the file's own slots for it says so.
    pub fn resolve(
        &mut self,
        process: &Process,
        (file, symbols): (&TargetFile, &ElfSymbols),
        resolver: u64,
    ) -> Option<u64> {
        let files = &mut self.files;
        self.resolved
            .entry((process.pid, file.open.clone()))
            .or_insert_with(|| {
                let meta = std::fs::metadata(&file.open).ok();
                let slots = meta.as_ref().and_then(|meta| {
                    files
                        .entry((meta.dev(), meta.ino()))
                        .or_insert_with(|| file_slots(file).map(std::rc::Rc::new))
                        .clone()
                });
                match (meta, slots) {
                    (Some(meta), Some(slots)) => {
                        filled_slots(process.pid, meta.ino(), &slots, symbols).unwrap_or_default()
                    }
                    _ => HashMap::new(),
                }
            })
            .get(&resolver)
            .copied()
    }
}

/// The IFUNC slots of `file`, None when it has none (or cannot be read).
fn file_slots(file: &TargetFile) -> Option<FileSlots> {
    let read = crate::elf::Elf::read(&file.open).ok()?;
    let elf = read.parse().ok()?;
    let dynsym = elf.dynamic_symbol_table();
    let ifunc_at = |target: RelocationTarget| {
        let RelocationTarget::Symbol(index) = target else {
            return None;
        };
        let symbol = dynsym.as_ref()?.symbol_by_index(index).ok()?;
        (is_ifunc(&symbol) && symbol.address() != 0).then(|| symbol.address())
    };
    // (slot, resolver), as file addresses: the slots of symbols that are IFUNCs, and every
    // IRELATIVE one, whose addend is its resolver (read from every relocation section, so a
    // static executable's `.rela.plt`, which has no dynamic section, counts too).
    let mut slots: Vec<(u64, u64)> = elf
        .dynamic_relocations()
        .into_iter()
        .flatten()
        .filter_map(|(slot, relocation)| match relocation.flags() {
            RelocationFlags::Elf {
                r_type: elf::R_X86_64_GLOB_DAT | elf::R_X86_64_JUMP_SLOT | elf::R_X86_64_64,
            } => Some((slot, ifunc_at(relocation.target())?)),
            _ => None,
        })
        .collect();
    slots.extend(crate::elf::plt::irelative_slots(read.bytes()));
    if slots.is_empty() {
        return None;
    }
    let first = elf.segments().find(|s| s.file_range().0 == 0)?;
    Some(FileSlots {
        slots,
        at_zero: first.address() & !0xfff,
    })
}

/// Each IFUNC resolver of the file with inode `inode` (whose `file` slots and `symbols` are given,
/// by file address) whose slot in process `pid` holds code of the file outside its PLT
/// ([`ElfSymbols::holds_code`]): the address of that code.
fn filled_slots(pid: u32, inode: u64, file: &FileSlots, symbols: &ElfSymbols) -> Option<HashMap<u64, u64>> {
    let bias = load_bias(pid, inode, file.at_zero)?;
    let memory = std::fs::File::open(format!("/proc/{pid}/mem")).ok()?;
    let mut resolved = HashMap::new();
    for &(slot, resolver) in &file.slots {
        let mut word = [0u8; 8];
        if memory.read_at(&mut word, slot.wrapping_add(bias)).ok()? != 8 {
            continue;
        }
        // A JUMP_SLOT not yet bound holds its PLT stub; a resolver the slot's own address.
        let implementation = u64::from_le_bytes(word).wrapping_sub(bias);
        if implementation != resolver && symbols.holds_code(implementation) {
            resolved.insert(resolver, implementation);
        }
    }
    Some(resolved)
}

/// The load bias of the file with inode `inode` in process `pid`: its mapping of file offset 0 less
/// `at_zero`, the page of the address the file gives that offset.
fn load_bias(pid: u32, inode: u64, at_zero: u64) -> Option<u64> {
    crate::procfs::all_maps(pid)?
        .iter()
        .find(|m| m.offset == 0 && m.file.is_some_and(|(_, ino)| ino == inode))
        .map(|m| m.start.wrapping_sub(at_zero))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C library this test runs with, and where the dynamic linker loaded it.
    fn own_libc() -> (std::path::PathBuf, OwnCopy) {
        let path = crate::test_libc();
        let copy = OwnCopy::find(&std::fs::metadata(&path).unwrap()).expect("libc is loaded");
        (path.into(), copy)
    }

    #[test]
    fn resolves_strlen_to_the_code_this_process_calls() {
        let (path, copy) = own_libc();
        let elf = crate::elf::Elf::read(&path).unwrap();
        let file = elf.parse().unwrap();
        let resolver = file
            .dynamic_symbols()
            .find(|s| s.name() == Ok("strlen"))
            .expect("libc exports strlen");
        assert!(is_ifunc(&resolver), "glibc's strlen is an IFUNC");
        let implementation = copy.resolve(resolver.address()).expect("run").expect("in libc");
        assert_ne!(implementation, resolver.address());
        // What this process's own calls reach: the address libc's dlsym gives for strlen.
        // SAFETY: dlsym with a NUL-terminated name.
        let called = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"strlen".as_ptr()) } as u64;
        assert_eq!(implementation.wrapping_add(copy.bias), called);
    }

    /// `strlen` is an IFUNC: found (`is_definition` is false for IFUNCs), at its implementation.
    #[test]
    fn ifuncs_are_found_at_their_implementation() {
        let (libc, _) = own_libc();
        let symbols = crate::probes::elf::ElfSymbols::read(&libc, &libc, &Default::default()).unwrap();
        let found = symbols.find("strlen").unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        let Ifunc::Resolved { resolver } = found[0].ifunc else {
            panic!("{found:?}")
        };
        assert_ne!(resolver, found[0].address);
        assert!(found[0].size > 0, "sized by its unwind entry: {found:?}");
    }

    extern "C" fn picks_nothing() -> usize {
        std::hint::black_box(0)
    }

    extern "C" fn picks_elsewhere() -> usize {
        std::hint::black_box(picks_nothing as extern "C" fn() -> usize as usize)
    }

    /// A resolver that returns a null address picks nothing; one that returns code outside the
    /// file picks code elsewhere.
    #[test]
    fn what_a_resolver_picks_outside_its_file_is_told_apart() {
        let address = |f: extern "C" fn() -> usize| f as usize as u64;
        let (nothing, elsewhere) = (address(picks_nothing), address(picks_elsewhere));
        let copy = OwnCopy {
            bias: 0,
            code: vec![(nothing, nothing + 1), (elsewhere, elsewhere + 1)],
        };
        assert_eq!(copy.resolve(nothing), Some(Err(NotInFile::Nothing)));
        let only_elsewhere = OwnCopy {
            bias: 0,
            code: vec![(elsewhere, elsewhere + 1)],
        };
        assert_eq!(only_elsewhere.resolve(elsewhere), Some(Err(NotInFile::Outside)));
        assert_eq!(copy.resolve(elsewhere), Some(Ok(nothing)));
    }

    #[test]
    fn a_file_this_process_has_not_loaded_has_no_copy() {
        let meta = std::fs::metadata("/bin/sh").unwrap();
        assert_eq!(OwnCopy::find(&meta), None);
    }

    #[test]
    fn an_address_outside_the_code_is_not_run() {
        let (_, copy) = own_libc();
        assert_eq!(copy.resolve(0), None);
        assert_eq!(copy.resolve(u64::MAX - 8), None);
    }
}
