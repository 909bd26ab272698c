//! Naming addresses in ELF files through blazesym, for CPU samples (`export::profile`) and CUDA
//! kernels (`cuda::kernels`): with the file's debug symbols, a separate debug file
//! (`debug_file`), or its symbol tables.
use super::debug_file::DebugFiles;
use blazesym::symbolize::{
    source::{Elf, Source},
    Input, Symbolized, Symbolizer,
};

/// The file name of a mapped path, as frames show it (`libc.so.6+0x1234`).
pub(crate) fn module_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// xtrace's blazesym symbolizer: names only (no inlined frames, no source lines), as stored:
/// [`crate::demangle::demangle`] reads them as the spans' names are read. blazesym's own demangling
/// takes any name for a C++ one, so a C function `a` came out `signed char`, `f` `float`.
/// Debug links are followed in `dirs` (those of `--debug-dir`, then the default ones).
pub(crate) fn symbolizer(dirs: &super::debug_file::DebugDirs) -> Symbolizer {
    Symbolizer::builder()
        .set_debug_dirs(Some(dirs.all()))
        .enable_demangling(false)
        .enable_inlined_fns(false)
        .enable_code_info(false)
        .build()
}

/// Symbolizes `input` in the ELF file at `path`: with its debug symbols (DWARF, or a debug file
/// its `.gnu_debuglink` names) where they can be read, else with its symbol tables alone, so that
/// a debug file blazesym cannot read (zstd-compressed sections, a truncated download) does not
/// cost the file every name `.symtab` and `.dynsym` would give. A function DWARF names by a bare
/// `DW_AT_name` (GCC gives a lambda, a function of an anonymous namespace or a clone no
/// `DW_AT_linkage_name`) while the symbol tables have its mangled name takes that name instead:
/// `operator()` would merge every lambda, `f` both `(anonymous namespace)::f` and
/// `a::(anonymous namespace)::f`.
///
/// A stripped file whose debug file is found in `debug` ([`DebugFiles::for_symbolizing`]) is named
/// from that debug file, the same way (its DWARF, else its own `.symtab`, which has the mangled
/// names), and from its own tables where the debug file has no name.
pub(crate) fn symbolize_elf<'s>(
    symbolizer: &'s Symbolizer,
    debug: &mut DebugFiles,
    path: &str,
    input: Input<&[u64]>,
) -> blazesym::Result<Vec<Symbolized<'s>>> {
    let debug = match input {
        Input::FileOffset(offsets) => debug
            .for_symbolizing(std::path::Path::new(path))
            .and_then(|debug| Some((debug.path.to_str()?.to_owned(), debug, offsets))),
        _ => None,
    };
    let Some((debug_path, debug, offsets)) = debug else {
        return symbolize_file(symbolizer, path, input);
    };
    // An offset outside the loaded segments has no address: 0 names nothing.
    let addresses: Vec<u64> = offsets.iter().map(|&o| debug.address(o).unwrap_or(0)).collect();
    let named = symbolize_file(symbolizer, &debug_path, Input::VirtOffset(&addresses)).unwrap_or_else(|_| {
        vec![Symbolized::Unknown(blazesym::symbolize::Reason::Unsupported); offsets.len()]
    });
    let known = |(named, address): (&Symbolized, &u64)| matches!(named, Symbolized::Sym(_)) && *address != 0;
    if named.iter().zip(&addresses).all(known) {
        return Ok(named);
    }
    // What the debug file does not name, the file's own tables may (a PLT stub's neighbour).
    let own = symbolize_file(symbolizer, path, input)?;
    Ok(named
        .into_iter()
        .zip(own)
        .zip(&addresses)
        .map(|((named, own), address)| if known((&named, address)) { named } else { own })
        .collect())
}

/// [`symbolize_elf`] in the file at `path` alone.
fn symbolize_file<'s>(
    symbolizer: &'s Symbolizer,
    path: &str,
    input: Input<&[u64]>,
) -> blazesym::Result<Vec<Symbolized<'s>>> {
    let mut tables = Elf::new(path);
    tables.debug_syms = false;
    let Ok(mut results) = symbolizer.symbolize(&Source::Elf(Elf::new(path)), input) else {
        return symbolizer.symbolize(&Source::Elf(tables), input);
    };
    let mangled = |r: &Symbolized| match r {
        Symbolized::Sym(sym) => sym.name.starts_with("_Z") || sym.name.starts_with("_R"),
        Symbolized::Unknown(_) => false,
    };
    if results.iter().all(mangled) {
        return Ok(results);
    }
    if let Ok(linkage) = symbolizer.symbolize(&Source::Elf(tables), input) {
        for (found, named) in results.iter_mut().zip(linkage) {
            if mangled(&named) && !mangled(found) {
                *found = named;
            }
        }
    }
    Ok(results)
}
