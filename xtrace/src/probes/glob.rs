//! Shell-style globs over symbol names: `*` matches any run of characters (`::` included), `?` one
//! character, `[abc]`, `[a-z]` and `[!abc]` one character of (or not of) a set. A `[` without a
//! closing `]`, or a bracketed group with a `:` or a space in it, is ordinary text, so demangled
//! names such as `f[abi:cxx11]` and `f(long) [clone .isra.0]` can be written.

/// Whether `text` uses any glob syntax (otherwise it names one symbol exactly).
pub fn is_glob(text: &str) -> bool {
    let chars: Vec<char> = text.chars().collect();
    text.contains(['*', '?'])
        || (0..chars.len()).any(|at| chars[at] == '[' && class(&chars, at, '\0').is_some())
}

/// Whether `pattern` matches all of `text`.
pub fn matches(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0, 0);
    // Where the last `*` was, and the text position it currently covers up to.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, t));
                p += 1;
                continue;
            }
            Some('?') => {
                p += 1;
                t += 1;
                continue;
            }
            Some('[') => {
                if let Some((matched, next)) = class(&pattern, p, text[t]) {
                    if matched {
                        p = next;
                        t += 1;
                        continue;
                    }
                } else if text[t] == '[' {
                    p += 1;
                    t += 1;
                    continue;
                }
            }
            Some(&c) if c == text[t] => {
                p += 1;
                t += 1;
                continue;
            }
            _ => {}
        }
        // Mismatch: let the last `*` swallow one more character, or fail.
        match star {
            Some((star_p, star_t)) => {
                star = Some((star_p, star_t + 1));
                p = star_p + 1;
                t = star_t + 1;
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

/// Matches `c` against the class starting at `pattern[open]` (a `[`): `Some((matched, index after
/// the ']'))`, or `None` when the `[` starts no class: it has no closing `]`, or the group holds a
/// `:` or a space (a demangled name's `[abi:cxx11]` or `[clone .isra.0]`).
fn class(pattern: &[char], open: usize, c: char) -> Option<(bool, usize)> {
    let close = open + 2 + pattern.get(open + 2..)?.iter().position(|&c| c == ']')?;
    if pattern[open + 1..close].iter().any(|&c| c == ':' || c == ' ') {
        return None;
    }
    let mut i = open + 1;
    let negated = matches!(pattern.get(i), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    loop {
        let &lo = pattern.get(i)?;
        if lo == ']' && !first {
            return Some((matched != negated, i + 1));
        }
        first = false;
        if pattern.get(i + 1) == Some(&'-') && pattern.get(i + 2).is_some_and(|&hi| hi != ']') {
            let hi = pattern[i + 2];
            matched |= lo <= c && c <= hi;
            i += 3;
        } else {
            matched |= lo == c;
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stars_and_questions() {
        assert!(matches("*", ""));
        assert!(matches("*", "anything::at::all"));
        assert!(matches("*compute*", "ns::compute_all(int)"));
        assert!(matches(
            "ns::Matrix::*",
            "ns::Matrix::mul(ns::Matrix const&) const"
        ));
        assert!(!matches("ns::Matrix::*", "ns::MatrixView::get()"));
        assert!(matches("f?", "f1"));
        assert!(!matches("f?", "f10"));
        assert!(matches("f*0", "f1000"));
        assert!(!matches("f*0", "f1001"));
        assert!(matches("a*b*c", "axxbyyc"));
        assert!(!matches("a*b*c", "axxbyy"));
        assert!(matches("exact", "exact"));
        assert!(!matches("exact", "exactly"));
    }

    #[test]
    fn classes() {
        assert!(matches("f[0-4]", "f3"));
        assert!(!matches("f[0-4]", "f7"));
        assert!(matches("f[!0-4]", "f7"));
        assert!(matches("f[ab]x", "fbx"));
        assert!(matches("f[]]", "f]"));
        assert!(matches("f[a-]", "f-"));
    }

    #[test]
    fn unclosed_bracket_is_literal() {
        assert!(!is_glob("f[abi"));
        assert!(matches("f[abi", "f[abi"));
        assert!(matches("name[abi:cxx11*", "name[abi:cxx11]()"));
        assert!(is_glob("f[ab]"));
        assert!(is_glob("f*"));
        assert!(!is_glob("ns::f(int)"));
    }

    #[test]
    fn abi_tags_and_clone_suffixes_are_literal() {
        for name in [
            "ns::getname[abi:cxx11]",
            "ns::Matrix::plain(long) [clone .isra.0]",
        ] {
            assert!(!is_glob(name), "{name}");
            assert!(matches(name, name), "{name}");
        }
        assert!(matches("ns::get*[abi:cxx11]", "ns::getname[abi:cxx11]"));
        assert!(!matches("ns::get*[abi:cxx11]", "ns::getnamec"));
        assert!(is_glob("f[ab][abi:cxx11]"));
        assert!(matches("f[ab][abi:cxx11]", "fb[abi:cxx11]"));
    }
}
