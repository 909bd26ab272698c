//! `xtrace generate -o DIR`: the man pages, shell completions and the Markdown CLI reference,
//! all rendered from the clap definitions, so a flag's meaning has one source (its doc comment).
//! The repository keeps them in docs/reference/ (`cargo xtask man` writes them), and a test fails
//! when those files differ from what the code renders.
use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
};

use clap::{Arg, Args, Command, CommandFactory};
use clap_complete::Shell;

use crate::error::{Error, Result};

#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// The directory to write man/, completions/ and cli.md into (created if missing).
    ///
    /// Packagers install man/*.1 under share/man/man1 and the completions where their shells
    /// look for them; the repository keeps them in docs/reference.
    #[arg(short = 'o', long = "output", value_name = "DIR", required = true)]
    pub output: PathBuf,
}

/// One rendered file: its path under the output directory, and its bytes.
pub struct Generated {
    pub path: PathBuf,
    pub bytes: Vec<u8>,
}

/// Writes every generated file under `args.output`; the note to show says what was written.
pub fn run(args: &GenerateArgs) -> Result<String> {
    let files = files();
    for file in &files {
        let path = args.output.join(&file.path);
        let write = |path: &Path| -> std::io::Result<()> {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(path, &file.bytes)
        };
        write(&path).map_err(|source| Error::Output { path, source })?;
    }
    Ok(format!(
        "wrote {} files into {}",
        files.len(),
        crate::output::shown(&args.output)
    ))
}

/// The command as the generated files describe it: the package version, without the commit
/// `--version` adds, so the files change only when the interface does.
fn command() -> Command {
    let mut command = super::Cli::command().version(env!("CARGO_PKG_VERSION"));
    command.build();
    command
}

/// Every generated file: a man page per command (`xtrace.1`, `xtrace-record.1`,
/// `xtrace-list-symbols.1`, ...), completions for bash, zsh and fish, and cli.md.
pub fn files() -> Vec<Generated> {
    let command = command();
    let mut files = Vec::new();
    for (name, page) in pages(&command, "xtrace") {
        let mut bytes = Vec::new();
        // Rendering into memory cannot fail.
        let _ = clap_mangen::Man::new(page).render(&mut bytes);
        files.push(Generated {
            path: Path::new("man").join(format!("{name}.1")),
            bytes,
        });
    }
    for (shell, file) in [
        (Shell::Bash, "xtrace.bash"),
        (Shell::Zsh, "_xtrace"),
        (Shell::Fish, "xtrace.fish"),
    ] {
        let mut bytes = Vec::new();
        clap_complete::generate(shell, &mut command.clone(), "xtrace", &mut bytes);
        files.push(Generated {
            path: Path::new("completions").join(file),
            bytes,
        });
    }
    files.push(Generated {
        path: PathBuf::from("cli.md"),
        bytes: markdown(&command).into_bytes(),
    });
    files
}

/// The commands that get a page of their own, each named as its man page is (`xtrace-list-usdt`):
/// the root and every subcommand at any depth, clap's own `help` left out.
fn pages(command: &Command, name: &str) -> Vec<(String, Command)> {
    let mut pages = vec![(name.to_string(), command.clone().name(name.to_string()))];
    for sub in visible_subcommands(command) {
        pages.extend(self::pages(sub, &format!("{name}-{}", sub.get_name())));
    }
    pages
}

fn visible_subcommands(command: &Command) -> impl Iterator<Item = &Command> {
    command
        .get_subcommands()
        .filter(|sub| sub.get_name() != "help" && !sub.is_hide_set())
}

/// The CLI reference as Markdown: per command its description, usage and options, grouped under
/// the headings `--help` shows, each with its whole `--help` text.
fn markdown(root: &Command) -> String {
    let mut text = String::from(
        "# xtrace command-line reference\n\n\
         Generated from xtrace's argument definitions by `cargo xtask man`; do not edit by hand \
         (a test compares this file with what the code generates). `xtrace --help` and \
         `xtrace COMMAND --help` print the same text, and `man xtrace` shows it as man pages.\n\n\
         Commands:\n\n",
    );
    let mut commands = vec![(String::from("xtrace"), root)];
    let mut i = 0;
    while i < commands.len() {
        let (path, command) = (commands[i].0.clone(), commands[i].1);
        commands.extend(visible_subcommands(command).map(|sub| (format!("{path} {}", sub.get_name()), sub)));
        i += 1;
    }
    for (path, command) in &commands {
        let about = command.get_about().map(ToString::to_string).unwrap_or_default();
        let _ = writeln!(text, "- [`{path}`](#{}): {about}", path.replace(' ', "-"));
    }
    for (path, command) in &commands {
        command_section(&mut text, path, command);
    }
    text
}

fn command_section(text: &mut String, path: &str, command: &Command) {
    let _ = writeln!(text, "\n## {path}\n");
    if let Some(about) = command.get_long_about().or(command.get_about()) {
        let _ = writeln!(text, "{about}\n");
    }
    let usage = command.clone().render_usage().to_string();
    let usage = usage.trim_start_matches("Usage:").trim();
    let _ = writeln!(text, "```\n{usage}\n```");
    let mut headings: Vec<Option<&str>> = Vec::new();
    for arg in command.get_arguments().filter(|a| !a.is_hide_set()) {
        if !headings.contains(&arg.get_help_heading()) {
            headings.push(arg.get_help_heading());
        }
    }
    for heading in headings {
        let title = heading.unwrap_or("Options");
        let _ = writeln!(text, "\n### {title}\n");
        let args = command
            .get_arguments()
            .filter(|a| !a.is_hide_set() && a.get_help_heading() == heading);
        for arg in args {
            argument(text, arg);
        }
    }
}

/// One argument: its forms, its whole help, and the values it takes.
fn argument(text: &mut String, arg: &Arg) {
    let help = arg
        .get_long_help()
        .or(arg.get_help())
        .map(ToString::to_string)
        .unwrap_or_default();
    let _ = write!(text, "- `{}`", forms(arg));
    // Paragraphs stay paragraphs of the list item; lines within one are joined, as clap wraps
    // them anyway.
    let paragraphs: Vec<String> = help
        .split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let _ = write!(text, ": {}", paragraphs.join("\n\n  "));
    let takes_values = arg.get_num_args().is_some_and(|n| n.takes_values());
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    if !values.is_empty() && takes_values && !arg.is_positional() {
        let _ = write!(text, " Values: {}.", values.join(", "));
    }
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| format!("`{}`", v.to_string_lossy()))
        .collect();
    if !defaults.is_empty() && takes_values {
        let _ = write!(text, " Default: {}.", defaults.join(", "));
    }
    text.push('\n');
}

/// `-p, --pid <PID>`, `--gpu-metrics[=<PERIOD>]`, `[COMMAND]...`.
fn forms(arg: &Arg) -> String {
    let value = arg
        .get_value_names()
        .map(|names| {
            names
                .iter()
                .map(|n| format!("<{n}>"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| format!("<{}>", arg.get_id().as_str().to_uppercase()));
    if arg.is_positional() {
        return if arg.is_last_set() {
            format!("-- {value}...")
        } else {
            value
        };
    }
    let mut names = Vec::new();
    if let Some(short) = arg.get_short() {
        names.push(format!("-{short}"));
    }
    if let Some(long) = arg.get_long() {
        names.push(format!("--{long}"));
    }
    let mut forms = names.join(", ");
    if arg.get_num_args().is_some_and(|n| n.takes_values()) {
        let optional = arg.get_num_args().is_some_and(|n| n.min_values() == 0);
        if optional {
            let _ = write!(forms, "[={value}]");
        } else {
            let _ = write!(forms, " {value}");
        }
    }
    forms
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::files;

    /// docs/reference holds exactly what the code generates: run `cargo xtask man` after changing
    /// a flag, a subcommand or a doc comment of either.
    #[test]
    fn checked_in_reference_matches_the_code() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/reference");
        let mut stale = Vec::new();
        for file in files() {
            let checked_in = std::fs::read(root.join(&file.path)).unwrap_or_default();
            if checked_in != file.bytes {
                stale.push(file.path.display().to_string());
            }
        }
        assert!(
            stale.is_empty(),
            "docs/reference/{{{}}} differ from what the code generates: run `cargo xtask man`",
            stale.join(",")
        );
    }

    /// No man page or completion is left behind for a command that is gone.
    #[test]
    fn no_generated_file_is_left_over() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/reference");
        let generated: BTreeSet<_> = files().into_iter().map(|f| f.path).collect();
        for dir in ["man", "completions"] {
            for entry in std::fs::read_dir(root.join(dir)).into_iter().flatten().flatten() {
                let path = std::path::Path::new(dir).join(entry.file_name());
                assert!(
                    generated.contains(&path),
                    "docs/reference/{} is no longer generated: delete it",
                    path.display()
                );
            }
        }
    }

    /// Every page has a name, and the subcommands nest: `xtrace list symbols` is xtrace-list-symbols.
    #[test]
    fn every_command_has_its_man_page() {
        let names: Vec<String> = files()
            .into_iter()
            .filter(|f| f.path.starts_with("man"))
            .map(|f| f.path.display().to_string())
            .collect();
        for page in [
            "man/xtrace.1",
            "man/xtrace-record.1",
            "man/xtrace-list-symbols.1",
            "man/xtrace-check.1",
        ] {
            assert!(names.iter().any(|n| n == page), "{page} not in {names:?}");
        }
    }

    /// Every flag and argument a user can see has a help line of its own: a doc comment sitting
    /// above the wrong field leaves one empty and glues its text onto the next one's.
    #[test]
    fn every_visible_argument_has_help() {
        use clap::CommandFactory;
        fn walk(command: &clap::Command, path: &str, empty: &mut Vec<String>) {
            for arg in command.get_arguments().filter(|a| !a.is_hide_set()) {
                if arg.get_help().is_none_or(|h| h.to_string().trim().is_empty()) {
                    empty.push(format!("{path} {}", arg.get_id()));
                }
            }
            for sub in command.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), empty);
            }
        }
        let mut empty = Vec::new();
        walk(&super::super::Cli::command(), "xtrace", &mut empty);
        assert!(empty.is_empty(), "arguments without help: {empty:?}");
    }
}
