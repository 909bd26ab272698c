//! Symbol demangling for display: Rust (legacy and v0, without the hash) and Itanium C++, which
//! is written as c++filt (binutils 2.40) writes it, so that names read as perf and gdb show them.
//! cpp_demangle parses the C++ names; [`cxx`] puts right where it writes them otherwise, and
//! `probes::elf::cxxfilt_tests` compares the result with c++filt over every function of
//! libstdc++ and libLLVM.
mod cxx;
mod packs;
#[cfg(test)]
mod tests;

/// The readable form of a symbol; names that are not mangled come back unchanged. A symbol
/// version (`f@GLIBCXX_3.4.11`, `f@@V`) is kept after the demangled name, as c++filt keeps it.
pub fn demangle(name: &str) -> String {
    if let Some(at) = name.find('@').filter(|&at| at > 0) {
        let (base, version) = name.split_at(at);
        if let Some(shown) = demangled(base) {
            return shown + version;
        }
    }
    demangled(name).unwrap_or_else(|| name.to_string())
}

/// The demangled form of a mangled `name`; None when it is not one.
fn demangled(name: &str) -> Option<String> {
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        return Some(format!("{rust:#}"));
    }
    name.starts_with("_Z").then(|| cxx::demangle(name)).flatten()
}
