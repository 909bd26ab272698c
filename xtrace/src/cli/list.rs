//! `xtrace list symbols`: the functions `-u` would attach, with file offsets, addresses and sizes;
//! `xtrace list usdt`: the USDT probes `-U` can attach, with locations, semaphores and arguments.
//!
//! `xtrace list symbols TARGET [GLOB]` reads TARGET (a path, a library name found with
//! `ldconfig -p`, or a command in PATH); `xtrace list symbols --pid PID ['[TARGET:]GLOB']` resolves
//! the spec exactly as `-u` does for that process, and `--pid PID TARGET GLOB` also works.
use clap::{Args, Subcommand};

use crate::{
    error::{Error, Result},
    launch::resolve_command,
    probes::{
        entry::{EntryMode, EntrySites},
        exits::ExitMode,
        ifunc::{Ifunc, InProcess},
        spec::{TargetSpec, UprobeSpec},
        uprobe::{self, Scope},
        usdt,
    },
    target::Process,
};

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(subcommand)]
    pub what: ListCommand,
}

#[derive(Debug, Subcommand)]
pub enum ListCommand {
    /// Functions that `-u` would attach: `list symbols TARGET [GLOB]` or
    /// `list symbols --pid PID ['[TARGET:]GLOB']`.
    Symbols(SymbolsArgs),
    /// USDT probes (`.note.stapsdt`) that `-U` can attach: `list usdt TARGET` or
    /// `list usdt --pid PID [TARGET]` (every module the process maps when TARGET is omitted).
    Usdt(UsdtArgs),
}

#[derive(Debug, Args)]
pub struct UsdtArgs {
    /// List the modules this process maps (its main executable and every library).
    #[arg(allow_negative_numbers = true, short = 'p', long = "pid", value_name = "PID")]
    pub pid: Option<u32>,
    /// An executable or library: a path, a library name, or a command in PATH.
    #[arg(value_name = "TARGET")]
    pub target: Option<String>,
}

#[derive(Debug, Args)]
pub struct SymbolsArgs {
    /// Resolve TARGET in this process (its main executable when TARGET is omitted).
    #[arg(allow_negative_numbers = true, short = 'p', long = "pid", value_name = "PID")]
    pub pid: Option<u32>,
    /// TARGET [GLOB] (GLOB defaults to `*`); with --pid, a `-u` spec `[TARGET:]GLOB`, or TARGET GLOB.
    #[arg(value_name = "TARGET|SPEC", num_args = 0..=2)]
    pub args: Vec<String>,
    /// Where the PROBE column places entry probes, as `xtrace --entry` does.
    #[arg(long = "entry", value_name = "WHERE", value_enum, default_value_t = EntryMode::Auto)]
    pub entry: EntryMode,
    /// How returns would be probed, as `xtrace --exits` does: an entry never moves onto an exit
    /// probed at its instruction.
    #[arg(long = "exits", value_name = "HOW", value_enum, default_value_t = ExitMode::Auto)]
    pub exits: ExitMode,
    /// Also look for the separate debug files of stripped files in DIR, as `xtrace --debug-dir`
    /// does (repeatable).
    #[arg(long = "debug-dir", value_name = "DIR", value_parser = crate::elf::debug_file::parse_dir)]
    pub debug_dirs: Vec<std::path::PathBuf>,
}

/// The spec the arguments describe.
fn spec(args: &SymbolsArgs) -> Result<UprobeSpec> {
    // GLOB as a -u spec's symbol part: with value types (`f(i64, i64)`), it places the entry
    // probe as a trace with those types would (an instruction that writes a captured argument
    // register is not moved past).
    let explicit = |target: &str, glob: &str| -> Result<UprobeSpec> {
        if glob.trim().is_empty() {
            return Err(Error::Usage(
                "`xtrace list symbols TARGET GLOB` was given an empty GLOB; give a name or a glob such as `*`".into(),
            ));
        }
        let typed = UprobeSpec::parse(glob)?;
        Ok(UprobeSpec {
            text: format!("{target}:{glob}"),
            target: TargetSpec::named(target),
            ..typed
        })
    };
    match (args.pid, args.args.as_slice()) {
        (_, [target, glob]) => explicit(target, glob),
        (Some(_), [spec]) => UprobeSpec::parse(spec),
        (Some(_), []) => UprobeSpec::parse("*"),
        (None, [target]) => explicit(target, "*"),
        (None, _) => Err(Error::Usage(
            "`xtrace list symbols` needs a TARGET (a path or library name) or --pid PID".into(),
        )),
        (Some(_), _) => unreachable!("clap allows at most two arguments"),
    }
}

/// Runs `xtrace list ...`: the table for stdout and closing lines (notes, warnings) for stderr.
pub fn run(args: &ListArgs) -> Result<(String, String)> {
    match &args.what {
        ListCommand::Symbols(args) => symbols(args),
        ListCommand::Usdt(args) => usdt(args),
    }
}

/// A TARGET given without `--pid`: a bare name that is no library may be a command in PATH.
fn standalone_target(target: &mut TargetSpec) {
    if let TargetSpec::Library(name) = target {
        if crate::target::library_from_cache(name).is_err() {
            if let Ok(path) = resolve_command(name.as_ref()) {
                *target = TargetSpec::Path(path);
            }
        }
    }
}

fn usdt(args: &UsdtArgs) -> Result<(String, String)> {
    let process = args.pid.map(Process::open).transpose()?;
    let mut target = args.target.as_deref().map(TargetSpec::named);
    let scope = match &process {
        Some(process) => Scope::Process(process),
        None => {
            let target = target.as_mut().ok_or_else(|| {
                Error::Usage("`xtrace list usdt` needs a TARGET (a path or library name) or --pid PID".into())
            })?;
            standalone_target(target);
            // Files by path or library name only, as with -a.
            Scope::SystemWide
        }
    };
    let (files, warnings) = usdt::plan::list(&scope, target.as_ref())?;
    let mut out = format!(
        "{:<32} {:<18} {:<18}  ARGUMENTS\n",
        "PROBE", "OFFSET", "SEMAPHORE"
    );
    let mut probes = 0;
    for (file, notes) in &files {
        out += &format!("{}:\n", file.shown.display());
        for note in notes {
            let semaphore = note
                .semaphore_offset
                .map_or("-".to_string(), |s| format!("{s:#x}"));
            out += &format!(
                "  {:<30} {:<18} {:<18}  {}\n",
                format!("{}:{}", note.provider, note.name),
                format!("{:#x}", note.offset),
                semaphore,
                note.args_text
            );
        }
        probes += notes.len();
    }
    let plural = if probes == 1 { "" } else { "s" };
    let modules = if files.len() == 1 { "file" } else { "files" };
    // The warnings in the order found, then the count: one line each.
    let mut note: Vec<String> = warnings.iter().map(|w| format!("warning: {w}")).collect();
    note.push(format!(
        "{probes} USDT call site{plural} in {} {modules}",
        files.len()
    ));
    Ok((out, note.join("\n")))
}

/// The `[TARGET:]*` spec that lists every function of `target` in a process.
fn all_of(target: &TargetSpec) -> String {
    match target {
        TargetSpec::MainExecutable => "*".into(),
        TargetSpec::Path(path) => format!("{}:*", path.display()),
        TargetSpec::Library(name) => format!("{name}:*"),
    }
}

/// The error of `xtrace list symbols` where `spec` names no function (in process `pid`): what
/// fits a listing rather than a trace.
fn listing_error(e: Error, spec: &UprobeSpec, pid: Option<u32>) -> Error {
    match e {
        // The advice of -u (`list the functions with xtrace list symbols`) does not fit here.
        Error::SymbolNotFound {
            path,
            stripped,
            debug_refused,
            ..
        } if spec.symbol == "*" => {
            let stripped = match (stripped, debug_refused) {
                (false, _) => String::new(),
                (true, Some(refused)) => {
                    format!(" (it is stripped and exports none, and {refused} is not its debug file)")
                }
                (true, None) => " (it is stripped, exports none, and no debug file of it was found; \
                             --debug-dir names where debug files are)"
                    .into(),
            };
            Error::Unreadable {
            path,
            reason: format!(
                "no function symbols{stripped}; trace its calls into libraries (-u LIB:FUNC) or sample it (-F HZ)"
            ),
        }
        }
        Error::SymbolNotFound {
            symbol,
            path,
            stripped,
            debug_refused,
            close,
        } if close.is_empty() => Error::Unreadable {
            reason: format!(
                "no function matches `{symbol}`{}; list them all with `xtrace list symbols {}`",
                crate::error::stripped_note(stripped, debug_refused.as_deref()),
                match pid {
                    // As the process maps it: its file may be deleted or replaced on disk.
                    Some(pid) => format!(
                        "--pid {pid} {}",
                        crate::shell::quote_words(&[all_of(&spec.target)])
                    ),
                    None => crate::shell::quote_words(&[path.display().to_string()]),
                }
            ),
            path,
        },
        e => e,
    }
}

fn symbols(args: &SymbolsArgs) -> Result<(String, String)> {
    let mut spec = spec(args)?;
    let process = args.pid.map(Process::open).transpose()?;
    let scope = match &process {
        Some(process) => Scope::Process(process),
        None => {
            standalone_target(&mut spec.target);
            // Files by path or library name only, as with -a.
            Scope::SystemWide
        }
    };
    let dirs = crate::elf::debug_file::DebugDirs::new(args.debug_dirs.clone());
    let (file, symbols) = uprobe::symbols_for(&spec, &scope, &dirs)?;
    let found = symbols
        .find(&spec.symbol)
        .map_err(|e| listing_error(e, &spec, args.pid))?;
    let code = std::fs::File::open(&file.open).map_err(|e| Error::Unreadable {
        path: file.shown.clone(),
        reason: e.to_string(),
    })?;
    // IFUNCs resolved in the process, as a trace resolves them; sorted by offset again.
    let mut in_process = InProcess::default();
    let mut found: Vec<_> = found
        .into_iter()
        .map(|f| uprobe::in_scope(f, &scope, (&file, &code), &symbols, &mut in_process))
        .collect();
    found.sort_by_key(|f| f.file_offset);
    let mut entries = EntrySites::default();
    let mut out = format!(
        "{:<18} {:<18} {:>8} {:<18}  NAME\n",
        "OFFSET", "ADDRESS", "SIZE", "PROBE"
    );
    for f in &found {
        let placed = uprobe::placement(
            (args.entry, args.exits),
            (&file, &code),
            &symbols,
            f,
            spec.args.len(),
            &mut entries,
        )?;
        let probe = placed.map_or("-".to_string(), |(entry, _)| format!("{entry:#x}"));
        out += &format!(
            "{:<18} {:<18} {:>8} {:<18}  {}\n",
            format!("{:#x}", f.file_offset),
            format!("{:#x}", f.address),
            f.size,
            probe,
            f.demangled
        );
    }
    let stripped = match (&symbols.debug_file, symbols.stripped) {
        (Some(debug), _) => format!(" (stripped; named from its debug file {})", debug.display()),
        (None, true) => match &symbols.debug_refused {
            Some(refused) => format!(" (stripped: .dynsym only; {refused} is not its debug file)"),
            None => " (stripped: .dynsym only)".into(),
        },
        (None, false) => String::new(),
    };
    let plural = if found.len() == 1 { "" } else { "s" };
    let resolved = found
        .iter()
        .filter(|f| matches!(f.ifunc, Ifunc::Resolved { .. }))
        .count();
    let ifuncs = match resolved {
        0 => String::new(),
        1 => "; 1 is an IFUNC, shown at the implementation its resolver picks on this machine".into(),
        n => format!("; {n} are IFUNCs, shown at the implementations their resolvers pick on this machine"),
    };
    let note = format!(
        "{} function{plural} in {}{stripped}{ifuncs}",
        found.len(),
        file.shown.display()
    );
    Ok((out, note))
}
