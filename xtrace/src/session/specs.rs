//! The probes a recording asks for, from its flags (`-u`, `-U`, `--cuda` and the range flags),
//! and the plan made of them for the resolved targets.
use super::config::Config;
use crate::{
    cuda::{self, planner::CudaMode},
    elf::debug_file::DebugDirs,
    error::Result,
    mpi::plan::MpiMode,
    probes::{
        elf::SymbolCache,
        planner::{Planner, Planning},
        ranges::{self, RangeMode},
        spec::UprobeSpec,
        uprobe::{Functions, Plan, Scope},
        usdt::{plan::UsdtPlanner, spec::UsdtSpec},
        ProbeKind,
    },
};

/// The probes asked for, as each probe family's planning: `-u`, `-U`, `--cuda` and the range
/// flags.
pub(super) struct Specs {
    functions: Functions,
    usdt: UsdtPlanner,
    cuda: CudaMode,
    mpi: MpiMode,
    ranges: RangeMode,
    /// `--debug-dir`, then the default directories.
    debug_dirs: DebugDirs,
}

impl Specs {
    pub(super) fn parse(config: &Config) -> Result<Self> {
        let no_probes = config.uprobes.is_empty() && config.usdt.is_empty();
        let by_pid = !config.pids().is_empty();
        let uprobes: Vec<UprobeSpec> = config
            .uprobes
            .iter()
            .map(|s| UprobeSpec::parse(s))
            .collect::<Result<_>>()?;
        let usdt: Vec<UsdtSpec> = config
            .usdt
            .iter()
            .map(|s| UsdtSpec::parse(s))
            .collect::<Result<_>>()?;
        Ok(Specs {
            debug_dirs: DebugDirs::new(config.debug_dirs.clone()),
            functions: Functions::new(&uprobes, config.entry, config.exits),
            usdt: UsdtPlanner::new(&usdt),
            cuda: match (config.cuda, no_probes) {
                (true, _) => CudaMode::On,
                (false, true) if by_pid => CudaMode::Auto,
                (false, _) => CudaMode::Off,
            },
            mpi: MpiMode(config.mpi),
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

    /// The plan of every probe family in turn, for the resolved targets: functions first (their
    /// probe ids come first), then USDT, CUDA, MPI and ranges.
    pub(super) fn plan(&self, scopes: &[Scope], max_probes: usize) -> Result<Plan> {
        // One read of each file for every probe family.
        let mut elves = SymbolCache::new(self.debug_dirs.clone());
        let mut at = Planning {
            scopes,
            elves: &mut elves,
            max_probes,
        };
        let families: [&dyn Planner; 5] = [&self.functions, &self.usdt, &self.cuda, &self.mpi, &self.ranges];
        let mut plan = Plan::default();
        for family in families {
            family.plan(&mut plan, &mut at)?;
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
