//! Attaching a plan: the span programs (`span_enter` uprobe and `span_exit` uretprobe, cookie =
//! probe id; or `span_ret` uprobes on the function's exit instructions, cookie = `exit_cookie`) at
//! every function, and `usdt_hit` at every USDT call site (cookie = site index, with the
//! site's semaphore as the uprobe's reference counter), scoped to the traced processes. uprobe_multi
//! links where the kernel has them (6.6+), perf-event uprobes otherwise. Linux 5.15+.
use std::os::fd::OwnedFd;

use aya::{programs::UProbe, Ebpf};

use super::{
    attach_multi::{attach_multi, group_error, link_group},
    attach_perf::{attach_functions_perf_event, attach_perf_event, load},
    teardown::Teardown,
    uprobe::{Attachment, Plan},
    usdt::{plan::Role, spec::RangeOp},
};
use xtrace_common::event::{exit_cookie, ENTRY_EXITS_PROBED, ENTRY_GO, ENTRY_GO_STACK_CHECK, EXIT_GO};

use crate::{
    bpf::{
        self,
        perf_uprobe::PerfUprobe,
        uprobe_multi::{self, MultiLink, MultiProgram},
        uprobe_program::UprobeProgram,
    },
    error::{Error, Result},
    target::TargetFile,
};

pub(super) fn program(ebpf: &mut Ebpf, program: UprobeProgram) -> Result<&mut UProbe> {
    bpf::program_mut(ebpf, program.name())
}

/// How the probes were attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    /// One uprobe_multi link per file, process and program (Linux 6.6+): detaching costs one
    /// grace period per link.
    UprobeMulti,
    /// One perf-event uprobe per offset, process and program (older kernels, or
    /// `XTRACE_UPROBE_ATTACH=perf_event`): detaching costs a grace period per uprobe.
    PerfEvent,
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::UprobeMulti => "uprobe_multi",
            Mechanism::PerfEvent => "perf_event",
        }
    }
}

/// The environment variable that forces perf-event uprobes (for kernels whose uprobe_multi
/// misbehaves, and for testing that path).
pub const ATTACH_ENV: &str = "XTRACE_UPROBE_ATTACH";

/// Attached probes. Dropping it detaches entry probes before return probes, so calls in flight
/// still complete their spans and no entry is pushed without a return probe to pop it, and the
/// return probes all at once (see [`super::detach`]).
#[derive(Debug)]
pub struct Attached {
    pub mechanism: Mechanism,
    /// Kernel uprobes placed (entry, return and USDT).
    pub uprobes: usize,
    /// uprobe_multi links, with the plan scope each is for.
    enter: Vec<(usize, MultiLink)>,
    exit: Vec<(usize, MultiLink)>,
    /// Perf-event uprobes: at USDT sites (`usdt_hit`), at entries (`span_enter`,
    /// `span_enter_s`), and those that end spans (`span_exit`, `span_ret`).
    pub(super) perf_usdt: Vec<PerfUprobe>,
    pub(super) perf_enter: Vec<PerfUprobe>,
    pub(super) perf_exit: Vec<PerfUprobe>,
    pub(super) programs: Vec<MultiProgram>,
}

impl Attached {
    /// (name, file descriptor) of each program loaded for uprobe_multi links.
    pub fn program_fds(&self) -> Vec<(&str, std::os::fd::BorrowedFd<'_>)> {
        self.programs
            .iter()
            .map(|p| (p.program().name(), p.fd()))
            .collect()
    }

    pub(super) fn new(mechanism: Mechanism) -> Self {
        Attached {
            mechanism,
            uprobes: 0,
            enter: Vec::new(),
            exit: Vec::new(),
            perf_usdt: Vec::new(),
            perf_enter: Vec::new(),
            perf_exit: Vec::new(),
            programs: Vec::new(),
        }
    }

    /// Keeps a uprobe_multi link of `uprobes` probes for plan scope `scope`: with the exit probes
    /// when `exit`.
    pub(super) fn keep(&mut self, scope: usize, link: MultiLink, exit: bool, uprobes: usize) {
        self.uprobes += uprobes;
        if exit {
            self.exit.push((scope, link));
        } else {
            self.enter.push((scope, link));
        }
    }

    /// The links and perf events, taken out to be closed: those at entries and USDT sites, then
    /// those that end spans.
    pub(super) fn take_links(&mut self) -> (Vec<Closing>, Vec<Closing>) {
        let multi = |links: &mut Vec<(usize, MultiLink)>| {
            std::mem::take(links)
                .into_iter()
                .map(|(_, l)| Box::new(l) as Closing)
        };
        let perf =
            |probes: &mut Vec<PerfUprobe>| std::mem::take(probes).into_iter().map(|p| Box::new(p) as Closing);
        let entries = multi(&mut self.enter)
            .chain(perf(&mut self.perf_usdt))
            .chain(perf(&mut self.perf_enter))
            .collect();
        let exits = multi(&mut self.exit).chain(perf(&mut self.perf_exit)).collect();
        (entries, exits)
    }

    /// The uprobe_multi links of plan scope `scope`, taken out (see [`reattach`]).
    pub fn take_scope(&mut self, scope: usize) -> Attached {
        let mut taken = Attached::new(self.mechanism);
        for (from, to) in [
            (&mut self.enter, &mut taken.enter),
            (&mut self.exit, &mut taken.exit),
        ] {
            let (theirs, kept) = std::mem::take(from).into_iter().partition(|(s, _)| *s == scope);
            *to = theirs;
            *from = kept;
        }
        taken
    }

    /// Closes the uprobe_multi links (they go at once), and returns the perf-event uprobes, to be
    /// removed later: that takes long, one after another (see [`super::teardown`]). Their
    /// programs should have been stopped first ([`bpf::stop_programs`]; `programs_stopped`): a
    /// stopped program returns 0, which feeds its event nothing, so the events are left as they
    /// are. Otherwise each event is disabled (a system call per uprobe, 140 ms for 2,000 on 6.1
    /// under software emulation), so that at least it counts no more hits.
    pub fn stop(mut self, programs_stopped: bool) -> Teardown {
        // Each event before its link: closing the link then removes the uprobe.
        let split = |all: &mut Vec<PerfUprobe>| -> Vec<OwnedFd> {
            std::mem::take(all)
                .into_iter()
                .flat_map(|probe| <[OwnedFd; 2]>::from(probe.into_fds(!programs_stopped)))
                .collect()
        };
        // USDT sites first: removing their uprobes lowers the semaphores of the sites.
        let mut entries = split(&mut self.perf_usdt);
        entries.extend(split(&mut self.perf_enter));
        let exits = split(&mut self.perf_exit);
        super::detach::close(&mut self);
        self.programs.clear();
        Teardown::new(entries, exits)
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        super::detach::close(self);
    }
}

/// A link or perf event on its way to be closed.
pub(super) type Closing = Box<dyn Send>;

/// One link's worth of probes: a scope's file, with offsets, cookies and reference counters.
pub(super) struct Group<'a> {
    pub(super) scope: usize,
    pub(super) file: &'a TargetFile,
    pub(super) offsets: Vec<u64>,
    pub(super) cookies: Vec<u64>,
    pub(super) ref_ctr_offsets: Vec<u64>,
}

/// Groups (scope, file, offset, cookie, reference counter) per (scope, file), in first-seen order.
pub(super) fn group<'a>(
    items: impl Iterator<Item = (usize, &'a TargetFile, u64, u64, u64)>,
) -> Vec<Group<'a>> {
    let mut groups: Vec<Group> = Vec::new();
    for (scope, file, offset, cookie, ref_ctr) in items {
        let index = match groups
            .iter()
            .position(|g| g.scope == scope && g.file.open == file.open)
        {
            Some(index) => index,
            None => {
                groups.push(Group {
                    scope,
                    file,
                    offsets: Vec::new(),
                    cookies: Vec::new(),
                    ref_ctr_offsets: Vec::new(),
                });
                groups.len() - 1
            }
        };
        groups[index].offsets.push(offset);
        groups[index].cookies.push(cookie);
        groups[index].ref_ctr_offsets.push(ref_ctr);
    }
    groups
}

/// The entry program of attachment `a`: the sleepable one for a probe that reads a string
/// argument where the kernel takes sleepable uprobes (its reads can fault pages in).
fn entry_program(plan: &Plan, a: &Attachment) -> UprobeProgram {
    match plan.reads_strings(a.probe_id) && bpf::features::sleepable_entries() {
        true => UprobeProgram::SpanEnterSleepable,
        false => UprobeProgram::SpanEnter,
    }
}

/// The groups span program `program` attaches to: the entries it takes (see
/// [`entry_program`]), the callers of every call (`--stacks`), the returns of functions with
/// return probes, or the exit instructions of the others.
pub(super) fn function_groups<'a>(
    program: UprobeProgram,
    plan: &Plan,
    attachments: &'a [Attachment],
) -> Vec<Group<'a>> {
    let entries = attachments.iter().filter(|a| entry_program(plan, a) == program);
    match program {
        UprobeProgram::SpanEnter | UprobeProgram::SpanEnterSleepable => group(entries.map(|a| {
            let exits_probed = if a.exits.is_some() { ENTRY_EXITS_PROBED } else { 0 };
            let stack_check = if a.go_stack_check { ENTRY_GO_STACK_CHECK } else { 0 };
            // A Go function's return probe (`--exits uretprobe`) finds its call per thread.
            let go = if a.go && a.exits.is_some() { ENTRY_GO } else { 0 };
            (
                a.scope,
                &a.file,
                a.offset,
                u64::from(a.probe_id) | exits_probed | stack_check | go,
                0,
            )
        })),
        // `--stacks`: every entry but `dlopen`'s (watched for CUDA libraries loaded later).
        UprobeProgram::CallStack => group(
            attachments
                .iter()
                .filter(|a| {
                    !plan
                        .watch
                        .as_ref()
                        .is_some_and(|w| w.loaders.contains(&a.probe_id))
                })
                .map(|a| (a.scope, &a.file, a.offset, u64::from(a.probe_id), 0)),
        ),
        UprobeProgram::SpanExit => group(
            attachments
                .iter()
                .filter(|a| a.exits.is_none())
                .map(|a| (a.scope, &a.file, a.offset, u64::from(a.probe_id), 0)),
        ),
        UprobeProgram::SpanRet => group(attachments.iter().flat_map(|a| {
            a.exits.iter().flatten().map(|site| {
                let cookie = exit_cookie(a.probe_id, site.how) | if a.go { EXIT_GO } else { 0 };
                (a.scope, &a.file, site.offset, cookie, 0)
            })
        })),
        // USDT sites are no functions' ([`usdt_groups`]); the bench's floor programs are not
        // in plans.
        UprobeProgram::UsdtHit
        | UprobeProgram::UsdtStack
        | UprobeProgram::GpuRecords
        | UprobeProgram::Noop
        | UprobeProgram::NoopRet
        | UprobeProgram::Clock
        | UprobeProgram::ClockRet => Vec::new(),
    }
}

/// The span programs `attachments` need, exit probes first so that no entry is left without its
/// exit; with `--stacks`, `call_stack` before the entry programs: the kernel runs a uprobe's
/// consumers newest first, so it runs after the entry program has opened the call.
pub(super) fn span_programs(plan: &Plan, attachments: &[Attachment]) -> Vec<UprobeProgram> {
    let mut names = Vec::new();
    if attachments.iter().any(|a| a.exits.is_none()) {
        names.push(UprobeProgram::SpanExit);
    }
    if attachments
        .iter()
        .any(|a| a.exits.as_ref().is_some_and(|e| !e.is_empty()))
    {
        names.push(UprobeProgram::SpanRet);
    }
    if plan.stacks && !attachments.is_empty() {
        names.push(UprobeProgram::CallStack);
    }
    for entry in [UprobeProgram::SpanEnter, UprobeProgram::SpanEnterSleepable] {
        if attachments.iter().any(|a| entry_program(plan, a) == entry) {
            names.push(entry);
        }
    }
    names
}

/// Whether USDT site `site` of `plan` is the tool library's probe `op` (`gpu_records`, which the
/// kernel program of that name reads instead of `usdt_hit`, or `gpu_drain`, attached only at the
/// stop: [`super::attach_drain`]).
pub(super) fn is_gpu_site(plan: &Plan, site: &super::usdt::plan::SiteAttachment, op: RangeOp) -> bool {
    plan.usdt_probes
        .get(&site.site.probe_id)
        .is_some_and(|p| p.role == Role::Range(op))
}

/// Whether USDT site `site` of `plan` is one of the tool library's GPU sites, which `usdt_hit`
/// never takes.
fn is_any_gpu_site(plan: &Plan, site: &super::usdt::plan::SiteAttachment) -> bool {
    is_gpu_site(plan, site, RangeOp::GpuRecords) || is_gpu_site(plan, site, RangeOp::GpuDrain)
}

/// Whether USDT site `site` of `plan` takes `usdt_stack` (`--stacks`): a site of an instant
/// probe or of a pair's begin probe (a span's stack is its begin's).
fn takes_stack(plan: &Plan, site: &super::usdt::plan::SiteAttachment) -> bool {
    plan.stacks
        && plan
            .usdt_probes
            .get(&site.site.probe_id)
            .is_some_and(|p| matches!(p.role, Role::Instant | Role::Begin { .. }))
}

/// The USDT sites of USDT program `program` (`usdt_hit`, `usdt_stack` or `gpu_records`), each
/// with its index in the plan's sites as cookie.
pub(super) fn usdt_groups(plan: &Plan, program: UprobeProgram) -> Vec<Group<'_>> {
    group(
        plan.usdt_sites
            .iter()
            .enumerate()
            .filter(|(_, s)| match program {
                UprobeProgram::GpuRecords => is_gpu_site(plan, s, RangeOp::GpuRecords),
                UprobeProgram::UsdtStack => takes_stack(plan, s),
                _ => !is_any_gpu_site(plan, s),
            })
            .map(|(i, s)| (s.scope, &s.file, s.offset, i as u64, s.ref_ctr_offset)),
    )
}

/// The groups `program` (a span program, or one of USDT sites) attaches to in `plan`.
pub(super) fn program_groups(program: UprobeProgram, plan: &Plan) -> Vec<Group<'_>> {
    match program {
        usdt if usdt.is_usdt() => usdt_groups(plan, usdt),
        span => function_groups(span, plan, &plan.attachments),
    }
}

/// The programs a plan needs, exit probes first so that no entry is left without its exit; with
/// `--stacks`, `usdt_stack` after `usdt_hit`: the kernel runs a uprobe's consumers newest first,
/// so it runs before the hit is sent.
pub(super) fn programs_for(plan: &Plan) -> Vec<UprobeProgram> {
    let mut names = span_programs(plan, &plan.attachments);
    if plan.usdt_sites.iter().any(|s| !is_any_gpu_site(plan, s)) {
        names.push(UprobeProgram::UsdtHit);
    }
    if plan.usdt_sites.iter().any(|s| takes_stack(plan, s)) {
        names.push(UprobeProgram::UsdtStack);
    }
    if plan
        .usdt_sites
        .iter()
        .any(|s| is_gpu_site(plan, s, RangeOp::GpuRecords))
    {
        names.push(UprobeProgram::GpuRecords);
    }
    // Functions attached later (`--cuda` watching for libraries loaded later) may need any span
    // program: each is loaded now, while the object still holds every map the programs use.
    if plan.watch.is_some() {
        let sleepable = bpf::features::sleepable_entries().then_some(UprobeProgram::SpanEnterSleepable);
        let stacks = plan.stacks.then_some(UprobeProgram::CallStack);
        for name in [UprobeProgram::SpanExit, UprobeProgram::SpanRet]
            .into_iter()
            .chain(stacks)
            .chain([UprobeProgram::SpanEnter])
            .chain(sleepable)
        {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

pub(super) fn whom(pid: Option<u32>) -> String {
    pid.map_or("every process".into(), |pid| format!("pid {pid}"))
}

/// What xtrace's own check of each instruction (probes::insn) did not foresee, said plainly.
pub(super) fn explained(e: std::io::Error) -> std::io::Error {
    match e.raw_os_error() {
        Some(ENOTSUPP) => std::io::Error::other(
            "the kernel cannot probe the instruction at one of them (error 524, ENOTSUPP)",
        ),
        _ => e,
    }
}

/// The kernel's internal "operation not supported" (524), which reaches user space unchanged.
pub(super) const ENOTSUPP: i32 = 524;

/// Attaches again, for process `pid`, every probe of the plan's scope `scope` (function probes and
/// USDT sites), after a thread other than the process's first ran exec: the kernel ties a link's
/// process to the task that was its first thread, which that exec ended, so the old links no
/// longer place their probes in it; but where the new ones do, the old ones fire too (the task
/// they hold is still of the process), so they must be closed first ([`Attached::take_scope`]).
/// Returns the uprobes placed.
/// uprobe_multi only: a perf-event uprobe's process is its first thread's too, and aya keeps
/// those links in the programs, which it cannot attach twice to one offset.
pub fn reattach(attached: &mut Attached, plan: &Plan, scope: usize, pid: u32) -> Result<usize> {
    if attached.mechanism != Mechanism::UprobeMulti {
        return Err(Error::io(
            format!("attaching the probes of pid {pid} again"),
            std::io::Error::other("only uprobe_multi links (Linux 6.6+) can be attached again"),
        ));
    }
    // Kept only once all are made: a refused group drops the others, detaching them.
    let mut links = Attached::new(Mechanism::UprobeMulti);
    for program in &attached.programs {
        let name = program.program();
        for g in program_groups(name, plan)
            .into_iter()
            .filter(|g| g.scope == scope)
        {
            let link = link_group(program, &g, Some(pid)).map_err(|e| group_error(name, &g, Some(pid), e))?;
            links.keep(g.scope, link, name.ends_calls(), g.offsets.len());
        }
    }
    attached.enter.append(&mut links.enter);
    attached.exit.append(&mut links.exit);
    Ok(links.uprobes)
}

/// Attaches span probes planned after recording started (libraries a target loaded later) with
/// the mechanism of the first attachment, loading the span programs if nothing used them yet.
/// The new probes' ids must already have their slots in the kernel maps.
pub fn attach_more(
    ebpf: &mut Ebpf,
    attached: &mut Attached,
    plan: &Plan,
    attachments: &[Attachment],
    pids: &[Option<u32>],
) -> Result<()> {
    let names = span_programs(plan, attachments);
    match attached.mechanism {
        Mechanism::UprobeMulti => {
            for &name in &names {
                if !attached.programs.iter().any(|p| p.program() == name) {
                    attached.programs.extend(uprobe_multi::load(ebpf, &[name])?);
                }
            }
            // Kept only once all are made: a refused group drops the others, detaching them.
            let mut links = Attached::new(Mechanism::UprobeMulti);
            for &name in &names {
                let Some(program) = attached.programs.iter().find(|p| p.program() == name) else {
                    continue;
                };
                for g in function_groups(name, plan, attachments) {
                    let pid = pids[g.scope];
                    let link = link_group(program, &g, pid).map_err(|e| group_error(name, &g, pid, e))?;
                    links.keep(g.scope, link, name.ends_calls(), g.offsets.len());
                }
            }
            attached.uprobes += links.uprobes;
            attached.enter.append(&mut links.enter);
            attached.exit.append(&mut links.exit);
        }
        Mechanism::PerfEvent => {
            for name in names {
                if program(ebpf, name)?.fd().is_err() {
                    load(ebpf, name)?;
                }
                attach_functions_perf_event(ebpf, attached, name, plan, attachments, pids)?;
            }
        }
    }
    Ok(())
}

/// The mechanism `XTRACE_UPROBE_ATTACH` asks for: None to choose by the kernel. Checked when a
/// recording starts, before anything is created, and again when attaching; uprobe_multi on a
/// kernel that has none is refused.
pub fn forced_mechanism() -> Result<Option<Mechanism>> {
    match std::env::var(ATTACH_ENV).ok().as_deref() {
        None | Some("") => Ok(None),
        Some("perf_event") => Ok(Some(Mechanism::PerfEvent)),
        Some("uprobe_multi") if kernel_refuses_multi() => Err(no_uprobe_multi()),
        Some("uprobe_multi") => Ok(Some(Mechanism::UprobeMulti)),
        Some(other) => Err(Error::BadEnvironment {
            name: ATTACH_ENV,
            value: other.to_string(),
            expected: "uprobe_multi or perf_event",
        }),
    }
}

/// Whether the kernel answers that it has no uprobe_multi links (see
/// [`bpf::features::uprobe_multi`]); false when it could not be asked, and attaching finds out.
fn kernel_refuses_multi() -> bool {
    matches!(bpf::features::uprobe_multi(), bpf::features::Answer::No(_))
}

/// `XTRACE_UPROBE_ATTACH=uprobe_multi` on a kernel without uprobe_multi links.
fn no_uprobe_multi() -> Error {
    Error::KernelLacks {
        what: format!("{ATTACH_ENV}=uprobe_multi"),
        release: crate::procfs::kernel_setting("osrelease").unwrap_or_default(),
        feature: "uprobe_multi links",
        since: "6.6",
        remedy: "unset XTRACE_UPROBE_ATTACH to attach with perf-event uprobes",
    }
}

/// Loads the programs and attaches every planned probe; `pids[scope]` is each scope's process
/// (None: every process). uprobe_multi links are used where the kernel has them, unless
/// `XTRACE_UPROBE_ATTACH=perf_event`. The thread-exit tracepoint that keeps the per-thread map
/// small is attached last.
pub fn attach(ebpf: &mut Ebpf, plan: &Plan, pids: &[Option<u32>]) -> Result<Attached> {
    let attached = match forced_mechanism()? {
        Some(Mechanism::PerfEvent) => attach_perf_event(ebpf, plan, pids)?,
        Some(Mechanism::UprobeMulti) => attach_multi(ebpf, plan, pids)?.ok_or_else(no_uprobe_multi)?,
        // Asked first: an older kernel would verify every program for nothing.
        None if kernel_refuses_multi() => attach_perf_event(ebpf, plan, pids)?,
        None => match attach_multi(ebpf, plan, pids)? {
            Some(attached) => attached,
            None => attach_perf_event(ebpf, plan, pids)?,
        },
    };
    for (program, tracepoint) in [
        ("thread_exit", "sched_process_exit"),
        ("thread_exec", "sched_process_exec"),
    ] {
        bpf::attach_raw_tracepoint(ebpf, program, tracepoint)?;
    }
    Ok(attached)
}
