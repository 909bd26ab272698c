//! What a function's name says about it: code entered without a return address, functions that
//! return twice or unwind the stack from their own frame (all of which a return probe would break),
//! the cold parts of split functions, and a C++ name without its parameter list.

/// Whether `name` is code that is entered without a return address on the stack: a program's
/// `_start` (the kernel leaves `argc` there) and ld.so's `_dl_start_user`; the signal-return
/// trampoline `__restore_rt` (a signal frame); ld.so's lazy-binding trampolines
/// `_dl_runtime_resolve*` and `_dl_runtime_profile*` (the PLT pushes a relocation index and a
/// link map). A return probe writes its trampoline's address over that word (a program traced
/// from `_start` saw `argc` -8192), and a span of such code could never end anyway.
pub fn uncalled(name: &str) -> bool {
    matches!(
        name,
        "_start" | "_dl_start_user" | "__restore_rt" | "__start_context"
    ) || name.starts_with("_dl_runtime_resolve")
        || name.starts_with("_dl_runtime_profile")
}

/// Whether `name` is a function that saves its own return address to return through it again
/// later: `setjmp` and kin (a `longjmp` returns from them a second time), `getcontext`,
/// `swapcontext` and `savectx` (a later `setcontext` or `swapcontext` does), and Boost.Context's
/// `jump_fcontext` and `ontop_fcontext`. A return probe replaces that return address with the
/// kernel's trampoline before the function saves it, so the second return jumps into the
/// trampoline with no return pending, and the kernel kills the process or it goes astray. The
/// names GCC treats as returning twice (`setjmp`, `sigsetjmp`, `savectx`, `vfork`,
/// `getcontext`), here after any leading `_`, `__` or `__x`, without `vfork` (the kernel copies a
/// pending return to the child, and glibc's `vfork` keeps its return address in a register), with
/// the context switches and libucontext's and libunwind's (`_Ux86_64_getcontext`) `getcontext`.
pub fn returns_twice(name: &str) -> bool {
    let bare = name
        .strip_prefix("__x")
        .or_else(|| name.strip_prefix("__"))
        .or_else(|| name.strip_prefix('_'))
        .unwrap_or(name);
    matches!(
        bare,
        "setjmp"
            | "sigsetjmp"
            | "savectx"
            | "getcontext"
            | "swapcontext"
            | "jump_fcontext"
            | "ontop_fcontext"
    )
}

/// Whether `name` (less any `@VERSION`) unwinds the stack starting from its own frame: the
/// unwinder's entry points (GCC's libgcc_s and LLVM's libunwind: `_Unwind_RaiseException` for
/// every C++ throw, `_Unwind_Resume`, `_Unwind_Resume_or_Rethrow`, `_Unwind_ForcedUnwind` for
/// thread cancellation, `_Unwind_Backtrace` for `backtrace()`) and glibc's thread exit
/// (`pthread_exit`, `__pthread_unwind`, `__pthread_unwind_next`), which never returns. They find
/// their caller through their own return address, which a return probe replaces with the kernel's
/// trampoline, which no unwind table covers: a throw then aborts the process, a cancelled or
/// exiting thread skips its cleanup handlers and destructors, a backtrace ends there. They leave
/// through an indirect jump (`__builtin_eh_return`) or not at all, so no exit instruction can be
/// probed instead.
pub fn unwinds_own_stack(name: &str) -> bool {
    let bare = name.split('@').next().unwrap_or(name);
    matches!(
        bare,
        "_Unwind_RaiseException"
            | "_Unwind_Resume"
            | "_Unwind_Resume_or_Rethrow"
            | "_Unwind_ForcedUnwind"
            | "_Unwind_Backtrace"
            | "pthread_exit"
            | "__pthread_exit"
            | "__pthread_unwind"
            | "__pthread_unwind_next"
    )
}

/// Whether `name` is the cold part of a function GCC split in two (`f.cold`, or `f.cold.N` before
/// GCC 9): code the function jumps to, never calls. It is no function entry: a return probe there
/// would replace whatever word is on top of the stack, not a return address.
pub fn is_cold_part(name: &str) -> bool {
    name.ends_with(".cold") || name.contains(".cold.")
}

/// `outer(int)` → `outer`: C++ names can be given without their parameter list, the last
/// parenthesised group when only qualifiers (`const`, `&`, `noexcept`, ...) follow it. Parentheses
/// elsewhere are part of the name: Go's methods (`main.(*T).Run`), `(anonymous namespace)::f`,
/// template arguments and lambdas (`main::{lambda(int)#1}::operator()(int) const` →
/// `main::{lambda(int)#1}::operator()`).
pub fn strip_args(name: &str) -> &str {
    const QUALIFIERS: [&str; 6] = [" const", " volatile", " &&", " &", " noexcept", " restrict"];
    let mut rest = name;
    while let Some(shorter) = QUALIFIERS.iter().find_map(|q| rest.strip_suffix(q)) {
        rest = shorter;
    }
    if !rest.ends_with(')') {
        return name;
    }
    let mut depth = 0usize;
    for (at, c) in rest.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth -= 1;
                if depth == 0 {
                    return if at > 0 { &rest[..at] } else { name };
                }
            }
            _ => {}
        }
    }
    name
}

/// A demangled name without GCC's clone suffixes: `f(long) [clone .isra.0]` → `f(long)`.
pub fn without_clones(demangled: &str) -> &str {
    let mut name = demangled;
    while let Some(at) = name.rfind(" [clone ").filter(|_| name.ends_with(']')) {
        name = &name[..at];
    }
    name
}

/// A demangled C++ name as a user may write it: without GCC's clone suffixes
/// (`f(long) [clone .isra.0]`), its parameter list, its ABI tags (`getname[abi:cxx11]`), and the
/// return type a function template's name starts with (`int ns::twice<int>(int)` →
/// `ns::twice<int>`). None when that is the name as it is, or its parameter list alone.
pub fn bare(demangled: &str) -> Option<String> {
    let mut name = strip_args(without_clones(demangled)).to_string();
    while let Some(open) = name.find("[abi:") {
        let Some(close) = name[open..].find(']') else {
            break;
        };
        name.replace_range(open..open + close + 1, "");
    }
    // A template's return type: before the last space outside <...> and (...), when the name
    // ends with its template arguments.
    if name.ends_with('>') {
        let mut depth = 0i32;
        let mut space = None;
        for (at, c) in name.char_indices() {
            match c {
                '<' | '(' => depth += 1,
                '>' | ')' => depth -= 1,
                ' ' if depth == 0 => space = Some(at),
                _ => {}
            }
        }
        if let Some(at) = space.filter(|&at| !name[..at].ends_with("operator")) {
            name = name[at + 1..].to_string();
        }
    }
    (name != demangled && name != strip_args(demangled)).then_some(name)
}

/// Where a probed function is in its file: its symbol's file offset (as `xtrace list symbols`
/// shows it) and the source file it was compiled from, when the symbol table says.
#[derive(Clone, Debug, Default)]
pub struct Place {
    pub offset: u64,
    pub unit: Option<std::sync::Arc<str>>,
}

/// Names uprobes apart where one name stands for several functions of one file (the C library's
/// static `free_mem` of 14 source files): each becomes `NAME (UNIT)`, the source file it was
/// compiled from (`free_mem (setenv.c)`, stable across rebuilds, so `xtrace diff` pairs it), or
/// where that does not tell it from the others `NAME (UNIT+0xOFFSET)` or `NAME (+0xOFFSET)`, with
/// its symbol's file offset. `places` is each probe's, by probe id. Functions of one name in
/// several files are told apart by their file's name afterwards (see `session::specs`).
pub fn tell_apart(probes: &mut [super::ProbeInfo], places: &[Place]) {
    use std::collections::{BTreeSet, HashMap};
    let mut groups: HashMap<(String, String), Vec<usize>> = HashMap::new();
    for (id, p) in probes
        .iter()
        .enumerate()
        .filter(|(id, p)| p.kind == super::ProbeKind::Uprobe && *id < places.len())
    {
        groups
            .entry((p.name.clone(), p.target.clone()))
            .or_default()
            .push(id);
    }
    for ids in groups.into_values() {
        let offsets: BTreeSet<u64> = ids.iter().map(|&id| places[id].offset).collect();
        if offsets.len() < 2 {
            continue;
        }
        let mut units: HashMap<&str, usize> = HashMap::new();
        for &id in &ids {
            *units
                .entry(places[id].unit.as_deref().unwrap_or_default())
                .or_default() += 1;
        }
        for id in ids {
            let unit = places[id].unit.as_deref().unwrap_or_default();
            let label = match units[unit] {
                1 if !unit.is_empty() => unit.to_string(),
                _ => format!("{unit}+{:#x}", places[id].offset),
            };
            probes[id].name = format!("{} ({label})", probes[id].name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clone_suffixes_are_left_out() {
        assert_eq!(
            without_clones("ns::Matrix::rows() const [clone .isra.0] [clone .constprop.0]"),
            "ns::Matrix::rows() const"
        );
        assert_eq!(without_clones("f(long)"), "f(long)");
        assert_eq!(without_clones("g[abi:cxx11](int)"), "g[abi:cxx11](int)");
    }

    #[test]
    fn bare_names_as_users_write_them() {
        let cases = [
            ("ns::getname[abi:cxx11](int)", Some("ns::getname")),
            (
                "ns::Matrix::plain(long) [clone .isra.0]",
                Some("ns::Matrix::plain"),
            ),
            ("int ns::twice<int>(int)", Some("ns::twice<int>")),
            (
                "void nn::gemm<float>(float const*, float const*, float*, int)",
                Some("nn::gemm<float>"),
            ),
            (
                "int ns::Matrix::get<int>(int) [clone .isra.0]",
                Some("ns::Matrix::get<int>"),
            ),
            ("std::vector<int, std::allocator<int> >::size() const", None),
            ("ns::f(int)", None),
            ("plain", None),
            ("(anonymous namespace)::f(int)", None),
            ("bool operator< <int>(int, int)", Some("operator< <int>")),
        ];
        for (demangled, expected) in cases {
            assert_eq!(bare(demangled).as_deref(), expected, "{demangled}");
        }
    }

    #[test]
    fn functions_that_return_twice_by_name() {
        for name in [
            "setjmp",
            "_setjmp",
            "__sigsetjmp",
            "sigsetjmp",
            "__xsetjmp",
            "getcontext",
            "__getcontext",
            "swapcontext",
            "savectx",
            "jump_fcontext",
        ] {
            assert!(returns_twice(name), "{name}");
        }
        for name in [
            "longjmp",
            "vfork",
            "setjmp_helper",
            "___setjmp",
            "makecontext",
            "fork",
        ] {
            assert!(!returns_twice(name), "{name}");
        }
    }

    #[test]
    fn code_entered_without_a_return_address_by_name() {
        for name in [
            "_start",
            "_dl_start_user",
            "__restore_rt",
            "_dl_runtime_resolve_xsavec",
        ] {
            assert!(uncalled(name), "{name}");
        }
        for name in ["start", "__libc_start_main", "_dl_start", "restore"] {
            assert!(!uncalled(name), "{name}");
        }
    }

    #[test]
    fn strips_parameter_lists() {
        assert_eq!(strip_args("outer(int)"), "outer");
        assert_eq!(strip_args("plain"), "plain");
        assert_eq!(strip_args("(anonymous namespace)::f"), "(anonymous namespace)::f");
        assert_eq!(
            strip_args("(anonymous namespace)::f(int)"),
            "(anonymous namespace)::f"
        );
        assert_eq!(strip_args("pcall(long (*)(long), long)"), "pcall");
        assert_eq!(strip_args("ns::Matrix::trace() const"), "ns::Matrix::trace");
        assert_eq!(
            strip_args("main::{lambda(int)#1}::operator()(int) const"),
            "main::{lambda(int)#1}::operator()"
        );
        assert_eq!(
            strip_args("f<(anonymous namespace)::X>(int)"),
            "f<(anonymous namespace)::X>"
        );
        // Go methods have no parameter list in their names.
        assert_eq!(strip_args("main.(*A).Ap"), "main.(*A).Ap");
        assert_eq!(strip_args("(unbalanced))"), "(unbalanced))");
        assert_eq!(strip_args("()"), "()");
    }
}

#[cfg(test)]
mod tell_apart_tests {
    use super::super::ProbeInfo;
    use super::Place;

    fn probe(name: &str, target: &str) -> ProbeInfo {
        ProbeInfo {
            name: name.into(),
            kind: super::super::ProbeKind::Uprobe,
            target: target.into(),
            offset: 0,
            capture: Default::default(),
        }
    }

    fn place(offset: u64, unit: Option<&str>) -> Place {
        Place {
            offset,
            unit: unit.map(Into::into),
        }
    }

    #[test]
    fn one_name_of_several_functions_of_a_file_is_told_apart_by_source_file_or_offset() {
        let mut probes = vec![
            probe("free_mem", "/lib/libc.so.6"),
            probe("free_mem", "/lib/libc.so.6"),
            probe("malloc", "/lib/libc.so.6"),
            // Two files of one name: theirs to tell apart, by file (session::specs).
            probe("init", "/a/lib.so"),
            probe("init", "/b/lib.so"),
            // Static functions of one name, two in source files of one name.
            probe("helper", "/bin/app"),
            probe("helper", "/bin/app"),
            probe("helper", "/bin/app"),
            probe("helper", "/bin/app"),
        ];
        let places = [
            place(0x17a340, Some("malloc.c")),
            place(0x17a3ad, Some("iconv_db.c")),
            place(0x9a0f0, None),
            place(0x1100, Some("a.c")),
            place(0x1200, Some("a.c")),
            place(0x2000, Some("util.c")),
            place(0x2100, Some("util.c")),
            place(0x2200, None),
            place(0x2300, Some("main.c")),
        ];
        super::tell_apart(&mut probes, &places);
        let names: Vec<&str> = probes.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "free_mem (malloc.c)",
                "free_mem (iconv_db.c)",
                "malloc",
                "init",
                "init",
                "helper (util.c+0x2000)",
                "helper (util.c+0x2100)",
                "helper (+0x2200)",
                "helper (main.c)",
            ]
        );
    }
}
