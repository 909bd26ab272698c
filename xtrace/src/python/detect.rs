//! Finding a process's CPython: the file that holds the interpreter (a shared libpython, or a
//! python executable linked statically), its version and the addresses of `_PyRuntime` and
//! `PyCode_Type` in the process.
use object::{Object, ObjectSegment, ObjectSymbol};

use crate::{elf::Elf, procfs::Mapping};

/// An interpreter found in a process's mappings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interpreter {
    /// The file, as the process sees it.
    pub path: String,
    /// A shared libpython (else a python executable with the interpreter linked in).
    pub shared: bool,
    /// The minor version (3.`minor`).
    pub minor: u32,
    /// The version as found (`3.11.7`, or `3.10` from a file name).
    pub version: String,
    /// Where the version came from.
    pub version_from: &'static str,
    /// Addresses in the process.
    pub runtime: u64,
    pub code_type: u64,
    /// Which symbol table held `_PyRuntime`.
    pub table: &'static str,
}

/// Why a process's interpreter cannot be used, or None when it maps none (yet: a python
/// executable without the interpreter loads its libpython after its first instructions).
pub type Found = Option<Result<Interpreter, String>>;

/// [`read`]'s answer for a python executable without the interpreter in it.
const NOT_LINKED_IN: &str = "no interpreter linked in";

/// The CPython interpreter among `maps` (executable mappings of process `pid`): a libpython
/// first, else the mapped file named `python*` that defines `_PyRuntime`.
pub fn find(pid: u32, maps: &[Mapping]) -> Found {
    let named = |m: &&Mapping| {
        let name = crate::elf::symbolize::module_name(&m.path);
        name.starts_with("libpython3") && name.contains(".so")
    };
    let python = |m: &&Mapping| crate::elf::symbolize::module_name(&m.path).starts_with("python");
    let mapping = maps
        .iter()
        .filter(|m| m.path.starts_with('/'))
        .find(named)
        .or_else(|| maps.iter().filter(|m| m.path.starts_with('/')).find(python))?;
    match read(pid, mapping, named(&mapping)) {
        Err(why) if why == NOT_LINKED_IN => None,
        found => Some(found),
    }
}

/// The symbols of the interpreter file of `mapping`, opened through the process's root.
fn read(pid: u32, mapping: &Mapping, shared: bool) -> Result<Interpreter, String> {
    // Through the process's root (a container's files), else as xtrace sees the path (a process
    // in the middle of its exec may not show its root yet).
    let elf = Elf::read(format!("/proc/{pid}/root{}", mapping.path))
        .or_else(|_| Elf::read(&mapping.path))
        .map_err(|e| format!("{}: {e}", mapping.path))?;
    let data = elf.bytes();
    let file = elf
        .parse()
        .map_err(|e| format!("{}: not an ELF file ({e})", mapping.path))?;
    let (runtime, table) = match symbol(&file, "_PyRuntime") {
        Some(found) => found,
        None if shared => return Err(format!("{}: no _PyRuntime symbol", mapping.path)),
        None => return Err(NOT_LINKED_IN.into()),
    };
    let code_type = symbol(&file, "PyCode_Type")
        .ok_or_else(|| format!("{}: no PyCode_Type symbol", mapping.path))?
        .0;
    let (minor, version, version_from) = version(&file, data, &mapping.path)?;
    // Where the file's addresses are in the process: the segment `mapping` maps.
    let bias = file
        .segments()
        .find_map(|s| {
            let (offset, size) = s.file_range();
            (offset <= mapping.offset && mapping.offset < offset + size).then(|| {
                mapping
                    .start
                    .wrapping_add(offset)
                    .wrapping_sub(mapping.offset)
                    .wrapping_sub(s.address())
            })
        })
        .ok_or_else(|| format!("{}: no segment holds the mapped code", mapping.path))?;
    Ok(Interpreter {
        path: mapping.path.clone(),
        shared,
        minor,
        version,
        version_from,
        runtime: runtime.wrapping_add(bias),
        code_type: code_type.wrapping_add(bias),
        table,
    })
}

/// The address of data symbol `name` and the table that has it.
fn symbol(file: &object::File, name: &str) -> Option<(u64, &'static str)> {
    let find = |mut symbols: object::SymbolIterator| {
        symbols
            .find(|s| s.is_definition() && s.name() == Ok(name))
            .map(|s| s.address())
    };
    find(file.dynamic_symbols())
        .map(|a| (a, ".dynsym"))
        .or_else(|| find(file.symbols()).map(|a| (a, ".symtab")))
}

/// The interpreter's version: `Py_Version` (3.11+, `PY_VERSION_HEX` in read-only data), else
/// the file's name (`libpython3.10.so.1.0`, `python3.10`).
fn version(file: &object::File, data: &[u8], path: &str) -> Result<(u32, String, &'static str), String> {
    if let Some((address, _)) = symbol(file, "Py_Version") {
        let hex = file
            .segments()
            .find_map(|s| {
                let at = address
                    .checked_sub(s.address())
                    .filter(|&at| at + 4 <= s.size())?;
                let (offset, size) = s.file_range();
                (at + 4 <= size).then(|| data.get((offset + at) as usize..(offset + at + 4) as usize))?
            })
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
        if let Some(hex) = hex.filter(|h| h >> 24 == 3) {
            let (minor, micro) = ((hex >> 16) & 0xff, (hex >> 8) & 0xff);
            return Ok((minor, format!("3.{minor}.{micro}"), "Py_Version"));
        }
    }
    let name = crate::elf::symbolize::module_name(path);
    let rest = name
        .strip_prefix("libpython3.")
        .or_else(|| name.strip_prefix("python3."))
        .ok_or_else(|| format!("{path}: no Py_Version symbol and no version in the file's name"))?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let minor = digits
        .parse()
        .map_err(|_| format!("{path}: no Py_Version symbol and no version in the file's name"))?;
    Ok((minor, format!("3.{minor}"), "the file's name"))
}
