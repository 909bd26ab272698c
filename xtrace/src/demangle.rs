//! Symbol demangling for display: Rust (legacy and v0, without the hash) and Itanium C++.

/// The readable form of a symbol; names that are not mangled come back unchanged.
pub fn demangle(name: &str) -> String {
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        return format!("{rust:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(symbol) = cpp_demangle::Symbol::new(name) {
            if let Ok(text) = symbol.demangle(&cpp_demangle::DemangleOptions::default()) {
                return literal_operators(text);
            }
        }
    }
    name.to_string()
}

/// cpp_demangle renders a user-defined literal operator (`li <source-name>`, `_Zli3_msy`) as
/// `operator_ms::operator ""(unsigned long long)`; it is `operator"" _ms(unsigned long long)`, as
/// c++filt writes it.
fn literal_operators(mut text: String) -> String {
    const BROKEN: &str = "::operator \"\"";
    while let Some(at) = text.find(BROKEN) {
        let start = text[..at].rfind([':', ' ', '(', '<', ',']).map_or(0, |i| i + 1);
        let Some(suffix) = text[start..at].strip_prefix("operator") else {
            break;
        };
        if suffix.is_empty() || !suffix.chars().all(|c| c.is_alphanumeric() || c == '_') {
            break;
        }
        let fixed = format!("operator\"\" {suffix}");
        text.replace_range(start..at + BROKEN.len(), &fixed);
    }
    text
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

    #[test]
    fn user_defined_literal_operators_as_cxxfilt_writes_them() {
        for (mangled, shown) in [
            ("_Zli3_msy", "operator\"\" _ms(unsigned long long)"),
            ("_ZN2nsli3_msEy", "ns::operator\"\" _ms(unsigned long long)"),
            ("_Zli4_fooPKcm", "operator\"\" _foo(char const*, unsigned long)"),
        ] {
            assert_eq!(demangle(mangled), shown, "{mangled}");
        }
    }
}
