//! Function parameter packs (`Dp`): cpp_demangle writes the elements of a pack once, with the
//! pattern's reference or `const` on one of them (`hash_combine<unsigned char, unsigned int>
//! (unsigned char, unsigned int const&)` for `DpRKT_`); c++filt writes the pattern on each
//! (`(unsigned char const&, unsigned int const&)`). The elements are the pack's template
//! arguments, written right; the parameters they stand for are written again from them.
use super::cxx::{matching_open, split_top};

/// `text`, cpp_demangle's text of `name`, with its function parameter pack written as c++filt
/// writes it; None where `name` has no pack, or its text is not as expected (then it is left).
pub(super) fn expand(name: &str, text: &str) -> Option<String> {
    let (pattern, index) = pack_parameter(name)?;
    let close = text.rfind(')')?;
    let open = matching_open(&text[..=close])?;
    let function = &text[..open];
    let arguments = template_arguments(function)?;
    let elements = arguments.get(index..)?;
    let mut parameters = split_top(&text[open + 1..close], ", ");
    if elements.is_empty() || elements == [""] {
        // An empty pack: cpp_demangle writes its pattern alone (`f<>(&&)`).
        let last = parameters.pop()?;
        if last.is_empty() || !last.chars().all(|c| "&* const".contains(c)) {
            return None;
        }
        let shown = parameters.join(", ");
        return Some(format!("{function}({shown}){}", &text[close + 1..]));
    }
    let first = parameters.len().checked_sub(elements.len())?;
    let key = |s: &str| s.replace(" const", "").replace(['&', '*'], "");
    let matches = parameters[first..]
        .iter()
        .zip(elements)
        .all(|(parameter, element)| key(parameter) == key(element));
    if !matches {
        return None;
    }
    let mut written: Vec<String> = parameters[..first].iter().map(|p| p.to_string()).collect();
    for element in elements {
        written.push(apply(pattern, element)?);
    }
    Some(format!(
        "{function}({}){}",
        written.join(", "),
        &text[close + 1..]
    ))
}

/// The pattern (`O`, `RK`) and template parameter index of the only function parameter pack of
/// `name` (`DpOT_`, `DpRKT1_`), where it has one and it is the last parameter.
fn pack_parameter(name: &str) -> Option<(&str, usize)> {
    let at = name.find("Dp")?;
    if name[at + 2..].contains("Dp") {
        return None;
    }
    let rest = &name[at + 2..];
    let quals = rest
        .bytes()
        .take_while(|b| matches!(b, b'R' | b'O' | b'K'))
        .count();
    let param = rest[quals..].strip_prefix('T')?;
    let digits = param.bytes().take_while(u8::is_ascii_digit).count();
    let after = param[digits..].strip_prefix('_')?;
    // The last parameter: nothing but a clone suffix may follow.
    if !(after.is_empty() || after.starts_with('.')) {
        return None;
    }
    let index = if digits == 0 {
        0
    } else {
        param[..digits].parse::<usize>().ok()? + 1
    };
    Some((&rest[..quals], index))
}

/// The template arguments of the function named `function` (its own, else its class's).
fn template_arguments(function: &str) -> Option<Vec<&str>> {
    let close = function.rfind('>')?;
    let mut depth = 0i32;
    for (at, c) in function[..=close].char_indices().rev() {
        match c {
            '>' => depth += 1,
            '<' => {
                depth -= 1;
                if depth == 0 {
                    // The last argument keeps the space c++filt puts before a `>` after a `>`.
                    let arguments = split_top(&function[at + 1..close], ", ");
                    return Some(arguments.into_iter().map(str::trim_end).collect());
                }
            }
            _ => {}
        }
    }
    None
}

/// `element` under the pattern (`O` for `&&`, `RK` for `const&`), references collapsed as
/// c++filt collapses them: a reference stays one (`int&` under `O` is `int&`).
fn apply(pattern: &str, element: &str) -> Option<String> {
    let reference = element.ends_with('&') || element.contains("(&)") || element.contains("(&&)");
    // A function or array type is written around its name: a pointer to a function takes the
    // pattern inside its parentheses (`char (*&&)(int)`); other such types are left.
    let decltype = element.starts_with("decltype(");
    if element.ends_with([')', ']']) && !reference && !decltype {
        let at = element.rfind("(*)").filter(|_| element.ends_with(')'))?;
        let inner = match pattern {
            "O" => "&&",
            "RK" => " const&",
            "R" => "&",
            _ => return None,
        };
        return Some(format!("{}(*{inner}){}", &element[..at], &element[at + 3..]));
    }
    Some(match pattern {
        "O" if reference => element.to_string(),
        "O" => format!("{element}&&"),
        "RK" if element.ends_with("&&") => format!("{}&", &element[..element.len() - 2]),
        "RK" if reference => element.to_string(),
        "RK" if element.ends_with(" const") => format!("{element}&"),
        "RK" => format!("{element} const&"),
        "R" if element.ends_with("&&") => format!("{}&", &element[..element.len() - 2]),
        "R" if reference => element.to_string(),
        "R" => format!("{element}&"),
        _ => return None,
    })
}
