//! The processes a recording traces, resolved from the configuration: running processes opened by
//! pid, one command launched and held at its gate, or every process (`-a`).
use super::{
    config::{Config, TargetChoice},
    specs::Specs,
};
use crate::{
    error::{Error, Result},
    launch::{resolve_command, Launch, Program},
    output,
    probes::uprobe::{Plan, Scope},
    target::Process,
};

/// The processes being traced: given by pid, one launched command, or every process (-a).
pub(super) enum Targets {
    Pids(Vec<Process>),
    Launched(Launch),
    SystemWide,
}

impl Targets {
    pub(super) fn processes(&self) -> Vec<&Process> {
        match self {
            Targets::Pids(processes) => processes.iter().collect(),
            Targets::Launched(launch) => vec![&launch.process],
            Targets::SystemWide => Vec::new(),
        }
    }

    /// The process of each probe scope; None for every process.
    pub(super) fn scope_pids(&self) -> Vec<Option<u32>> {
        match self {
            Targets::SystemWide => vec![None],
            _ => self.pids().into_iter().map(Some).collect(),
        }
    }

    /// A target process that has exited, if any: during the attach, the cause of a failure.
    pub(super) fn exited_pid(&self) -> Option<u32> {
        self.processes().iter().find(|p| p.has_exited()).map(|p| p.pid)
    }

    pub(super) fn pids(&self) -> Vec<u32> {
        self.processes().iter().map(|p| p.pid).collect()
    }

    pub(super) fn describe(&self) -> String {
        match self {
            Targets::Launched(l) => {
                format!("`{}` (pid {})", crate::shell::quote_words(&l.argv), l.process.pid)
            }
            Targets::SystemWide => "every process".into(),
            Targets::Pids(_) => {
                let pids: Vec<String> = self.pids().iter().map(u32::to_string).collect();
                format!("pid {}", pids.join(", "))
            }
        }
    }
}

/// What resolving a configuration gives: its targets, the probes planned for them, and the output
/// directory, ready to write into.
pub(super) struct Resolved {
    pub(super) targets: Targets,
    pub(super) plan: Plan,
    pub(super) out: output::Dir,
}

/// `-o` with its placeholders filled in: `{rank}` from the first of `processes` whose environment
/// gives one, else from xtrace's own (a launched command's, or a host's under `-a`).
fn output_path(config: &Config, processes: &[Process]) -> Result<Option<std::path::PathBuf>> {
    let rank = || {
        processes
            .iter()
            .find_map(|p| p.info().rank)
            .or_else(output::placeholders::own_rank)
    };
    config
        .output
        .as_deref()
        .map(|path| output::placeholders::expand(path, rank))
        .transpose()
}

/// Resolves targets and probes; a command is launched (held at its gate) only once everything
/// else has been validated, the output directory included.
/// `sampling`: whether CPU samples are taken (of which a kernel thread has some).
pub(super) fn resolve(config: &Config, specs: &Specs, sampling: bool) -> Result<Resolved> {
    match &config.targets {
        TargetChoice::SystemWide => {
            for &tid in &config.tids {
                if !std::path::Path::new(&format!("/proc/{tid}")).exists() {
                    return Err(Error::NoSuchThread { tid });
                }
                if !sampling && crate::target::is_kernel_thread(tid) {
                    return Err(Error::KernelThreadTid { tid });
                }
            }
            let plan = specs.plan(&[Scope::SystemWide], config.max_probes)?;
            let out = output::prepare(output_path(config, &[])?.as_deref(), config.quiet)?;
            Ok(Resolved {
                targets: Targets::SystemWide,
                plan,
                out,
            })
        }
        TargetChoice::Pids(pids) => {
            let mut pids = pids.clone();
            pids.sort_unstable();
            pids.dedup();
            let processes = pids.into_iter().map(Process::open).collect::<Result<Vec<_>>>()?;
            for tid in &config.tids {
                if !processes.iter().any(|p| p.has_thread(*tid)) {
                    return Err(Error::NotATargetThread { tid: *tid });
                }
            }
            // Before planning: the plan finds the injected library among the mapped files.
            let injected = if config.inject {
                inject(&processes)?
            } else {
                Vec::new()
            };
            let scopes: Vec<Scope> = processes.iter().map(Scope::Process).collect();
            let mut plan = specs.plan(&scopes, config.max_probes)?;
            plan.notices.extend(injected);
            let out = output::prepare(output_path(config, &processes)?.as_deref(), config.quiet)?;
            Ok(Resolved {
                targets: Targets::Pids(processes),
                plan,
                out,
            })
        }
        TargetChoice::Command(argv) => {
            let program = Program::open(&resolve_command(&argv[0])?)?;
            let mut plan = specs.plan(&[Scope::Command(&program)], config.max_probes)?;
            let env = specs.launch_env(&mut plan.notices);
            let out = output::prepare(output_path(config, &[])?.as_deref(), config.quiet)?;
            Ok(Resolved {
                targets: Targets::Launched(Launch::start(program, argv, &env)?),
                plan,
                out,
            })
        }
    }
}

/// `--inject`: loads the tool library into each process; a notice for each.
fn inject(processes: &[Process]) -> Result<Vec<String>> {
    let library = crate::probes::ranges::shipped().ok_or_else(|| {
        Error::from(crate::inject::Error::Unsupported {
            pid: processes.first().map_or(0, |p| p.pid),
            why: "libxtrace_tool.so is not beside the xtrace binary (nor named by XTRACE_TOOL_LIB)".into(),
        })
    })?;
    let mut notices = Vec::new();
    for process in processes {
        notices.push(match crate::inject::inject(process, &library)? {
            crate::inject::Outcome::Loaded { tid, stopped, took } => format!(
                "--inject: loaded libxtrace_tool.so into pid {} (thread {tid} stopped {} us; watcher \
                 running after {} ms)",
                process.pid,
                stopped.as_micros(),
                took.as_millis()
            ),
            crate::inject::Outcome::AlreadyLoaded => format!(
                "--inject: pid {} has xtrace's tool library loaded already; nothing injected",
                process.pid
            ),
        });
    }
    Ok(notices)
}
