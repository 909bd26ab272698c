//! `xtrace list symbols`: the functions `-u` would attach, with file offsets, addresses and sizes.
//!
//! `xtrace list symbols TARGET [GLOB]` reads TARGET (a path, a library name found with
//! `ldconfig -p`, or a command in PATH); `xtrace list symbols --pid PID ['[TARGET:]GLOB']` resolves
//! the spec exactly as `-u` does for that process, and `--pid PID TARGET GLOB` also works.
use clap::{Args, Subcommand};

use crate::{
    error::{Error, Result},
    probes::{
        spec::{TargetSpec, UprobeSpec},
        uprobe::{self, Scope},
    },
    target::{resolve_command, Process},
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
}

#[derive(Debug, Args)]
pub struct SymbolsArgs {
    /// Resolve TARGET in this process (its main executable when TARGET is omitted).
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pid: Option<u32>,
    /// TARGET [GLOB] (GLOB defaults to `*`); with --pid, a `-u` spec `[TARGET:]GLOB`, or TARGET GLOB.
    #[arg(value_name = "TARGET|SPEC", num_args = 0..=2)]
    pub args: Vec<String>,
}

/// The spec the arguments describe.
fn spec(args: &SymbolsArgs) -> Result<UprobeSpec> {
    let explicit = |target: &str, glob: &str| UprobeSpec {
        text: format!("{target}:{glob}"),
        target: TargetSpec::named(target),
        symbol: glob.to_string(),
        args: Vec::new(),
        ret: None,
    };
    match (args.pid, args.args.as_slice()) {
        (_, [target, glob]) => Ok(explicit(target, glob)),
        (Some(_), [spec]) => UprobeSpec::parse(spec),
        (Some(_), []) => UprobeSpec::parse("*"),
        (None, [target]) => Ok(explicit(target, "*")),
        (None, _) => Err(Error::Usage(
            "`xtrace list symbols` needs a TARGET (a path or library name) or --pid PID".into(),
        )),
        (Some(_), _) => unreachable!("clap allows at most two arguments"),
    }
}

/// Runs `xtrace list ...`: the table for stdout and a closing line for stderr.
pub fn run(args: &ListArgs) -> Result<(String, String)> {
    let ListCommand::Symbols(args) = &args.what;
    let mut spec = spec(args)?;
    let process = args.pid.map(Process::open).transpose()?;
    let scope = match &process {
        Some(process) => Scope::Process(process),
        None => {
            // A bare name that is no library may be a command in PATH.
            if let TargetSpec::Library(name) = &spec.target {
                if crate::target::library_from_cache(name).is_err() {
                    if let Ok(path) = resolve_command(name) {
                        spec.target = TargetSpec::Path(path);
                    }
                }
            }
            // Files by path or library name only, as with -a.
            Scope::SystemWide
        }
    };
    let (file, symbols) = uprobe::symbols_for(&spec, &scope)?;
    let found = symbols.find(&spec.symbol)?;
    let mut out = format!("{:<18} {:<18} {:>8}  NAME\n", "OFFSET", "ADDRESS", "SIZE");
    for f in &found {
        out += &format!(
            "{:<18} {:<18} {:>8}  {}\n",
            format!("{:#x}", f.file_offset),
            format!("{:#x}", f.address),
            f.size,
            f.demangled
        );
    }
    let stripped = if symbols.stripped {
        " (stripped: .dynsym only)"
    } else {
        ""
    };
    let plural = if found.len() == 1 { "" } else { "s" };
    let note = format!(
        "{} function{plural} in {}{stripped}",
        found.len(),
        file.shown.display()
    );
    Ok((out, note))
}
