//! The first phase: everything that can be checked before the kernel is touched. Privileges, the
//! probe specs, the sampling rate, the targets (a command is launched and held at its gate last),
//! the probe plan and the output directory. Nothing is attached yet; dropping a [`Prepared`] lets
//! a held command go and leaves an unused output directory as it was.
use super::{
    config::{Config, StartAt},
    finish::Sampling,
    run::Signals,
    specs::Specs,
    targets::{self, Resolved},
    Observer,
};
use crate::{
    bpf::{layout::Offsets, loader::Wanted},
    error::{Error, Result},
    pidns::PidNamespace,
    privilege,
    probes::{follow, offcpu, sampler},
};

/// A recording ready to start.
pub(super) struct Prepared<'a> {
    pub(super) config: &'a Config,
    /// xtrace's own PID namespace, when it is not the host's.
    pub(super) pid_namespace: Option<PidNamespace>,
    /// Caught from here on, so that a signal while attaching stops cleanly.
    pub(super) signals: Signals,
    pub(super) resolved: Resolved,
    /// How the CPU is sampled, when it is.
    pub(super) sampling: Option<Sampling>,
    /// Where the kernel's task fields lie, when the processes the sampled ones start are
    /// followed.
    pub(super) follow: Option<Offsets>,
    /// `--start-at`, as a CLOCK_REALTIME time in ns.
    pub(super) start_at_ns: Option<u64>,
    /// `--live`: the server, listening already (a port in use is refused before attaching).
    pub(super) live: Option<crate::live::Live>,
    /// Off-CPU time's MIN in ns, when it is measured: `--off-cpu`, or on by itself.
    pub(super) off_cpu_ns: Option<u64>,
    /// aya's loader and the kernel's BTF, parsed while the probes are planned; taken by the
    /// load.
    pub(super) parsing: Option<crate::bpf::loader::Parsing>,
}

impl<'a> Prepared<'a> {
    /// Checks `config` against the system and resolves it; warnings go to `observer`.
    pub(super) fn new(config: &'a Config, observer: &mut dyn Observer) -> Result<Self> {
        let calls = !config.uprobes.is_empty() || !config.usdt.is_empty() || config.cuda || config.mpi;
        if config.stacks && !calls {
            return Err(Error::StacksWithoutCalls);
        }
        // First: privilege::check reads /proc/self, which a /proc of another namespace may not have.
        let pid_namespace = crate::pidns::own()?;
        // Before the capabilities: no capability helps a kernel without BPF.
        crate::bpf::features::require_bpf_syscall()?;
        privilege::check()?;
        crate::probes::attach::forced_mechanism()?;
        let hz = sampling_rate(config)?;
        // Everything below the privileges ends in a load: the kernel's BTF is parsed meanwhile.
        let off_cpu = off_cpu_asked(config).is_some();
        let parsing = Some(crate::bpf::loader::Parsing::start(Wanted {
            typed_programs: off_cpu,
            kernel_btf: off_cpu || hz.is_some(),
        }));
        let signals = Signals::install(config.flight.is_some())?;
        let start_at_ns = config.start_at.map(window_start).transpose()?;
        let specs = Specs::parse(config)?;
        let mut resolved = targets::resolve(config, &specs, hz.is_some())?;
        resolved.plan.stacks = config.stacks;
        if pid_namespace.is_some() {
            // The kernel programs find ids in xtrace's namespace only (`bpf_get_ns_current_pid_tgid`
            // matches a thread's own namespace): a process in a nested one would record nothing.
            for process in resolved.targets.processes() {
                if let Some(ns_pid) = process.info().ns_pid {
                    return Err(Error::NestedNamespaceTarget {
                        pid: process.pid,
                        ns_pid,
                    });
                }
            }
        }
        for notice in &resolved.plan.notices {
            observer.warning(notice);
        }
        // Sampling limited to target processes follows the processes they start, unless told not to.
        let follow = match hz {
            Some(_) if config.inherit && !resolved.targets.pids().is_empty() => {
                Some(follow::offsets(pid_namespace.is_some())?)
            }
            _ => None,
        };
        if follow.as_ref().is_some_and(|f| !f.exit_group_dead) {
            observer.warning(
                "this kernel's sched_process_exit tracepoint passes no group_dead: a followed child \
                 process's pid stays sampled after it exits (a new process given that pid is sampled \
                 too); --no-inherit samples the targets only",
            );
        }
        let sampling = hz.map(|hz| Sampling {
            hz,
            followed: follow.as_ref().map(|_| (0, 0)),
        });
        if let Some(why) = sampling.and_then(|_| sampler::kernel_names_hidden()) {
            observer.warning(&why);
        }
        let off_cpu_ns = off_cpu_min(config, observer);
        let live = match &config.live {
            Some(given) => {
                let (live, told) = crate::live::Live::start(given)?;
                for line in &told.notices {
                    observer.live_view(line);
                }
                if let Some(warning) = &told.warning {
                    observer.warning(warning);
                }
                Some(live)
            }
            None => None,
        };
        Ok(Prepared {
            config,
            pid_namespace,
            signals,
            resolved,
            sampling,
            follow,
            start_at_ns,
            live,
            off_cpu_ns,
            parsing,
        })
    }
}

impl Prepared<'_> {
    /// The parses started by [`Prepared::new`], for the load to join (once).
    pub(super) fn take_parsing(&mut self) -> crate::bpf::loader::Parsing {
        self.parsing
            .take()
            .unwrap_or(crate::bpf::loader::Parsing::later(Wanted {
                typed_programs: self.off_cpu_ns.is_some(),
                kernel_btf: false,
            }))
    }
}

/// Off-CPU time's MIN in ns as asked for: `--off-cpu`'s, or 1 ms when it is on by itself.
fn off_cpu_asked(config: &Config) -> Option<u64> {
    match config.off_cpu_by_default() {
        true => Some(offcpu::DEFAULT_MIN_NS),
        false => config.off_cpu_ns,
    }
}

/// Off-CPU time's MIN in ns when it is measured: `--off-cpu`'s, or 1 ms when it is on by itself
/// (`--pid` without probes). A kernel that cannot measure it costs a notice, and the capture goes
/// on without it.
fn off_cpu_min(config: &Config, observer: &mut dyn Observer) -> Option<u64> {
    let min_ns = off_cpu_asked(config);
    match min_ns.and_then(|_| offcpu::unavailable()) {
        Some(why) => {
            observer.warning(&format!(
                "off-CPU time is not measured: {why} (it needs the scheduler's BTF-typed \
                 tracepoints)"
            ));
            None
        }
        None => min_ns,
    }
}

/// The wall-clock time (CLOCK_REALTIME, ns) `--start-at` names: the next multiple of a period
/// after now, or a time, refused when it has passed.
fn window_start(start_at: StartAt) -> Result<u64> {
    let now = crate::clock::snapshot().realtime_ns;
    match start_at {
        StartAt::Every { period_ns } => Ok((now / period_ns + 1) * period_ns),
        StartAt::At { realtime_ns } if realtime_ns > now => Ok(realtime_ns),
        StartAt::At { realtime_ns } => Err(Error::StartAtPassed {
            at: format!("@{:.3}", realtime_ns as f64 / 1e9),
            ago: crate::model::duration::human(now - realtime_ns),
        }),
    }
}

/// The CPU sampling rate, checked against the kernel's limit and the ring buffer's size: `-F`, or
/// 99 Hz when no probe of any kind is asked for (xtrace then profiles the CPU).
fn sampling_rate(config: &Config) -> Result<Option<u64>> {
    let hz = match config.freq {
        Some(hz) => Some(hz),
        None if config.asks_no_probe() => Some(sampler::DEFAULT_HZ),
        None => None,
    };
    if let Some(hz) = hz {
        sampler::check_rate(hz)?;
        sampler::check_ring(config.buffer_size, config.user_stack)?;
    }
    Ok(hz)
}
