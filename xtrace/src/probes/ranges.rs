//! Planning annotation ranges (`--ranges`, `--nvtx`, `--itt`): the USDT probes of xtrace's tool
//! library, `libxtrace_tool.so`, which NVTX3 loads through `NVTX_INJECTION64_PATH`, ITT through
//! `INTEL_LIBITTNOTIFY64`, and programs link for `xtrace_range_*`. With `--pid` the library is
//! found among the process's mappings under any path; a launched command (which loads it later,
//! at its first range) and `-a` use the one shipped next to the xtrace binary.
use std::path::PathBuf;

use super::{
    elf::SymbolCache,
    nvtx,
    spec::TargetSpec,
    uprobe::{Plan, Scope},
    usdt::{
        self,
        spec::{RangeOp, UsdtArgType, UsdtSpec},
    },
};
use xtrace_common::ranges::PROBES;

use crate::error::{Error, Result};

/// Which sources a recording keeps (`--ranges`, `--nvtx`, `--itt`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wanted {
    pub xtrace: bool,
    pub nvtx: bool,
    pub itt: bool,
}

impl Wanted {
    pub const ALL: Wanted = Wanted {
        xtrace: true,
        nvtx: true,
        itt: true,
    };
}

/// Whether annotation ranges are recorded: the ranges family's planning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeMode {
    Off,
    /// `--ranges`, `--nvtx`, `--itt`: a process without the tool library is an error.
    On(Wanted),
    /// No probe flags with `--pid`: recorded when the process has loaded the tool library.
    Auto,
}

impl super::planner::Planner for RangeMode {
    fn plan(&self, plan: &mut Plan, at: &mut super::planner::Planning<'_>) -> Result<()> {
        let scopes = (at.scopes, &mut *at.elves);
        match *self {
            RangeMode::Off => {}
            RangeMode::On(wanted) => {
                self::plan(plan, scopes, wanted, true)?;
                plan.ranges = Some(wanted);
            }
            // Auto means --pid: scopes are processes, planned only where one maps the library.
            RangeMode::Auto => {
                if self::plan(plan, scopes, Wanted::ALL, false)? {
                    plan.ranges = Some(Wanted::ALL);
                }
            }
        }
        Ok(())
    }
}

/// The tool library's file name; a mapped file whose name starts with `libxtrace_tool` is one.
pub const TOOL_LIBRARY: &str = "libxtrace_tool.so";

/// Overrides where the shipped tool library is looked for.
pub const TOOL_ENV: &str = "XTRACE_TOOL_LIB";

/// The environment variables that make NVTX3 and ITT load the tool library.
pub const NVTX_ENV: &str = "NVTX_INJECTION64_PATH";
pub const ITT_ENV: &str = "INTEL_LIBITTNOTIFY64";

/// The shipped tool library: `$XTRACE_TOOL_LIB` (when set and not empty), else
/// `libxtrace_tool.so` next to the xtrace binary; None when that is not a file.
pub fn shipped() -> Option<PathBuf> {
    if let Some(path) = tool_env() {
        let path = PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.join(TOOL_LIBRARY);
    path.is_file().then_some(path)
}

/// `$XTRACE_TOOL_LIB`, when set and not empty.
fn tool_env() -> Option<std::ffi::OsString> {
    std::env::var_os(TOOL_ENV).filter(|p| !p.is_empty())
}

/// What a hit of the tool library's probe `name` (`xtrace_common::ranges::PROBES`) does.
fn op(name: &str) -> Option<RangeOp> {
    Some(match name {
        "range_push" => RangeOp::Push,
        "range_pop" => RangeOp::Closed,
        "range_start" => RangeOp::Start,
        "range_end" => RangeOp::End,
        "mark" => RangeOp::Mark,
        "thread_name" => RangeOp::ThreadName,
        _ => return None,
    })
}

/// Whether `path` is a tool library (by its file name, wherever it was installed).
pub fn is_tool(path: &std::path::Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        // `memfd:libxtrace_tool.so`: loaded by `--inject`.
        .is_some_and(|n| n.trim_start_matches("memfd:").starts_with("libxtrace_tool"))
}

/// Adds the tool library's probes to `plan`. `required`: a scope without a tool library is an
/// error (an explicit flag), else it is passed over. Returns whether any probe was added.
///
/// With NVTX wanted, a process that maps libnvToolsExt and does not send its NVTX calls to the
/// tool library gets probes on libnvToolsExt's functions (`probes::nvtx`) as well.
pub fn plan(
    plan: &mut Plan,
    (scopes, elves): (&[Scope], &mut SymbolCache),
    wanted: Wanted,
    required: bool,
) -> Result<bool> {
    let mut files: Vec<PathBuf> = Vec::new();
    let mut v2_found = 0;
    for (index, scope) in scopes.iter().enumerate() {
        // The tool libraries a process maps (and its libnvToolsExt), else the shipped one.
        let (found, v2): (Vec<PathBuf>, usize) = match scope {
            Scope::Process(p) => {
                let mapped = p.mapped_files()?;
                let v2 = if wanted.nvtx {
                    nvtx::plan(plan, elves, p, &mapped, index)?
                } else {
                    0
                };
                let tools = mapped.into_iter().filter(|f| is_tool(&f.shown)).map(|f| f.shown);
                (tools.collect(), v2)
            }
            Scope::Command(_) | Scope::SystemWide => (shipped().into_iter().collect(), 0),
        };
        v2_found += v2;
        if found.is_empty() && v2 == 0 && required {
            return Err(missing(scope, wanted));
        }
        if let Scope::Process(p) = scope {
            if found.is_empty() && v2 > 0 && required && (wanted.itt || wanted.xtrace) {
                plan.notices.push(format!(
                    "pid {} has not loaded {TOOL_LIBRARY}: only its NVTX calls into libnvToolsExt \
                     are traced, not ITT or xtrace_range_*",
                    p.pid
                ));
            }
        }
        for file in found {
            if !files.contains(&file) {
                files.push(file);
            }
        }
    }
    let specs: Vec<UsdtSpec> = files
        .iter()
        .flat_map(|file| {
            PROBES.iter().filter(|p| p.attached).filter_map(move |probe| {
                let name = probe.name;
                Some(UsdtSpec {
                    text: format!("{}:xtrace:{name}", file.display()),
                    target: Some(TargetSpec::Path(file.clone())),
                    provider: "xtrace".into(),
                    name: name.into(),
                    types: probe
                        .strings
                        .iter()
                        .map(|&s| if s { UsdtArgType::Kept } else { UsdtArgType::Note })
                        .collect(),
                    range: Some(op(name)?),
                    pair: None,
                })
            })
        })
        .collect();
    if specs.is_empty() {
        return Ok(v2_found > 0);
    }
    usdt::plan::plan(plan, &specs, scopes)?;
    Ok(true)
}

/// The error for a scope without a tool library.
fn missing(scope: &Scope, wanted: Wanted) -> Error {
    let flag = match (wanted.nvtx, wanted.itt, wanted.xtrace) {
        (true, false, false) => "--nvtx",
        (false, true, false) => "--itt",
        _ => "--ranges",
    };
    match scope {
        Scope::Process(p) => Error::Usage(format!(
            "{flag}: pid {} has not loaded {TOOL_LIBRARY}{}, so its ranges cannot be seen; start it with \
             {NVTX_ENV} and {ITT_ENV} set to that library (see docs/guide.md, NVTX and ITT ranges), or launch it \
             with `xtrace {flag} -- COMMAND`",
            p.pid,
            if wanted.nvtx { " nor libnvToolsExt" } else { "" }
        )),
        _ => match tool_env() {
            Some(set) => Error::Usage(format!(
                "{flag}: {TOOL_ENV}={} is not a file; set it to the path of {TOOL_LIBRARY}, or unset it",
                set.to_string_lossy()
            )),
            None => Error::Usage(format!(
                "{flag}: {TOOL_LIBRARY} is not next to the xtrace binary; build it with `cargo build \
                 -p xtrace-tool` or set {TOOL_ENV} to its path"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    /// xtrace knows what a hit of each of the tool library's probes does.
    #[test]
    fn every_tool_probe_has_an_op() {
        for probe in xtrace_common::ranges::PROBES.iter().filter(|p| p.attached) {
            assert!(super::op(probe.name).is_some(), "{}", probe.name);
        }
    }
}
