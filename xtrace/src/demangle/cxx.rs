//! Itanium C++ names: cpp_demangle's output, put right where it differs from c++filt's.
//! Each fix names the construct it is for; `super::tests` has a case for each, and
//! `super::cxxfilt_tests` checks them all against c++filt.
use cpp_demangle::{DemangleOptions, Symbol};

/// The demangled form of the Itanium name `name` (starting `_Z`), as c++filt writes it.
pub(super) fn demangle(name: &str) -> Option<String> {
    if let Some((shown, encoding)) = thunk(name) {
        return demangle(&format!("_Z{encoding}")).map(|target| format!("{shown}{target}"));
    }
    let text = parse(name)?;
    let text = constructor_template(name, &text).unwrap_or(text);
    let text = written(&text);
    let text = super::packs::expand(name, &text).unwrap_or(text);
    Some(integer_literals(&literal_operators(&text)))
}

/// cpp_demangle's text of `name`.
fn parse(name: &str) -> Option<String> {
    let symbol = Symbol::new(name).ok()?;
    symbol.demangle_with_options(&DemangleOptions::default()).ok()
}

/// A thunk (`_ZThn16_<encoding>`, `_ZTv0_n24_<encoding>`, `_ZTch...`): what c++filt writes before
/// its target, and the target's encoding. cpp_demangle writes `{virtual override thunk(...)}`.
fn thunk(name: &str) -> Option<(&'static str, &str)> {
    // <call-offset> ::= h <number> _ | v <number> _ <number> _, a number with `n` for minus.
    fn call_offset(s: &str) -> Option<&str> {
        fn number(s: &str) -> Option<&str> {
            let s = s.strip_prefix('n').unwrap_or(s);
            let digits = s.bytes().take_while(u8::is_ascii_digit).count();
            (digits > 0).then(|| s[digits..].strip_prefix('_')).flatten()
        }
        match s.as_bytes().first()? {
            b'h' => number(&s[1..]),
            b'v' => number(number(&s[1..])?),
            _ => None,
        }
    }
    let special = name.strip_prefix("_ZT")?;
    let (shown, encoding) = match special.as_bytes().first()? {
        b'h' | b'v' => {
            let shown = if special.starts_with('h') {
                "non-virtual thunk to "
            } else {
                "virtual thunk to "
            };
            (shown, call_offset(special)?)
        }
        b'c' => (
            "covariant return thunk to ",
            call_offset(call_offset(&special[1..])?)?,
        ),
        _ => return None,
    };
    (!encoding.is_empty()).then_some((shown, encoding))
}

/// cpp_demangle takes the first parameter of a constructor template (`_ZNSsC1IPcEET_S1_RKSaIcE`)
/// for its return type and leaves it out: `std::string::string<char*>(char*, allocator const&)`
/// where the constructor takes `(char*, char*, allocator const&)`. Constructors have no return
/// type; giving the name one (`v`, which is not a substitution candidate) right after the name
/// makes cpp_demangle read the parameters whole. The end of the name is the first `E` after which
/// inserting one leaves the name as written: anywhere before, the name changes or does not parse.
fn constructor_template(name: &str, text: &str) -> Option<String> {
    let open = text.find('(')?;
    let head = &text[..open];
    if !head.ends_with('>') || !is_constructor(head) {
        return None;
    }
    let marker = ["C1I", "C2I", "C3I", "CI1", "CI2"]
        .iter()
        .filter_map(|m| name.find(m))
        .min()?;
    name[marker..]
        .match_indices('E')
        .map(|(at, _)| marker + at + 1)
        .find_map(|end| {
            let fixed = parse(&format!("{}v{}", &name[..end], &name[end..]))?;
            fixed.starts_with(head).then_some(fixed)
        })
}

/// Whether `head` (a function's name up to its parameters) names a constructor template:
/// `ns::A<T>::A<U>`, the last component the class's name.
fn is_constructor(head: &str) -> bool {
    let components = split_top(head, "::");
    let [.., class, function] = components.as_slice() else {
        return false;
    };
    let bare = |s: &str| s[..s.find('<').unwrap_or(s.len())].to_string();
    let class = bare(class);
    let class = class.rsplit(' ').next().unwrap_or(&class);
    !class.is_empty() && bare(function) == class
}

/// `text` split at the `sep`s outside `<>`, `()`, `[]` and `{}`.
pub(super) fn split_top<'t>(text: &'t str, sep: &str) -> Vec<&'t str> {
    let mut parts = Vec::new();
    let (mut depth, mut start, mut at) = (0i32, 0, 0);
    while at < text.len() {
        let rest = &text[at..];
        if depth == 0 && rest.starts_with(sep) {
            parts.push(&text[start..at]);
            at += sep.len();
            start = at;
            continue;
        }
        match rest.as_bytes()[0] {
            b'<' | b'(' | b'[' | b'{' => depth += 1,
            b'>' | b')' | b']' | b'}' => depth -= 1,
            _ => {}
        }
        at += rest.chars().next().map_or(1, char::len_utf8);
    }
    parts.push(&text[start..]);
    parts
}

/// c++filt's spellings where cpp_demangle's differ: the standard abbreviations `Ss` and `So`
/// in full, an empty parameter pack without its separator, `decltype(nullptr)`, a space before a
/// function type's parameters, and references and pointers after the whole nested name.
fn written(text: &str) -> String {
    let text = standard_abbreviations(text);
    let text = text.replace(", >", ">").replace(", )", ")");
    let text = replace_word(&text, "std::nullptr_t", "decltype(nullptr)");
    let text = function_types(&text).replace(" const const", " const");
    let text = local_function_returns(&nested_qualifiers(&text));
    negated_names(&callees(&text))
}

/// `std::string` and `std::ostream` (`Ss`, `So`) as c++filt writes every standard abbreviation,
/// in full, and their constructors and destructors by the template's name.
fn standard_abbreviations(text: &str) -> String {
    const FULL: [(&str, &str, &str); 2] = [
        (
            "std::string",
            "std::basic_string<char, std::char_traits<char>, std::allocator<char> >",
            "basic_string",
        ),
        (
            "std::ostream",
            "std::basic_ostream<char, std::char_traits<char> >",
            "basic_ostream",
        ),
    ];
    let mut text = text.to_string();
    for (short, full, template) in FULL {
        let leaf = &short["std::".len()..];
        for (written, shown) in [
            (format!("{short}::{leaf}"), format!("{full}::{template}")),
            (format!("{short}::~{leaf}"), format!("{full}::~{template}")),
        ] {
            text = replace_word(&text, &written, &shown);
        }
        text = replace_word(&text, short, full);
    }
    text
}

/// `text` with each `word` that is a whole name (not part of a longer one) replaced by `by`; a
/// `>` right after a replacement that ends in `>` is spaced as c++filt spaces it.
fn replace_word(text: &str, word: &str, by: &str) -> String {
    let is_name = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(word) {
        let before = rest[..at].chars().last().or_else(|| out.chars().last());
        let after = rest[at + word.len()..].chars().next();
        out.push_str(&rest[..at]);
        if before.is_some_and(is_name) || after.is_some_and(|c| is_name(c) && c != ':') {
            out.push_str(word);
        } else {
            out.push_str(by);
            if by.ends_with('>') && after == Some('>') {
                out.push(' ');
            }
        }
        rest = &rest[at + word.len()..];
    }
    out.push_str(rest);
    out
}

/// A function type in template arguments (`function_ref<StringRef(StringRef)>`) has a space
/// before its parameters in c++filt's text: `function_ref<StringRef (StringRef)>`.
fn function_types(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    // One entry per open bracket: whether it is a template argument list's `<`.
    let mut open: Vec<bool> = Vec::new();
    for (at, c) in text.char_indices() {
        match c {
            '<' if !text[..at].ends_with("operator") && !text[..at].ends_with("operator<") => open.push(true),
            '>' if open.last() == Some(&true) => {
                open.pop();
            }
            '(' => {
                let before = text[..at].chars().last();
                let word_start = text[..at]
                    .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .map_or(0, |i| i + 1);
                let word = &text[word_start..at];
                let keyword = matches!(
                    word,
                    "decltype" | "lambda" | "sizeof" | "alignof" | "noexcept" | "typeid" | "throw"
                ) || text[..word_start].ends_with("operator");
                if open.last() == Some(&true)
                    && before.is_some_and(|c| c.is_alphanumeric() || "_>*&".contains(c))
                    && !keyword
                    && !scopes_a_local_name(&text[at..])
                {
                    out.push(' ');
                }
                open.push(false);
            }
            ')' if open.last() == Some(&false) => {
                open.pop();
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

/// Whether the parameter list that `rest` starts with is a function's whose local entity follows
/// (`f(int) const::{lambda()#1}`), not a function type's.
fn scopes_a_local_name(rest: &str) -> bool {
    let mut depth = 0i32;
    for (at, c) in rest.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    let mut after = &rest[at + 1..];
                    while let Some(r) = [" const", " volatile", " &&", " &"]
                        .iter()
                        .find_map(|q| after.strip_prefix(q))
                    {
                        after = r;
                    }
                    return after.starts_with("::");
                }
            }
            _ => {}
        }
    }
    false
}

/// cpp_demangle writes what applies to a name whose scope is a substitution (`RNS1_9MatchTypeE`,
/// `ZNKS4_1fEv`) after the scope: a reference, pointer or `const` (`FileCheckDiag&::MatchType`),
/// or a function's parameters (`LoopBase<B> (Vec&)::f const::{lambda()#1}`). c++filt writes
/// them after the name: `FileCheckDiag::MatchType&`, `LoopBase<B>::f(Vec&) const::{lambda()#1}`.
fn nested_qualifiers(text: &str) -> String {
    let mut text = text.to_string();
    let mut from = 0;
    while let Some(found) = text[from..].find("::") {
        let at = from + found;
        let named = component_end(&text, at) > at + 2;
        let Some(start) = misplaced(&text[..at]).filter(|_| named) else {
            from = at + 2;
            continue;
        };
        let moved = text[start..at].to_string();
        let end = if moved.starts_with('(') {
            // A function's parameters, which follow its name, before its qualifiers; only where
            // qualifiers show it (`f(int)::Local::g` is a local class's function).
            let end = component_end(&text, at);
            if !scopes_a_local_name(&format!("(){}", &text[end..])) || text[end..].starts_with("::") {
                from = at + 2;
                continue;
            }
            end
        } else {
            nested_name_end(&text, at)
        };
        text.insert_str(end, &moved);
        text.replace_range(start..at, "");
        from = start + 2;
    }
    text
}

/// Where what cpp_demangle misplaced before a `::` at the end of `head` starts: a run of `&`,
/// `*` and ` const`, or a parenthesized parameter list after a space, right after a name.
fn misplaced(head: &str) -> Option<usize> {
    let mut start = head.len();
    if head.ends_with(')') {
        start = matching_open(head)?;
    } else {
        loop {
            let rest = &head[..start];
            if let Some(r) = rest.strip_suffix(" const") {
                start = r.len();
            } else if rest.ends_with(['&', '*']) {
                start -= 1;
            } else {
                break;
            }
        }
    }
    let named = head[..start]
        .chars()
        .last()
        .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '>');
    (start < head.len() && named).then_some(start)
}

/// The index of the `(` that the `)` ending `text` closes.
pub(super) fn matching_open(text: &str) -> Option<usize> {
    let mut depth = 0i32;
    for (at, c) in text.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth -= 1;
                if depth == 0 {
                    return Some(at);
                }
            }
            _ => {}
        }
    }
    None
}

/// Where the name component after the `::` at `at` ends (`::Name<...>`).
fn component_end(text: &str, at: usize) -> usize {
    let rest = &text[at + 2..];
    let mut depth = 0i32;
    for (i, b) in rest.bytes().enumerate() {
        match b {
            b'<' | b'[' => depth += 1,
            b'>' | b']' if depth > 0 => depth -= 1,
            b'~' => {}
            b if depth == 0 && !(b.is_ascii_alphanumeric() || b == b'_') => return at + 2 + i,
            _ => {}
        }
    }
    text.len()
}

/// Where the nested name continuing at `text[at..]` (`::Name<...>::Inner`) ends.
fn nested_name_end(text: &str, mut at: usize) -> usize {
    while text[at..].starts_with("::") {
        at = component_end(text, at);
    }
    at
}

/// A call's callee that is a qualified name (`sr3stdE5begin`) is not parenthesized by c++filt:
/// `decltype (std::begin(x))`, where cpp_demangle writes `decltype ((std::begin)(x))`.
fn callees(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("((") {
        out.push_str(&rest[..at + 1]);
        let inner = &rest[at + 2..];
        let name = inner.find(')').map(|close| &inner[..close]).filter(|name| {
            name.contains("::")
                && name.chars().all(|c| c.is_alphanumeric() || c == '_' || c == ':')
                && inner[name.len() + 1..].starts_with('(')
        });
        match name {
            Some(name) => {
                out.push_str(name);
                rest = &inner[name.len() + 1..];
            }
            None => rest = &rest[at + 1..],
        }
    }
    out.push_str(rest);
    out
}

/// cpp_demangle writes the return type of a template function that scopes a local entity in a
/// template argument (`_Iter_comp_iter<void ns::f<int>(int)::{lambda()#1}>`); c++filt does not
/// (`_Iter_comp_iter<ns::f<int>(int)::{lambda()#1}>`).
fn local_function_returns(text: &str) -> String {
    let mut text = text.to_string();
    let mut from = 0;
    while let Some(found) = text[from..].find('(') {
        let open = from + found;
        from = open + 1;
        if !scopes_a_local_name(&text[open..]) {
            continue;
        }
        let Some(name) = name_start(&text[..open]) else {
            continue;
        };
        let Some(argument) = argument_start(&text[..name]) else {
            continue;
        };
        let returns = &text[argument..name];
        if name > argument && returns.ends_with(' ') && !returns.contains(['(', ',']) {
            text.replace_range(argument..name, "");
            from = argument + 1;
        }
    }
    text
}

/// Where the name that ends `head` (`ns::f<int, char>`) starts.
fn name_start(head: &str) -> Option<usize> {
    let mut depth = 0i32;
    for (at, c) in head.char_indices().rev() {
        match c {
            '>' => depth += 1,
            '<' => depth -= 1,
            c if depth > 0 || c.is_alphanumeric() || "_:~".contains(c) => {}
            _ => return Some(at + 1),
        }
        if depth < 0 {
            return None;
        }
    }
    None
}

/// Where the template argument that `head` ends inside starts (after its `<` or `, `).
fn argument_start(head: &str) -> Option<usize> {
    let mut depth = 0i32;
    for (at, c) in head.char_indices().rev() {
        match c {
            '>' | ')' => depth += 1,
            '(' if depth > 0 => depth -= 1,
            '<' if depth == 0 => return Some(at + 1),
            '<' => depth -= 1,
            ',' if depth == 0 => return Some(at + 2),
            _ => {}
        }
    }
    None
}

/// c++filt writes a negated qualified name without parentheses: `!has_rbegin<T>::value`, where
/// cpp_demangle writes `!(has_rbegin<T>::value)`.
fn negated_names(text: &str) -> String {
    let mut text = text.to_string();
    let mut from = 0;
    while let Some(found) = text[from..].find("!(") {
        let open = from + found + 1;
        from = open;
        let mut depth = 0i32;
        let mut close = None;
        for (at, c) in text[open + 1..].char_indices() {
            match c {
                '<' => depth += 1,
                '>' => depth -= 1,
                ')' if depth == 0 => {
                    close = Some(open + 1 + at);
                    break;
                }
                c if depth == 0 && !(c.is_alphanumeric() || c == '_' || c == ':') => break,
                _ => {}
            }
        }
        if let Some(close) = close.filter(|&c| text[open + 1..c].contains("::")) {
            text.remove(close);
            text.remove(open);
        }
    }
    text
}

/// cpp_demangle renders a user-defined literal operator (`li <source-name>`, `_Zli3_msy`) as
/// `operator_ms::operator ""(unsigned long long)`; it is `operator"" _ms(unsigned long long)`, as
/// c++filt writes it.
fn literal_operators(text: &str) -> String {
    const BROKEN: &str = "::operator \"\"";
    let mut text = text.to_string();
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
