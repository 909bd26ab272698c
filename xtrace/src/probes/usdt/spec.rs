//! `-U [TARGET:]PROVIDER:NAME[(TYPE, ...)]` parsing. PROVIDER and NAME may be globs; TARGET is a
//! path or library name as with `-u`, or omitted: every module of the process (with `--pid`), the
//! command (with `-- COMMAND`). TYPE, per argument position: `u8`..`i64` or `ptr` to show it so,
//! `str` to read it as a string, `name` to read it as a string that names the span (on a begin
//! probe), `_` to keep what the note says. NAME may instead be a pairing, `BEGIN..END[|END...]`:
//! exact probe names whose hits pair into spans (see [`Pairing`]).
use crate::{
    error::{Error, Result},
    probes::spec::{ArgType, TargetSpec},
};
use xtrace_common::usdt::{string_kind, MAX_USDT_ARGS};

/// How one argument is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UsdtArgType {
    /// As the note says: signed or unsigned of its size.
    Note,
    As(ArgType),
    /// A string that names the span of a begin probe (and is shown as a string).
    Name,
    /// A `wchar_t` (UTF-32) string; only in xtrace's own tables (NVTX's `W` functions).
    Wide,
    /// An NVTX event attributes message: its bytes, read as they are, decode as the message type
    /// in argument `type_arg` says (ASCII, UNICODE; a registered string handle is not read).
    Message {
        type_arg: u8,
    },
    /// A string of the tool library's probes: a pointer, often to a name the library keeps and
    /// tags so that it is read once (`xtrace_common::ranges::INTERNED`); only in xtrace's tables.
    Kept,
}

impl UsdtArgType {
    pub fn is_string(self) -> bool {
        self.string_kind() != string_kind::NONE
    }

    /// How the kernel reads the argument's pointer.
    pub fn string_kind(self) -> u8 {
        match self {
            UsdtArgType::As(ArgType::Str | ArgType::StrN(_)) | UsdtArgType::Name => string_kind::C,
            UsdtArgType::Wide | UsdtArgType::Message { .. } => string_kind::RAW,
            UsdtArgType::Kept => string_kind::INTERNED,
            UsdtArgType::Note | UsdtArgType::As(_) => string_kind::NONE,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsdtSpec {
    /// What the user wrote, for error messages.
    pub text: String,
    /// `None`: every module of the process, or the launched command.
    pub target: Option<TargetSpec>,
    pub provider: String,
    pub name: String,
    pub types: Vec<UsdtArgType>,
    /// Set for the tool library's range probes (`--nvtx`, `--itt`, `--ranges`): what a hit does.
    pub range: Option<RangeOp>,
    /// Set when NAME is `BEGIN..END[|END...]`; `name` is then BEGIN.
    pub pair: Option<Pairing>,
}

/// A pairing, `-U PROVIDER:BEGIN..END[|END...]`: each BEGIN hit opens a span on its thread, and a
/// hit of any END closes the innermost one open there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pairing {
    pub begin: String,
    /// One or more; a span of a pairing with several records which one closed it.
    pub ends: Vec<String>,
}

impl Pairing {
    /// BEGIN and each END, in the order written.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.begin.as_str()).chain(self.ends.iter().map(String::as_str))
    }

    /// The name of its spans (after `PROVIDER:`): the leading words, up to a `_`, that BEGIN and
    /// every END share, without the trailing underscores (`transaction__start..transaction__commit`
    /// gives `transaction`); BEGIN itself when they share none.
    pub fn span_name(&self) -> String {
        let mut common = self.begin.as_str();
        for end in &self.ends {
            let shared = common
                .bytes()
                .zip(end.bytes())
                .take_while(|(a, b)| a == b)
                .count();
            common = &common[..shared];
        }
        let base = common
            .rfind('_')
            .map_or("", |at| common[..at].trim_end_matches('_'));
        match base.is_empty() {
            true => self.begin.clone(),
            false => base.to_string(),
        }
    }

    /// `BEGIN..END[|END...]` (NAME of a spec with `..`); the error's reason otherwise.
    fn parse(name: &str) -> std::result::Result<Self, String> {
        let Some((begin, ends)) = name.split_once("..") else {
            return Err(format!("`{name}` has `|` but no `..`"));
        };
        if begin.is_empty() {
            return Err("the BEGIN before `..` is empty".into());
        }
        if ends.is_empty() {
            return Err("the END after `..` is empty".into());
        }
        if ends.contains("..") {
            return Err("more than one `..`".into());
        }
        let ends: Vec<String> = ends.split('|').map(str::to_string).collect();
        if ends.iter().any(String::is_empty) {
            return Err("an END between `|` is empty".into());
        }
        let pair = Pairing {
            begin: begin.to_string(),
            ends,
        };
        if let Some(glob) = pair.names().find(|n| crate::probes::glob::is_glob(n)) {
            return Err(format!("`{glob}` is a glob; a pairing names its probes exactly"));
        }
        let names: Vec<&str> = pair.names().collect();
        if let Some(twice) = names.iter().enumerate().find(|(i, n)| names[..*i].contains(n)) {
            return Err(format!("`{}` is named twice", twice.1));
        }
        Ok(pair)
    }
}

/// What a hit of one of the tool library's `xtrace:*` probes does (see `pipeline::ranges`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeOp {
    Push,
    Pop,
    /// A pop that carries its range's name, start and depth (the tool library's `range_pop`).
    Closed,
    Start,
    End,
    Mark,
    ThreadName,
    /// Not a range: the tool library's batch of GPU device records (`cuda::device_plan`), read by
    /// the kernel program `gpu_records` rather than `usdt_hit`.
    GpuRecords,
    /// Not a range: the site whose semaphore xtrace raises when it stops, asking the tool library
    /// for its last device records (`cuda::device_plan`); attached then, with `gpu_records`.
    GpuDrain,
}

impl UsdtSpec {
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |reason: String| Error::BadProbe {
            spec: text.to_string(),
            reason,
        };
        let (probe, types) = match text.strip_suffix(')') {
            Some(open) => {
                let at = open
                    .rfind('(')
                    .ok_or_else(|| bad(format!("`)` at column {} has no `(`", text.len())))?;
                (&text[..at], parse_types(&open[at + 1..], at + 1).map_err(bad)?)
            }
            None => (text, Vec::new()),
        };
        if let Some(at) = probe.find(['(', ')']) {
            // A `(` that nothing closes after it: the type list's `)` is missing.
            let unclosed = !text.ends_with(')') && &probe[at..at + 1] == "(" && !probe[at..].contains(')');
            return Err(bad(match unclosed {
                true => format!(
                    "`(` at column {} is not closed; write PROVIDER:NAME(TYPE, ...)",
                    at + 1
                ),
                false => format!("unexpected `{}` at column {}", &probe[at..at + 1], at + 1),
            }));
        }
        let parts: Vec<&str> = probe.rsplitn(3, ':').collect();
        let (target, provider, name) = match parts.as_slice() {
            [name, provider] => (None, *provider, *name),
            [name, provider, target] => (Some(*target), *provider, *name),
            _ => {
                return Err(bad(
                    "write [TARGET:]PROVIDER:NAME, e.g. -U 'myapp:request_begin'".into()
                ))
            }
        };
        if provider.is_empty() || name.is_empty() {
            return Err(bad(
                "empty PROVIDER or NAME; write [TARGET:]PROVIDER:NAME (`*` matches any)".into(),
            ));
        }
        let pair = match name.contains("..") || name.contains('|') {
            true => Some(Pairing::parse(name).map_err(|reason| Error::BadPairing {
                spec: text.to_string(),
                reason,
            })?),
            false => None,
        };
        let target = match target {
            Some("") => {
                return Err(bad(
                    "empty TARGET before ':'; omit it to search every module".into()
                ))
            }
            Some(target) => Some(TargetSpec::named(target)),
            None => None,
        };
        Ok(UsdtSpec {
            text: text.to_string(),
            target,
            provider: provider.to_string(),
            name: pair.as_ref().map_or(name, |p| p.begin.as_str()).to_string(),
            types,
            range: None,
            pair,
        })
    }

    /// Whether this spec names a probe called `name` (its provider matched).
    pub fn names(&self, name: &str) -> bool {
        match &self.pair {
            Some(pair) => pair.names().any(|n| n == name),
            None => crate::probes::glob::matches(&self.name, name),
        }
    }
}

/// The comma-separated types between the parentheses; `at` is their byte offset in the spec.
fn parse_types(list: &str, at: usize) -> std::result::Result<Vec<UsdtArgType>, String> {
    let mut types = Vec::new();
    let mut column = at + 1;
    for word in list.split(',') {
        let trimmed = word.trim();
        let parsed = match trimmed {
            "_" => UsdtArgType::Note,
            "name" => UsdtArgType::Name,
            other if other.starts_with("str:") => {
                let n = ArgType::parse(other).ok_or_else(|| {
                    format!(
                        "`{other}` at column {column}: {}",
                        crate::probes::spec::str_len_rule()
                    )
                })?;
                UsdtArgType::As(n)
            }
            other => UsdtArgType::As(ArgType::parse(other).ok_or_else(|| {
                format!(
                    "unknown argument type `{other}` at column {column} (types are u8 u16 u32 u64 i8 i16 \
                     i32 i64 ptr str name _)"
                )
            })?),
        };
        types.push(parsed);
        column += word.len() + 1;
    }
    if types.len() > MAX_USDT_ARGS {
        return Err(format!("more than {MAX_USDT_ARGS} argument types"));
    }
    if types.iter().filter(|t| **t == UsdtArgType::Name).count() > 1 {
        return Err("only one argument can be the span's `name`".into());
    }
    Ok(types)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let s = UsdtSpec::parse("prov:hit").unwrap();
        assert_eq!(
            (s.target, s.provider.as_str(), s.name.as_str()),
            (None, "prov", "hit")
        );
        let s = UsdtSpec::parse("/usr/bin/app:prov:req_*(u64,name,_,str)").unwrap();
        assert_eq!(s.target, Some(TargetSpec::Path("/usr/bin/app".into())));
        assert_eq!(s.name, "req_*");
        assert_eq!(
            s.types,
            vec![
                UsdtArgType::As(ArgType::U64),
                UsdtArgType::Name,
                UsdtArgType::Note,
                UsdtArgType::As(ArgType::Str)
            ]
        );
        let s = UsdtSpec::parse("libstdc++:libstdcxx:throw").unwrap();
        assert_eq!(s.target, Some(TargetSpec::Library("libstdc++".into())));
    }

    #[test]
    fn errors_name_the_column() {
        let err = |text: &str| UsdtSpec::parse(text).unwrap_err().to_string();
        assert!(err("hit").contains("[TARGET:]PROVIDER:NAME"), "{}", err("hit"));
        assert!(err("prov:").contains("empty PROVIDER or NAME"));
        assert!(err(":prov:hit").contains("empty TARGET"));
        assert!(
            err("p:n(u64,int)").contains("`int` at column 9"),
            "{}",
            err("p:n(u64,int)")
        );
        assert!(err("p:n)").contains("has no `(`"));
        assert!(
            err("p(:n(u64)").contains("unexpected `(` at column 2"),
            "{}",
            err("p(:n(u64)")
        );
        assert!(
            err("a:b(u64").contains("`(` at column 4 is not closed"),
            "{}",
            err("a:b(u64")
        );
        assert!(err("p:n(name,name)").contains("only one"));
    }

    #[test]
    fn pairings() {
        let s = UsdtSpec::parse(
            "/usr/bin/postgres:postgresql:transaction__start..transaction__commit|transaction__abort(u32)",
        )
        .unwrap();
        assert_eq!(s.target, Some(TargetSpec::Path("/usr/bin/postgres".into())));
        assert_eq!(
            (s.provider.as_str(), s.name.as_str()),
            ("postgresql", "transaction__start")
        );
        let pair = s.pair.clone().unwrap();
        assert_eq!(pair.ends, ["transaction__commit", "transaction__abort"]);
        assert_eq!(pair.span_name(), "transaction");
        assert_eq!(s.types, vec![UsdtArgType::As(ArgType::U32)]);
        assert!(s.names("transaction__start") && s.names("transaction__abort"));
        assert!(!s.names("transaction__") && !s.names("transaction__start..transaction__commit"));
        let span = |text: &str| UsdtSpec::parse(text).unwrap().pair.unwrap().span_name();
        assert_eq!(span("p:query__start..query__done"), "query");
        assert_eq!(span("p:stmt_start..stmt_done"), "stmt");
        assert_eq!(span("p:lock__wait__start..lock__wait__done"), "lock__wait");
        assert_eq!(span("p:read_begin..reset"), "read_begin", "no shared word: BEGIN");
        assert_eq!(span("p:open..close"), "open");
        assert_eq!(span("p:a_b..a_c|b_d"), "a_b");
        // Not a pairing: a glob.
        assert_eq!(UsdtSpec::parse("p:q*").unwrap().pair, None);
    }

    #[test]
    fn malformed_pairings_say_the_form() {
        let err = |text: &str| UsdtSpec::parse(text).unwrap_err().to_string();
        let form = "a pairing is [TARGET:]PROVIDER:BEGIN..END[|END...], e.g. -U \
                    'postgresql:transaction__start..transaction__commit|transaction__abort'";
        for (text, reason) in [
            ("postgresql:transaction__start..", "the END after `..` is empty"),
            ("p:..b", "the BEGIN before `..` is empty"),
            ("p:a..b|", "an END between `|` is empty"),
            ("p:a..|b", "an END between `|` is empty"),
            ("p:a..b..c", "more than one `..`"),
            ("p:a|b", "`a|b` has `|` but no `..`"),
            ("p:a*..b", "`a*` is a glob; a pairing names its probes exactly"),
            ("p:a..b|a", "`a` is named twice"),
        ] {
            assert_eq!(err(text), format!("-U '{text}': {reason}; {form}"));
        }
        // The other parts are checked as for any -U.
        assert!(
            err(":a..b").contains("empty PROVIDER or NAME"),
            "{}",
            err(":a..b")
        );
        assert!(err("t::a..b").contains("empty PROVIDER"));
    }

    /// `str:N` reads a string argument up to N bytes; a bad N names the accepted form.
    #[test]
    fn long_string_arguments() {
        let s = UsdtSpec::parse("postgresql:query__start(str:1024)").unwrap();
        assert_eq!(s.types, vec![UsdtArgType::As(ArgType::StrN(1024))]);
        assert_eq!(s.types[0].string_kind(), string_kind::C);
        for bad in ["p:n(str:0)", "p:n(u64, str:4097)", "p:n(str:x)"] {
            let message = UsdtSpec::parse(bad).unwrap_err().to_string();
            assert!(
                message.contains("a string length is str:N with N from 1 to 4096"),
                "{message}"
            );
        }
    }
}
