//! The capture's one symbolizer of mapped files: the functions at file offsets, named through one
//! blazesym symbolizer ([`crate::elf::symbolize`]) and kept in a bounded cache, so that what was
//! named while a process lived (a CUDA kernel's host stub, at its launch) is not read again, and a
//! long capture over many files holds neither every parsed file nor every name. Sampled stacks and
//! CUDA kernels are named through it; so are the later consumers of the image model.
use std::collections::{HashMap, HashSet};

use blazesym::symbolize::{Input, Symbolized, Symbolizer};

use crate::{
    demangle::demangle,
    elf::{
        debug_file::{DebugDirs, DebugFiles},
        symbolize::{symbolize_elf, symbolizer},
    },
};

/// Files whose parsed symbol tables blazesym may hold at once: past it, a new symbolizer starts
/// (libtorch_cuda.so's tables alone take hundreds of megabytes).
const MAX_FILES: usize = 64;

/// Names kept at once: past it, the cache starts over (names are read again from their files).
const MAX_NAMES: usize = 1 << 20;

/// The function holding a file offset: its demangled name, and how far into it the offset lies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    pub name: String,
    pub offset: u64,
}

pub struct Symbols {
    symbolizer: Symbolizer,
    /// Debug files found for stripped files, and where they are looked for.
    debug: DebugFiles,
    /// The files `symbolizer` has read.
    opened: HashSet<String>,
    /// By file (the path it is opened at) and offset; None where no symbol holds the offset.
    functions: HashMap<String, HashMap<u64, Option<Function>>>,
    names: usize,
}

impl Default for Symbols {
    fn default() -> Self {
        Symbols::new(DebugDirs::default())
    }
}

impl Symbols {
    /// Names functions with debug files looked for in `dirs` too.
    pub fn new(dirs: DebugDirs) -> Self {
        Symbols {
            symbolizer: symbolizer(&dirs),
            debug: DebugFiles::new(dirs),
            opened: HashSet::new(),
            functions: HashMap::new(),
            names: 0,
        }
    }
}

impl std::fmt::Debug for Symbols {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Symbols")
            .field("files", &self.opened.len())
            .field("names", &self.names)
            .finish()
    }
}

impl Symbols {
    /// The functions at `offsets` of the ELF file at `path`, in order; None where no symbol (of
    /// the file, its debug file or its DWARF) holds one, or the file cannot be read.
    pub fn functions(&mut self, path: &str, offsets: &[u64]) -> Vec<Option<Function>> {
        let known = self.functions.get(path);
        let mut missing: Vec<u64> = offsets
            .iter()
            .copied()
            .filter(|o| known.is_none_or(|k| !k.contains_key(o)))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        if !missing.is_empty() {
            self.read(path, &missing);
        }
        let known = self.functions.get(path);
        offsets
            .iter()
            .map(|o| known.and_then(|k| k.get(o)).cloned().flatten())
            .collect()
    }

    /// The function at `offset` of the file at `path` (see [`Symbols::functions`]).
    pub fn function(&mut self, path: &str, offset: u64) -> Option<Function> {
        self.functions(path, &[offset]).pop().flatten()
    }

    /// Names `offsets` (none of them known) from the file at `path`, and keeps them.
    fn read(&mut self, path: &str, offsets: &[u64]) {
        if !self.opened.contains(path) {
            if self.opened.len() >= MAX_FILES {
                self.symbolizer = symbolizer(self.debug.dirs());
                self.opened.clear();
            }
            self.opened.insert(path.to_string());
        }
        let found = symbolize_elf(
            &self.symbolizer,
            &mut self.debug,
            path,
            Input::FileOffset(offsets),
        )
        .unwrap_or_else(|_| {
            vec![Symbolized::Unknown(blazesym::symbolize::Reason::Unsupported); offsets.len()]
        });
        let named: Vec<Option<Function>> = found
            .into_iter()
            .map(|found| match found {
                Symbolized::Sym(sym) => Some(Function {
                    name: demangle(&sym.name),
                    offset: sym.offset as u64,
                }),
                Symbolized::Unknown(_) => None,
            })
            .collect();
        if self.names + offsets.len() > MAX_NAMES {
            self.functions.clear();
            self.names = 0;
        }
        self.names += offsets.len();
        let file = self.functions.entry(path.to_string()).or_default();
        file.extend(offsets.iter().copied().zip(named));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xtrace's own functions, named at their entry and inside, from its own executable; an offset
    /// past every function names nothing; a file that is not there names nothing.
    #[test]
    fn functions_of_a_file_by_offset_and_cached() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_str().unwrap();
        let entry = crate::elf::read_elf(exe, |elf| {
            use object::{Object, ObjectSymbol};
            let symbol = elf.symbols().find(|s| {
                s.name()
                    .is_ok_and(|n| n.contains("functions_of_a_file_by_offset_and_cached"))
                    && s.size() > 16
            })?;
            let address = symbol.address();
            // The file offset of the function's address.
            let segment = elf
                .segments()
                .find(|s| address >= s.address() && address < s.address() + s.size())?;
            use object::ObjectSegment;
            Some(address - segment.address() + segment.file_range().0)
        });
        let entry = entry.expect("the test's own function in the symbol table");
        let mut symbols = Symbols::default();
        let found = symbols.functions(exe, &[entry, entry + 4, u64::MAX / 2]);
        let name = |f: &Option<Function>| {
            f.as_ref()
                .map(|f| (f.name.contains("functions_of_a_file"), f.offset))
        };
        assert_eq!(name(&found[0]), Some((true, 0)));
        assert_eq!(name(&found[1]), Some((true, 4)));
        assert_eq!(found[2], None);
        assert_eq!(symbols.names, 3);
        // Known now: not read again.
        assert_eq!(symbols.function(exe, entry + 4), found[1]);
        assert_eq!(symbols.names, 3);
        assert_eq!(symbols.function("/nonexistent/file", 0x1000), None);
    }
}
