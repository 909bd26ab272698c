//! Which top-level modules of a crate's `src` import each other. A module is a file or directory
//! directly under `src` (lib.rs and main.rs aside); it imports another when any of its files
//! names `crate::OTHER`, in a `use` (braced lists included) or inline in a path. Comments are
//! skipped; a string that spells a path would count, which no file here has.
use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    path::Path,
};

use anyhow::{Context as _, Result};

/// Two modules, each importing the other, with one file on each side that does.
#[derive(Debug, PartialEq, Eq)]
pub struct Pair {
    pub first: String,
    pub second: String,
    pub first_file: String,
    pub second_file: String,
}

impl fmt::Display for Pair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} <-> {} ({} imports {}, {} imports {})",
            self.first, self.second, self.first_file, self.second, self.second_file, self.first
        )
    }
}

/// Every pair of top-level modules of `src` that import each other.
pub fn mutual_imports(src: &Path) -> Result<Vec<Pair>> {
    let modules = top_level_modules(src)?;
    // module -> imported module -> the first file (relative to src) that imports it
    let mut imports: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for module in &modules {
        let root = src.join(module);
        let files = if root.is_dir() {
            rust_files(&root)?
        } else {
            vec![src.join(format!("{module}.rs"))]
        };
        for file in files {
            let text =
                std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
            let relative = file.strip_prefix(src).unwrap_or(&file).display().to_string();
            for other in imported(&text, &modules) {
                if &other != module {
                    imports
                        .entry(module.clone())
                        .or_default()
                        .entry(other)
                        .or_insert_with(|| relative.clone());
                }
            }
        }
    }
    Ok(pairs(&imports))
}

fn pairs(imports: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<Pair> {
    let mut pairs = Vec::new();
    for (first, theirs) in imports {
        for (second, first_file) in theirs {
            if first >= second {
                continue;
            }
            if let Some(second_file) = imports.get(second).and_then(|m| m.get(first)) {
                pairs.push(Pair {
                    first: first.clone(),
                    second: second.clone(),
                    first_file: first_file.clone(),
                    second_file: second_file.clone(),
                });
            }
        }
    }
    pairs
}

fn top_level_modules(src: &Path) -> Result<BTreeSet<String>> {
    let mut modules = BTreeSet::new();
    for entry in std::fs::read_dir(src).with_context(|| format!("reading {}", src.display()))? {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if path.is_dir() {
            modules.insert(name.to_string());
        } else if let Some(stem) = name.strip_suffix(".rs") {
            if stem != "lib" && stem != "main" {
                modules.insert(stem.to_string());
            }
        }
    }
    Ok(modules)
}

fn rust_files(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            files.extend(rust_files(&path)?);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// The modules of `modules` that `text` names as `crate::NAME` or inside `crate::{...}`.
fn imported(text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let code: String = text
        .lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(list) = rest.strip_prefix('{') {
            let end = braced_end(list);
            for name in list[..end].split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')) {
                let first = name.split("::").next().unwrap_or("");
                if modules.contains(first) {
                    found.insert(first.to_string());
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if modules.contains(&name) {
                found.insert(name);
            }
        }
    }
    found
}

/// Where the brace list that `list` starts inside ends (its closing brace, nested ones skipped).
fn braced_end(list: &str) -> usize {
    let mut depth = 1;
    for (i, c) in list.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    list.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modules(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn paths_braced_lists_and_inline_uses_count_comments_do_not() {
        let all = modules(&["a", "b", "c", "d", "e"]);
        let text = "use crate::{a::X, b::{Y, Z}};\nfn f() { crate::c::g(); }\n// crate::d::h\n";
        assert_eq!(imported(text, &all), modules(&["a", "b", "c"]));
        let nested = "use crate::{\n    e::{self, f::G},\n    a,\n};";
        assert_eq!(imported(nested, &all), modules(&["a", "e"]));
    }

    #[test]
    fn a_pair_is_found_once_with_a_file_on_each_side() {
        let mut imports: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        let mut add = |from: &str, to: &str, file: &str| {
            imports
                .entry(from.into())
                .or_default()
                .insert(to.into(), file.into());
        };
        add("a", "b", "a/x.rs");
        add("b", "a", "b.rs");
        add("b", "c", "b.rs");
        let found = pairs(&imports);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].to_string(), "a <-> b (a/x.rs imports b, b.rs imports a)");
    }
}
