//! `-u [TARGET:]SYMBOL[(TYPE, ...)][ -> TYPE]` parsing. TARGET is a path (it contains '/'), a
//! library name resolved through the traced process's mappings, or absent for the main executable.
//! A trailing parenthesised list made only of argument types (u8..u64, i8..i64, ptr, str) asks for
//! those arguments; `-> TYPE` asks for the return value. Any other parentheses belong to the name
//! (demangled C++ such as `ns::f(int)`).
use crate::error::{Error, Result};

/// How a captured register is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgType {
    U8,
    U16,
    U32,
    U64,
    I8,
    I16,
    I32,
    I64,
    /// An address, shown in hex.
    Ptr,
    /// A pointer to a NUL-terminated string, read up to 63 bytes.
    Str,
    /// `str:N`: a pointer to a NUL-terminated string, read up to N bytes (1 to
    /// [`STR_MAX`](xtrace_common::event::STR_MAX)).
    StrN(u16),
}

/// What a bad `str:N` is told.
pub fn str_len_rule() -> String {
    format!(
        "a string length is str:N with N from 1 to {}",
        xtrace_common::event::STR_MAX
    )
}

impl ArgType {
    const ALL: [(&'static str, ArgType); 10] = [
        ("u8", ArgType::U8),
        ("u16", ArgType::U16),
        ("u32", ArgType::U32),
        ("u64", ArgType::U64),
        ("i8", ArgType::I8),
        ("i16", ArgType::I16),
        ("i32", ArgType::I32),
        ("i64", ArgType::I64),
        ("ptr", ArgType::Ptr),
        ("str", ArgType::Str),
    ];

    pub fn parse(word: &str) -> Option<ArgType> {
        if let Some(n) = word.strip_prefix("str:") {
            let n: u16 = n.parse().ok()?;
            return (1..=xtrace_common::event::STR_MAX as u16)
                .contains(&n)
                .then_some(ArgType::StrN(n));
        }
        Self::ALL.iter().find(|(name, _)| *name == word).map(|(_, t)| *t)
    }

    /// Whether it is read as a string (`str` or `str:N`).
    pub fn is_str(self) -> bool {
        self.string_max().is_some()
    }

    /// The most bytes a string is read to, its NUL not counted; None for any other type.
    pub fn string_max(self) -> Option<usize> {
        match self {
            ArgType::Str => Some(xtrace_common::event::ARG_STR_LEN - 1),
            ArgType::StrN(n) => Some(usize::from(n)),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        if let ArgType::StrN(_) = self {
            return "str";
        }
        Self::ALL
            .iter()
            .find(|(_, t)| *t == self)
            .map_or("?", |(name, _)| name)
    }
}

/// Most arguments a spec may capture (the x86-64 SysV argument registers).
pub const MAX_ARGS: usize = xtrace_common::event::MAX_ARGS;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TargetSpec {
    /// The traced process's main executable.
    MainExecutable,
    /// A file path.
    Path(std::path::PathBuf),
    /// A library name such as `libc` or `libcuda.so.1`.
    Library(String),
}

impl TargetSpec {
    /// A TARGET the user named: a path when it contains '/', else a library name.
    pub fn named(text: &str) -> TargetSpec {
        if text.contains('/') {
            TargetSpec::Path(text.into())
        } else {
            TargetSpec::Library(text.to_string())
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UprobeSpec {
    /// What the user wrote, for error messages.
    pub text: String,
    pub target: TargetSpec,
    pub symbol: String,
    /// Arguments to capture, in register order.
    pub args: Vec<ArgType>,
    /// The return value's type, when asked for.
    pub ret: Option<ArgType>,
}

impl UprobeSpec {
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |reason: &str| Error::BadProbe {
            spec: text.to_string(),
            reason: reason.to_string(),
        };
        // C++ and Rust names contain "::", so split at the last ':' that is not part of a "::".
        let split = last_single_colon(text);
        let (target, rest, rest_at) = match split {
            Some(at) => (&text[..at], &text[at + 1..], at + 1),
            None => ("", text, 0),
        };
        let (symbol, args, ret) = split_types(rest).map_err(|(at, reason)| Error::BadProbe {
            spec: text.to_string(),
            reason: format!("{reason} at column {}", rest_at + at + 1),
        })?;
        if symbol.is_empty() {
            return Err(bad(if rest_at == 0 {
                "no symbol; write [TARGET:]SYMBOL"
            } else {
                "no symbol after the ':'; write [TARGET:]SYMBOL"
            }));
        }
        let target = if split.is_none() {
            TargetSpec::MainExecutable
        } else if target.is_empty() {
            return Err(bad("empty TARGET before ':'; omit it for the main executable"));
        } else {
            TargetSpec::named(target)
        };
        Ok(UprobeSpec {
            text: text.to_string(),
            target,
            symbol: symbol.to_string(),
            args,
            ret,
        })
    }
}

/// A spec's symbol part split into (name, argument types, return type). Errors carry the byte
/// offset in `text` of the offending part.
type Split<'a> = (&'a str, Vec<ArgType>, Option<ArgType>);

fn split_types(text: &str) -> std::result::Result<Split<'_>, (usize, String)> {
    let types = "types are u8 u16 u32 u64 i8 i16 i32 i64 ptr str str:N";
    let mut name = text.trim_end();
    let mut ret = None;
    // `operator->` is part of a C++ name, not a return type.
    if let Some(arrow) = return_arrow(name) {
        let word = name[arrow + 2..].trim();
        let at = arrow + 2 + (name[arrow + 2..].len() - name[arrow + 2..].trim_start().len());
        if word.starts_with("str:") {
            return Err((
                at,
                "a return value is read as `str` (63 bytes), not `str:N`".into(),
            ));
        }
        ret = Some(
            ArgType::parse(word).ok_or_else(|| (at, format!("unknown return type `{word}` ({types})")))?,
        );
        name = name[..arrow].trim_end();
    }
    // Parentheses that do not pair around type words: a mistyped argument list, not a name.
    let (opens, closes) = (name.matches('(').count(), name.matches(')').count());
    if opens != closes {
        if let Some(open) = name.find('(') {
            let typed = name[open..]
                .split(|c: char| matches!(c, '(' | ')' | ',') || c.is_whitespace())
                .any(|w| ArgType::parse(w).is_some());
            if typed {
                let (at, what) = match opens > closes {
                    true => (name.rfind('(').unwrap_or(open), "`(` is not closed"),
                    false => (name.rfind(')').unwrap_or(open), "`)` closes nothing"),
                };
                return Err((at, format!("{what}; write FUNCTION(TYPE, ...) ({types})")));
            }
        }
    }
    let mut args = Vec::new();
    if let (Some(open), true) = (name.rfind('('), name.ends_with(')')) {
        let inner = &name[open + 1..name.len() - 1];
        let items: Vec<(usize, &str)> = inner
            .split(',')
            .scan(open + 1, |at, item| {
                let start = *at + (item.len() - item.trim_start().len());
                *at += item.len() + 1;
                Some((start, item.trim()))
            })
            .collect();
        let typed = |w: &str| ArgType::parse(w).is_some() || w.starts_with("str:");
        let known = items.iter().filter(|(_, w)| typed(w)).count();
        // A list of type words asks for arguments; a list without any is part of the name.
        if known > 0 {
            for (index, (at, word)) in items.iter().enumerate() {
                if word.starts_with("str:") && ArgType::parse(word).is_none() {
                    return Err((*at, str_len_rule()));
                }
                let Some(t) = ArgType::parse(word) else {
                    return Err((*at, format!("unknown argument type `{word}` ({types})")));
                };
                if index == MAX_ARGS {
                    return Err((*at, format!("at most {MAX_ARGS} arguments can be captured")));
                }
                args.push(t);
            }
            name = name[..open].trim_end();
        }
    }
    Ok((name, args, ret))
}

/// The last `:` that is not half of a `::`, not inside a bracketed or parenthesised group (a
/// demangled name's `[abi:cxx11]`, an argument list's `str:N`) and not after the return arrow
/// (`-> str:N`): where TARGET ends. A `[` that no `]` closes, as a directory may be named, opens
/// no group; a `(` that no `)` closes opens one to the end unless a `/` follows it (a path).
fn last_single_colon(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    // Where each closed group lies: each `]` closes the latest `[` still open.
    let (mut open, mut groups) = (Vec::new(), Vec::new());
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'[' | b'(' => open.push(i),
            b']' | b')' => groups.extend(open.pop().map(|start| start..i)),
            _ => {}
        }
    }
    let unclosed = open
        .iter()
        .find(|&&at| bytes[at] == b'(' && !text[at..].contains('/'));
    groups.extend(unclosed.map(|&at| at..bytes.len()));
    let end = return_arrow(text).unwrap_or(bytes.len());
    (0..end).rev().find(|&i| {
        bytes[i] == b':'
            && (i == 0 || bytes[i - 1] != b':')
            && bytes.get(i + 1).is_none_or(|&next| next != b':')
            && !groups.iter().any(|g| g.contains(&i))
    })
}

/// Where the return arrow (`-> TYPE`) starts: the last `->` that is not C++'s `operator->` and
/// that no `/` follows (then it is part of a path).
fn return_arrow(text: &str) -> Option<usize> {
    let arrow = text.rfind("->")?;
    (!text[..arrow].ends_with("operator") && !text[arrow..].contains('/')).then_some(arrow)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> UprobeSpec {
        UprobeSpec::parse(text).unwrap()
    }

    /// `str:N` asks for up to N bytes of a string (1 to 4096); anything else there is refused
    /// with the accepted form, at its column.
    #[test]
    fn long_strings() {
        let spec = parse("f(i64, str:200, str)");
        assert_eq!(spec.target, TargetSpec::MainExecutable);
        assert_eq!(spec.args, [ArgType::I64, ArgType::StrN(200), ArgType::Str]);
        assert_eq!(spec.args[1].string_max(), Some(200));
        assert_eq!(spec.args[2].string_max(), Some(63));
        assert_eq!(
            parse("libc:f(str:4096)").target,
            TargetSpec::Library("libc".into())
        );
        for (text, column) in [
            ("f(str:0)", 3),
            ("f(i32, str:4097)", 8),
            ("f(str:abc)", 3),
            ("f(str:)", 3),
        ] {
            let err = UprobeSpec::parse(text).unwrap_err().to_string();
            let expected = format!(
                "invalid probe `{text}`: a string length is str:N with N from 1 to 4096 at column {column}"
            );
            assert_eq!(err, expected);
        }
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
        // A colon inside an ABI tag is part of the name.
        assert_eq!(parse("ns::getname[abi:cxx11]").target, TargetSpec::MainExecutable);
        assert_eq!(parse("ns::getname[abi:cxx11]").symbol, "ns::getname[abi:cxx11]");
        let tagged = parse("./app:ns::getname[abi:cxx11](int)");
        assert_eq!(tagged.target, TargetSpec::Path("./app".into()));
        assert_eq!(tagged.symbol, "ns::getname[abi:cxx11](int)");
        // A `[` that nothing closes is part of a path.
        let odd = parse("./x[/prog:f");
        assert_eq!(
            (odd.target, odd.symbol.as_str()),
            (TargetSpec::Path("./x[/prog".into()), "f")
        );
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
    fn argument_and_return_types() {
        let spec = parse("app:fn(u64, i32, str)");
        assert_eq!(spec.symbol, "fn");
        assert_eq!(spec.target, TargetSpec::Library("app".into()));
        assert_eq!(spec.args, [ArgType::U64, ArgType::I32, ArgType::Str]);
        assert_eq!(spec.ret, None);
        let spec = parse("fn(ptr) -> i64");
        assert_eq!((spec.symbol.as_str(), spec.ret), ("fn", Some(ArgType::I64)));
        assert_eq!(spec.args, [ArgType::Ptr]);
        let spec = parse("libc:malloc->ptr");
        assert_eq!((spec.symbol.as_str(), spec.args.len()), ("malloc", 0));
        assert_eq!(spec.ret, Some(ArgType::Ptr));
        // Parentheses without type words are part of a C++ name.
        let spec = parse("ns::Matrix::add(ns::Matrix const&)");
        assert_eq!(spec.symbol, "ns::Matrix::add(ns::Matrix const&)");
        assert!(spec.args.is_empty());
        assert_eq!(parse("ns::Ptr::operator->()").symbol, "ns::Ptr::operator->()");
        assert_eq!(parse("f()").symbol, "f()");
    }

    #[test]
    fn argument_errors_point_at_the_offending_part() {
        let err = UprobeSpec::parse("app:fn(u64, i33)").unwrap_err().to_string();
        assert!(
            err.contains("unknown argument type `i33`") && err.contains("column 13"),
            "{err}"
        );
        let err = UprobeSpec::parse("fn -> int").unwrap_err().to_string();
        assert!(
            err.contains("unknown return type `int`") && err.contains("column 7"),
            "{err}"
        );
        let err = UprobeSpec::parse("fn(u8,u8,u8,u8,u8,u8,u8)")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("at most 6 arguments") && err.contains("column 22"),
            "{err}"
        );
        // Unpaired parentheses around type words: a mistyped list, said where it breaks.
        for (text, what, column) in [
            ("work(u64", "`(` is not closed", 5),
            ("work(u64))", "`)` closes nothing", 10),
            ("libc:f(ptr, u64 -> ptr", "`(` is not closed", 7),
        ] {
            let err = UprobeSpec::parse(text).unwrap_err().to_string();
            assert!(
                err.contains(what) && err.contains(&format!("column {column}")),
                "{text}: {err}"
            );
        }
        // Without type words they are part of a name, as C++ names may have them.
        assert_eq!(UprobeSpec::parse("ns::f(").unwrap().symbol, "ns::f(");
    }

    /// A `:` after the return arrow or inside an argument list is never where TARGET ends:
    /// `-> str:N` is refused for what it is, at its column, whatever comes before it.
    #[test]
    fn colons_after_the_arrow_or_in_parentheses_are_not_the_target() {
        let message = |text: &str| UprobeSpec::parse(text).unwrap_err().to_string();
        for (text, column) in [
            ("f -> str:9", 6),
            ("libc:f -> str:9", 11),
            ("./app:f(str:200) -> str:9", 21),
            ("ns::f->str:4096", 8),
        ] {
            assert_eq!(
                message(text),
                format!(
                    "invalid probe `{text}`: a return value is read as `str` (63 bytes), not \
                     `str:N` at column {column}"
                )
            );
        }
        let spec = parse("libc:f(str:9) -> str");
        assert_eq!(spec.target, TargetSpec::Library("libc".into()));
        assert_eq!(
            (spec.args, spec.ret),
            (vec![ArgType::StrN(9)], Some(ArgType::Str))
        );
        // An argument list that is not closed is said to be, not split at its `str:N`.
        assert!(
            message("f(str:9").contains("`(` is not closed"),
            "{}",
            message("f(str:9")
        );
        assert!(message("libc:f(i32, str:9").contains("column 7"));
        // A `->` or `(` in a path is the path's.
        let odd = parse("./a->b/prog:f");
        assert_eq!(
            (odd.target, odd.symbol.as_str()),
            (TargetSpec::Path("./a->b/prog".into()), "f")
        );
        let odd = parse("./x(/prog:f(str:9)");
        assert_eq!(
            (odd.target, odd.args),
            (TargetSpec::Path("./x(/prog".into()), vec![ArgType::StrN(9)])
        );
        assert_eq!(
            parse("./app:ns::Ptr::operator->()").symbol,
            "ns::Ptr::operator->()"
        );
    }

    #[test]
    fn rejects() {
        for text in ["libc:", ":malloc", ""] {
            assert!(UprobeSpec::parse(text).is_err(), "{text:?} should be rejected");
        }
        // Only a spec with a ':' is told about the ':'.
        let message = |text: &str| UprobeSpec::parse(text).unwrap_err().to_string();
        assert!(
            message("").ends_with(": no symbol; write [TARGET:]SYMBOL"),
            "{}",
            message("")
        );
        assert!(message("(u64)").ends_with(": no symbol; write [TARGET:]SYMBOL"));
        assert!(message("libc:").ends_with(": no symbol after the ':'; write [TARGET:]SYMBOL"));
    }
}
