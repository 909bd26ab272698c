//! `-u [TARGET:]SYMBOL` parsing. TARGET is a path (it contains '/'), a library name resolved through
//! the traced process's mappings, or absent for the main executable.
use crate::error::{Error, Result};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetSpec {
    /// The traced process's main executable.
    MainExecutable,
    /// A file path.
    Path(std::path::PathBuf),
    /// A library name such as `libc` or `libcuda.so.1`.
    Library(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UprobeSpec {
    /// What the user wrote, for error messages.
    pub text: String,
    pub target: TargetSpec,
    pub symbol: String,
}

impl UprobeSpec {
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |reason: &str| Error::BadProbe {
            spec: text.to_string(),
            reason: reason.to_string(),
        };
        // C++ and Rust names contain "::", so split at the last ':' that is not part of a "::".
        let split = last_single_colon(text);
        let (target, symbol) = match split {
            Some(at) => (&text[..at], &text[at + 1..]),
            None => ("", text),
        };
        if symbol.is_empty() {
            return Err(bad("no symbol after the ':'; write [TARGET:]SYMBOL"));
        }
        if symbol.chars().any(char::is_whitespace) {
            return Err(bad("symbol names contain no spaces"));
        }
        let target = if split.is_none() {
            TargetSpec::MainExecutable
        } else if target.is_empty() {
            return Err(bad("empty TARGET before ':'; omit it for the main executable"));
        } else if target.contains('/') {
            TargetSpec::Path(target.into())
        } else {
            TargetSpec::Library(target.to_string())
        };
        Ok(UprobeSpec {
            text: text.to_string(),
            target,
            symbol: symbol.to_string(),
        })
    }
}

fn last_single_colon(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    (0..bytes.len()).rev().find(|&i| {
        bytes[i] == b':'
            && (i == 0 || bytes[i - 1] != b':')
            && bytes.get(i + 1).is_none_or(|&next| next != b':')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> UprobeSpec {
        UprobeSpec::parse(text).unwrap()
    }

    #[test]
    fn forms() {
        assert_eq!(parse("work").target, TargetSpec::MainExecutable);
        assert_eq!(parse("work").symbol, "work");
        assert_eq!(parse("libc:malloc").target, TargetSpec::Library("libc".into()));
        assert_eq!(parse("libc:malloc").symbol, "malloc");
        assert_eq!(
            parse("/usr/lib/libfoo.so:foo").target,
            TargetSpec::Path("/usr/lib/libfoo.so".into())
        );
        assert_eq!(parse("./app:main").target, TargetSpec::Path("./app".into()));
    }

    #[test]
    fn scoped_names_keep_their_colons() {
        let spec = parse("ns::Class::method");
        assert_eq!(spec.target, TargetSpec::MainExecutable);
        assert_eq!(spec.symbol, "ns::Class::method");
        let spec = parse("libfoo:ns::f");
        assert_eq!(spec.target, TargetSpec::Library("libfoo".into()));
        assert_eq!(spec.symbol, "ns::f");
    }

    #[test]
    fn rejects() {
        for text in ["libc:", ":malloc", "my func", ""] {
            assert!(UprobeSpec::parse(text).is_err(), "{text:?} should be rejected");
        }
    }
}
