//! Symbol demangling for display: Rust (legacy and v0, without the hash) and Itanium C++.

/// The readable form of a symbol; names that are not mangled come back unchanged.
pub fn demangle(name: &str) -> String {
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        return format!("{rust:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(symbol) = cpp_demangle::Symbol::new(name) {
            if let Ok(text) = symbol.demangle(&cpp_demangle::DemangleOptions::default()) {
                return integer_literals(&literal_operators(text));
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

/// cpp_demangle writes a template argument literal of an integer type other than `int` as a cast,
/// `(unsigned long)2`; c++filt (and so perf and gdb) writes `2ul`, and `true`/`false` for a bool.
/// Literals of other types (`(char)65`) are written as casts by both.
fn integer_literals(text: &str) -> String {
    const SUFFIXES: [(&str, &str); 5] = [
        ("(unsigned long long)", "ull"),
        ("(long long)", "ll"),
        ("(unsigned long)", "ul"),
        ("(unsigned int)", "u"),
        ("(long)", "l"),
    ];
    // A literal's digits end the argument: a malformed one (`0x10`, `2a3`) is left as written.
    let number = |after: &str| {
        let sign = usize::from(after.starts_with('-'));
        let digits = after[sign..].bytes().take_while(u8::is_ascii_digit).count();
        let ends = after[sign + digits..]
            .bytes()
            .next()
            .is_none_or(|b| matches!(b, b',' | b'>' | b')' | b']' | b'}' | b' '));
        (digits > 0 && ends).then_some(sign + digits)
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('(') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let literal = SUFFIXES.iter().find_map(|(cast, suffix)| {
            let after = tail.strip_prefix(cast)?;
            let n = number(after)?;
            Some((format!("{}{suffix}", &after[..n]), &after[n..]))
        });
        let boolean = || {
            let after = tail.strip_prefix("(bool)")?;
            let n = number(after)?;
            match &after[..n] {
                "0" => Some(("false".to_string(), &after[n..])),
                "1" => Some(("true".to_string(), &after[n..])),
                _ => None,
            }
        };
        match literal.or_else(boolean) {
            Some((shown, after)) => {
                out.push_str(&shown);
                rest = after;
            }
            None => {
                out.push('(');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
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
    fn integer_literals_as_cxxfilt_writes_them() {
        // `template<unsigned, long, bool, long long, unsigned long long, char, int> void f()`.
        assert_eq!(
            demangle("_Z1fILj3ELln5ELb1ELx7ELy8ELc65ELin2EEvv"),
            "void f<3u, -5l, true, 7ll, 8ull, (char)65, -2>()"
        );
        assert_eq!(
            demangle("_ZN2nn6detail29vectorized_elementwise_kernelILi4ENS0_10AddFunctorIfEESt5arrayIPcLm2EEEEviT0_T1_"),
            "void nn::detail::vectorized_elementwise_kernel<4, nn::detail::AddFunctor<float>, std::array<char*, 2ul> >(int, nn::detail::AddFunctor<float>, std::array<char*, 2ul>)"
        );
        // Malformed literals are left as cpp_demangle writes them.
        assert_eq!(demangle("_Z1fILm0x10EEvv"), "void f<(unsigned long)0x10>()");
        // Parameter lists are not literals.
        assert_eq!(demangle("_Z1gmx"), "g(unsigned long, long long)");
        assert_eq!(demangle("_ZN1SclEm"), "S::operator()(unsigned long)");
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
