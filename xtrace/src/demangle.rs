//! Symbol demangling for display: Rust (legacy and v0, without the hash) and Itanium C++.

/// The readable form of a symbol; names that are not mangled come back unchanged.
pub fn demangle(name: &str) -> String {
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        return format!("{rust:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(symbol) = cpp_demangle::Symbol::new(name) {
            if let Ok(text) = symbol.demangle(&cpp_demangle::DemangleOptions::default()) {
                return text;
            }
        }
    }
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn forms() {
        assert_eq!(demangle("work"), "work");
        assert_eq!(demangle("_ZN3foo3barE"), "foo::bar");
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("_Z5outeri"), "outer(int)");
    }
}
