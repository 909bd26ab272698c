//! GNU indirect functions (IFUNCs, `STT_GNU_IFUNC`): a symbol whose address is a resolver that the
//! dynamic linker runs at load time; calls go to the implementation it returns. glibc picks
//! `strlen`, `memcpy`, `memset`, `strcmp` and most of libm's math this way by CPU features, so a
//! uprobe on the symbol's own address sees one call per process (the resolver's) and never the
//! function's. xtrace probes the implementation instead, found where xtrace's own process maps the
//! same file (libc, libm, ld.so, libgcc_s): there the resolver is run again, in-process, as the
//! dynamic linker ran it. Only code xtrace has already loaded itself is ever run; a library it has
//! not loaded is never loaded to resolve one (its constructors would run as root).
use std::{ffi::CStr, os::unix::fs::MetadataExt};

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
}

/// Where xtrace's own process maps one file: its load bias (added to a file address gives the
/// address in this process) and its executable segments, as file addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnCopy {
    bias: u64,
    code: Vec<(u64, u64)>,
}

/// The IFUNC `STT_*` type.
pub const STT_GNU_IFUNC: u8 = object::elf::STT_GNU_IFUNC;

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

    /// Runs the IFUNC resolver at file address `resolver` and returns the file address of the
    /// implementation it picks, when both are code of this file.
    pub fn resolve(&self, resolver: u64) -> Option<u64> {
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
        self.is_code(implementation).then_some(implementation)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The C library this test runs with, as the dynamic linker loaded it.
    fn own_libc() -> (std::path::PathBuf, OwnCopy) {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let path = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("/libc.so") || p.contains("/libc-"))
            .expect("this test maps a C library")
            .to_string();
        let copy = OwnCopy::find(&std::fs::metadata(&path).unwrap()).expect("libc is loaded");
        (path.into(), copy)
    }

    #[test]
    fn resolves_strlen_to_the_code_this_process_calls() {
        let (path, copy) = own_libc();
        let data = std::fs::read(&path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        use object::{Object, ObjectSymbol};
        let resolver = file
            .dynamic_symbols()
            .find(|s| s.name() == Ok("strlen"))
            .expect("libc exports strlen");
        let object::SymbolFlags::Elf { st_info, .. } = resolver.flags() else {
            panic!("ELF flags")
        };
        assert_eq!(st_info & 0xf, STT_GNU_IFUNC, "glibc's strlen is an IFUNC");
        let implementation = copy.resolve(resolver.address()).expect("resolved");
        assert_ne!(implementation, resolver.address());
        // What this process's own calls reach: the address libc's dlsym gives for strlen.
        // SAFETY: dlsym with a NUL-terminated name.
        let called = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"strlen".as_ptr()) } as u64;
        assert_eq!(implementation.wrapping_add(copy.bias), called);
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
