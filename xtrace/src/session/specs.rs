//! The probes a recording asks for, from its flags (`-u`, `-U`, `--cuda` and the range flags),
//! and the plan made of them for the resolved targets.
use super::config::Config;
use crate::{
    cuda,
    elf::debug_file::DebugDirs,
    error::Result,
    probes::{
        elf::SymbolCache,
        entry::EntryMode,
        exits::ExitMode,
        glob,
        ranges::{self, Wanted},
        spec::UprobeSpec,
        uprobe::{self, Plan, Scope},
        usdt::{self, spec::UsdtSpec},
        ProbeKind,
    },
};

/// Whether CUDA calls are traced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CudaMode {
    Off,
    /// `--cuda`: a target without a CUDA library is an error.
    On,
    /// No probe flags with `--pid`: traced when the process maps a CUDA library.
    Auto,
}

/// Whether annotation ranges are recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RangeMode {
    Off,
    /// `--ranges`, `--nvtx`, `--itt`: a process without the tool library is an error.
    On(Wanted),
    /// No probe flags with `--pid`: recorded when the process has loaded the tool library.
    Auto,
}

/// The probes asked for: `-u`, `-U`, `--cuda` and the range flags.
pub(super) struct Specs {
    pub(super) uprobes: Vec<UprobeSpec>,
    pub(super) exits: ExitMode,
    pub(super) entries: EntryMode,
    pub(super) usdt: Vec<UsdtSpec>,
    pub(super) cuda: CudaMode,
    pub(super) ranges: RangeMode,
    /// `--debug-dir`, then the default directories.
    pub(super) debug_dirs: DebugDirs,
}

impl Specs {
    pub(super) fn parse(config: &Config) -> Result<Self> {
        let no_probes = config.uprobes.is_empty() && config.usdt.is_empty();
        let by_pid = !config.pids().is_empty();
        Ok(Specs {
            debug_dirs: DebugDirs::new(config.debug_dirs.clone()),
            exits: config.exits,
            entries: config.entry,
            uprobes: config
                .uprobes
                .iter()
                .map(|s| UprobeSpec::parse(s))
                .collect::<Result<_>>()?,
            usdt: config
                .usdt
                .iter()
                .map(|s| UsdtSpec::parse(s))
                .collect::<Result<_>>()?,
            cuda: match (config.cuda, no_probes) {
                (true, _) => CudaMode::On,
                (false, true) if by_pid => CudaMode::Auto,
                (false, _) => CudaMode::Off,
            },
            ranges: match config.ranges {
                Some(wanted) => RangeMode::On(wanted),
                None if no_probes && by_pid => RangeMode::Auto,
                None => RangeMode::Off,
            },
        })
    }

    /// The environment a launched command gets: the variables that make NVTX and ITT load the tool
    /// library, when ranges are recorded, and CUDA, with `--cuda`, when the user has not set them
    /// (then a notice says so).
    pub(super) fn launch_env(&self, notices: &mut Vec<String>) -> Vec<(&'static str, std::ffi::OsString)> {
        let mut env = Vec::new();
        if self.cuda == CudaMode::On {
            env.extend(cuda::device_plan::launch_env(notices));
        }
        let (RangeMode::On(_), Some(tool)) = (self.ranges, ranges::shipped()) else {
            return env;
        };
        for name in [ranges::NVTX_ENV, ranges::ITT_ENV] {
            match std::env::var_os(name) {
                Some(set) if set != tool.as_os_str() => notices.push(format!(
                    "{name} is already set to {}: the command's ranges of that API go to that tool, \
                     not to xtrace; unset it to record them",
                    set.to_string_lossy()
                )),
                _ => env.push((name, tool.clone().into_os_string())),
            }
        }
        env
    }

    pub(super) fn plan(&self, scopes: &[Scope], max_probes: usize) -> Result<Plan> {
        // One read of each file for every probe family.
        let mut elves = SymbolCache::new(self.debug_dirs.clone());
        let elves = &mut elves;
        // A function or probe matched by several specs takes the first one's value types: exact
        // names go before globs, so `-u 'f*' -u 'f(i32)'` captures f's argument.
        let mut uprobes = self.uprobes.clone();
        uprobes.sort_by_key(|s| glob::is_glob(&s.symbol));
        let mut usdt = self.usdt.clone();
        usdt.sort_by_key(|s| glob::is_glob(&s.provider) || glob::is_glob(&s.name));
        let mut plan = uprobe::plan(&uprobes, (scopes, elves), max_probes, (self.entries, self.exits))?;
        usdt::plan::plan(&mut plan, &usdt, scopes)?;
        if self.cuda != CudaMode::Off {
            // With --cuda, libraries loaded later are watched for (not system-wide: every process
            // that maps a library planned now is traced anyway).
            let system_wide = scopes.iter().any(|s| matches!(s, Scope::SystemWide));
            let watching = self.cuda == CudaMode::On
                && !system_wide
                && cuda::late::plan_watch(&mut plan, scopes, elves)?;
            let found = cuda::plan::plan(&mut plan, (scopes, elves), self.cuda == CudaMode::On && !watching)?;
            cuda::device_plan::plan(&mut plan, scopes, self.cuda == CudaMode::On, found)?;
            if watching && found == 0 {
                plan.notices.push(
                    "--cuda: no CUDA library is loaded yet; xtrace attaches to libcudart/libcuda \
                     when the program loads them (dlopen)"
                        .into(),
                );
            }
        }
        match self.ranges {
            RangeMode::Off => {}
            RangeMode::On(wanted) => {
                ranges::plan(&mut plan, (scopes, elves), wanted, true)?;
                plan.ranges = Some(wanted);
            }
            // Auto means --pid: scopes are processes, planned only where one maps the library.
            RangeMode::Auto => {
                if ranges::plan(&mut plan, (scopes, elves), Wanted::ALL, false)? {
                    plan.ranges = Some(Wanted::ALL);
                }
            }
        }
        qualify_shared_names(&mut plan);
        Ok(plan)
    }
}

/// Functions (and USDT probes and begin/end spans) of one name traced in several files
/// (`-u ./a:f -u ./b:f`) are told apart by their file's name, `f (a)`: under one name their spans
/// would be one probe to the summary's table, `report` and `diff`.
fn qualify_shared_names(plan: &mut Plan) {
    use std::collections::{BTreeMap, BTreeSet};
    let mut files: BTreeMap<(ProbeKind, String), BTreeSet<String>> = BTreeMap::new();
    for p in plan.probes.iter().filter(|p| p.kind.named_by_user()) {
        files
            .entry((p.kind, p.name.clone()))
            .or_default()
            .insert(p.target.clone());
    }
    let file_name = crate::elf::symbolize::module_name;
    for p in plan.probes.iter_mut().filter(|p| p.kind.named_by_user()) {
        let Some(targets) = files.get(&(p.kind, p.name.clone())).filter(|t| t.len() > 1) else {
            continue;
        };
        // Files of one name in two directories are told apart by their paths, made absolute (as
        // typed, `./x/lib.so` and `/w/x/lib.so` would name one file apart in two captures).
        let names: BTreeSet<&str> = targets.iter().map(|t| file_name(t)).collect();
        let which = match names.len() == targets.len() {
            true => file_name(&p.target).to_string(),
            false => std::path::absolute(&p.target)
                .map_or_else(|_| p.target.clone(), |path| path.display().to_string()),
        };
        p.name = format!("{} ({which})", p.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::{ProbeInfo, ProbeKind};

    fn probe(name: &str, kind: ProbeKind, target: &str) -> ProbeInfo {
        ProbeInfo {
            name: name.into(),
            kind,
            target: target.into(),
            offset: 0,
            capture: Default::default(),
        }
    }

    #[test]
    fn functions_of_one_name_in_several_files_are_named_by_file() {
        let mut plan = Plan {
            probes: vec![
                probe("f", ProbeKind::Uprobe, "/opt/a/app"),
                probe("f", ProbeKind::Uprobe, "/opt/b/lib.so"),
                probe("g", ProbeKind::Uprobe, "/opt/a/app"),
                probe("h", ProbeKind::Uprobe, "/x/app"),
                probe("h", ProbeKind::Uprobe, "./y/app"),
                probe("f", ProbeKind::Usdt, "/opt/c/other"),
                probe("p:req", ProbeKind::UsdtSpan, "/x/a"),
                probe("p:req", ProbeKind::UsdtSpan, "/x/b"),
            ],
            ..Plan::default()
        };
        qualify_shared_names(&mut plan);
        let names: Vec<&str> = plan.probes.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "f (app)",
                "f (lib.so)",
                "g",
                "h (/x/app)",
                &format!("h ({})", std::env::current_dir().unwrap().join("y/app").display()),
                "f",
                "p:req (a)",
                "p:req (b)"
            ]
        );
    }
}
