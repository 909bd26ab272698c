//! CPU samples, counted per distinct (process image, kernel stack, user stack). Each sample is
//! unwound and later symbolized against the image its process had when it was taken (`images`):
//! the mappings /proc/PID/maps showed when the process was first sampled (read again when a sample
//! falls outside them, after a dlopen), and those the side band reported since, so a process that
//! exits before the capture ends, however soon, is still symbolized from the files it mapped.
use std::collections::HashMap;

use xtrace_common::event::{SampleEvent, MAX_FRAMES, MAX_RETURN_SLOTS, USER_IP, USER_SP};

use super::unwind::Unwinders;
use crate::image::Images;
use crate::procfs::{find, Mapping};
use crate::python::Python;

/// A distinct sampled stack of one process.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StackKey {
    pub pid: u32,
    /// The process's image when sampled ([`Images`]): whose mappings name the user frames.
    pub image: u32,
    /// How many mappings the image had then. Mappings are only added, so the first `mapped` are
    /// the image as it was: a library loaded later at the same address (a plugin unloaded and
    /// another loaded in its place) does not name this sample.
    pub mapped: u32,
    /// Innermost first.
    pub kernel: Box<[u64]>,
    /// Innermost first; the first is the interrupted instruction.
    pub user: Box<[u64]>,
    /// Python frames, innermost first: ids into `Python::names`, `python::ENTRY_BIT` on the
    /// outermost of each eval-loop call's frames.
    pub python: Box<[u32]>,
}

#[derive(Debug, Default)]
pub struct Samples {
    pub total: u64,
    /// User stacks missing their outermost frames: a walk that filled all `MAX_FRAMES` frames, or
    /// an unwind that needed more stack than the sample carried.
    pub truncated: u64,
    pub stacks: HashMap<StackKey, u64>,
    /// The first `TIMELINE_MAX` samples in arrival order, for the thread tracks of trace.json.
    pub timeline: Vec<TimedSample>,
    /// Samples past `TIMELINE_MAX`: counted in the profile, not on the timeline.
    pub timeline_dropped: u64,
    unwinders: Unwinders,
    /// Whether uprobes are attached, whose traps and trampoline samples may land in.
    pub probed: bool,
    /// Read at the first sample that copied its stack or is in the kernel
    /// ([`Samples::read_kallsyms`]); the default when not `probed`.
    traps: Option<super::traps::Traps>,
    /// The kernel's BPF programs, read with the traps at the first sample with kernel frames
    /// (None before).
    pub bpf: Option<super::bpf_symbols::BpfSymbols>,
    /// Instructions the verifier processed to load the sampling program.
    pub verified_insns: Option<u32>,
    /// With the live view: the stacks sampled since it last took them.
    pub recent: Option<super::live::RecentStacks>,
    /// With `--flight`: each sample's stack is kept with it in the flight recorder's window
    /// (`flight`), not here: `stacks` and `timeline` stay empty and only the totals count, so
    /// memory does not grow with the run.
    pub windowed: bool,
}

/// Samples kept with their time and thread for trace.json.
pub const TIMELINE_MAX: usize = 100_000;

/// One sample on the timeline: its stack is the `StackKey` whose [`stack_hash`] is `stack`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimedSample {
    pub ts_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub stack: u64,
}

/// A stable 64-bit hash of a stack (SipHash with fixed keys), so that timeline samples need not
/// hold a copy of their stack.
pub fn stack_hash(key: &StackKey) -> u64 {
    use std::hash::{Hash, Hasher};
    #[allow(deprecated)]
    let mut hasher = std::hash::SipHasher::new();
    key.hash(&mut hasher);
    hasher.finish()
}

impl Samples {
    /// Reads /proc/kallsyms (~5 MB) once for all that needs it at the first sample: the traps,
    /// when uprobes are attached, and the BPF programs.
    fn read_kallsyms(&mut self) {
        let text = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
        if self.bpf.is_none() {
            self.bpf = Some(super::bpf_symbols::BpfSymbols::parse(&text));
        }
        if self.traps.is_none() {
            self.traps = Some(match self.probed {
                true => super::traps::Traps::parse(&text),
                false => super::traps::Traps::default(),
            });
        }
    }

    /// Counts a sample (not one of a launched command before its exec, in xtrace's launcher code);
    /// `stack` is the user stack copied with it, from which its user frames are
    /// unwound (else they are the kernel's frame-pointer walk), after the return addresses of
    /// traced calls are put back in it. `comm` is the event's thread name, as decoded by the caller.
    pub fn add(
        &mut self,
        images: &mut Images,
        python: &mut Python,
        event: &SampleEvent,
        comm: &str,
        stack: &mut [u8],
    ) {
        self.add_weighted(images, python, event, comm, stack, 1);
    }

    /// Counts a stack as [`Samples::add`] does, `weight` times (off-CPU stacks weigh their
    /// nanoseconds), with the Python frames `python` walked for it (looking for the process's
    /// interpreter first if it is new). Returns the stack counted (None for xtrace's launcher
    /// code), for a caller that counts it elsewhere too.
    pub fn add_weighted(
        &mut self,
        images: &mut Images,
        python: &mut Python,
        event: &SampleEvent,
        comm: &str,
        stack: &mut [u8],
        weight: u64,
    ) -> Option<StackKey> {
        let kernel = frames(&event.kernel, event.kernel_frames);
        if !kernel.is_empty() && self.bpf.is_none() {
            // While xtrace's programs are loaded (see `bpf_symbols`).
            self.read_kallsyms();
        }
        let walked = code_frames(frames(&event.user, event.user_frames));
        let pid = event.header.pid;
        let ip = event.user_regs[USER_IP];
        let copied = !stack.is_empty() && ip != 0;
        // The mappings must hold the user addresses: the interrupted instruction when the stack is
        // unwound here (its callers' modules were mapped before it ran), else every walked frame.
        let wanted: &[u64] = if copied { std::slice::from_ref(&ip) } else { walked };
        // Return slots to restore need the return probes' trampoline, mapped at the first hit.
        let returns = &event.returns[..(event.return_slots as usize).min(MAX_RETURN_SLOTS)];
        let covered = |maps: &[Mapping]| {
            wanted.iter().all(|a| find(maps, *a).is_some())
                && (returns.is_empty() || trampolines(maps).is_some())
        };
        let ts = event.header.ts_ns;
        // Its process's fork, exec and mappings before it, even where an earlier image covers it
        // (a non-PIE program exec'd by another).
        images.settle(ts);
        let mut image = images.at(pid, ts);
        if !covered(images.maps(image)) {
            images.read_proc(image);
            // In the kernel, in an exec: the user registers are the old program's.
            if let Some(old) = images.replaced(image) {
                if !kernel.is_empty() && !covered(images.maps(image)) && covered(images.maps(old)) {
                    image = old;
                }
            }
        }
        if images.is_launcher(image) {
            return None; // xtrace's launcher code, before the command's exec
        }
        self.total += weight;
        images.use_image(image);
        python.seen(pid, images.maps(image));
        // The name its process had then (a sample of another thread holds that thread's name; a
        // launched command's before its exec, xtrace's launcher thread's; one in the kernel in
        // the exec that ends the image, the new program's).
        if event.header.tid == pid && !comm.is_empty() && comm != crate::launch::LAUNCHER_THREAD {
            images.named(image, comm, !kernel.is_empty());
        }
        if copied && self.traps.is_none() {
            match self.probed {
                true => self.read_kallsyms(),
                false => self.traps = Some(super::traps::Traps::default()),
            }
        }
        let user: Box<[u64]> = if copied {
            let (kept, cut) = self.unwind_copied(images.maps(image), image, event, kernel, stack);
            self.truncated += u64::from(cut);
            kept.into()
        } else {
            let maps = images.maps(image);
            if walked.len() == MAX_FRAMES || lost_to_trampoline(maps, walked) {
                self.truncated += 1;
            }
            mapped_callers(maps, walked).into()
        };
        let key = StackKey {
            pid,
            image,
            mapped: images.maps(image).len() as u32,
            kernel: kernel.into(),
            user,
            python: python.frames(event.header.tid, ts),
        };
        if let Some(recent) = &mut self.recent {
            recent.add(&key, event.header.tid, weight);
        }
        if self.windowed {
            return Some(key);
        }
        if self.timeline.len() < TIMELINE_MAX {
            self.timeline.push(TimedSample {
                ts_ns: event.header.ts_ns,
                pid,
                tid: event.header.tid,
                stack: stack_hash(&key),
            });
        } else {
            self.timeline_dropped += 1;
        }
        *self.stacks.entry(key.clone()).or_default() += weight;
        Some(key)
    }

    /// A copied user stack's frames, unwound from where the sampled thread stands (a uprobe's
    /// trap or trampoline moves it: [`super::traps`]), and whether they were cut short. Cut short
    /// in the return probes' system call, they are unwound again from that call's other reading
    /// of the registers, kept when it is whole.
    fn unwind_copied(
        &mut self,
        maps: &[Mapping],
        image: u32,
        event: &SampleEvent,
        kernel: &[u64],
        stack: &mut [u8],
    ) -> (Vec<u64>, bool) {
        let returns = &event.returns[..(event.return_slots as usize).min(MAX_RETURN_SLOTS)];
        let (ip, sp) = (event.user_regs[USER_IP], event.user_regs[USER_SP]);
        restore_returns(maps, sp, returns, stack);
        let traps = self.traps.get_or_insert_with(Default::default);
        let at = traps.user_regs((ip, sp), kernel, maps, returns);
        let other = traps.after_return(at, kernel, maps);
        let stack: &[u8] = stack;
        let mut unwind = |(ip, new_sp): (u64, u64)| {
            let mut regs = event.user_regs;
            (regs[USER_IP], regs[USER_SP]) = (ip, new_sp);
            // The copy starts at the sampled stack pointer; above it when that moved up.
            let stack = new_sp
                .checked_sub(sp)
                .and_then(|skip| usize::try_from(skip).ok())
                .and_then(|skip| stack.get(skip..))
                .unwrap_or_default();
            let unwound = self.unwinders.unwind(image, event.header.pid, maps, regs, stack);
            let (kept, cut) = unwound_callers(maps, &unwound.frames, unwound.truncated);
            (kept.to_vec(), cut)
        };
        let first = unwind(at);
        match other {
            Some(other) if first.1 => Some(unwind(other)).filter(|(_, cut)| !cut).unwrap_or(first),
            _ => first,
        }
    }
}

/// The special mapping that holds the return probes' trampoline (and the single-step slots of
/// probed instructions).
pub(crate) const TRAMPOLINES: &str = "[uprobes]";

/// The addresses of the process's [`TRAMPOLINES`] mapping, once it has one (at its first uprobe
/// hit).
pub(crate) fn trampolines(maps: &[Mapping]) -> Option<std::ops::Range<u64>> {
    maps.iter()
        .find(|m| m.path == TRAMPOLINES)
        .map(|m| m.start..m.end)
}

/// Whether a frame of `frames` is in the return probes' trampoline: a return address a return
/// probe swapped in and nothing put back (a child forked by a traced process runs the probes'
/// breakpoints too, but its calls are not recorded), in place of a caller, or where a walk
/// without frame pointers ends.
fn lost_to_trampoline(maps: &[Mapping], frames: &[u64]) -> bool {
    trampolines(maps).is_some_and(|t| frames.iter().any(|a| t.contains(a)))
}

/// Puts each traced call's return address back in `stack` (copied from `sp` up) where its slot
/// holds the return probes' trampoline, so the unwinder walks on to its caller. A slot that holds
/// anything else is left alone: the call's return probe was not installed (its exits are probed
/// at its `ret` instructions, or it nests too deep), or the call was left by an exception or a
/// longjmp and the slot has been reused since. `returns` is innermost first, so when two calls
/// share a slot (a tail call) the outer one, which found the real address, writes last.
fn restore_returns(maps: &[Mapping], sp: u64, returns: &[[u64; 2]], stack: &mut [u8]) {
    let Some(trampolines) = trampolines(maps) else {
        return;
    };
    for &[slot, address] in returns {
        let Some(at) = slot.checked_sub(sp).and_then(|o| usize::try_from(o).ok()) else {
            continue;
        };
        let Some(word) = stack.get_mut(at..at.saturating_add(8)) else {
            continue;
        };
        let value = u64::from_le_bytes(word.try_into().expect("8 bytes"));
        if trampolines.contains(&value) {
            word.copy_from_slice(&address.to_le_bytes());
        }
    }
}

/// One symbol of a JIT's `/tmp/perf-PID.map`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitSymbol {
    pub start: u64,
    pub size: u64,
    pub name: String,
}

/// The symbols of the process's `/tmp/perf-PID.map` (lines `START SIZE NAME`, hexadecimal),
/// sorted by start; empty when the process wrote none. A process in a container writes it in its
/// own root, under its own pid: read through `/proc/PID/root` while it lives, else from ours.
pub fn read_perf_map(pid: u32) -> Vec<JitSymbol> {
    let own = crate::procfs::ns_pid(pid).unwrap_or(pid);
    let text = std::fs::read_to_string(format!("/proc/{pid}/root/tmp/perf-{own}.map"))
        .or_else(|_| std::fs::read_to_string(format!("/tmp/perf-{pid}.map")))
        .unwrap_or_default();
    let mut symbols = parse_perf_map(&text);
    symbols.sort_by_key(|s| s.start);
    symbols
}

/// Parses perf map text; malformed lines are skipped.
pub fn parse_perf_map(text: &str) -> Vec<JitSymbol> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.trim().splitn(3, ' ');
            let hex = |t: &str| u64::from_str_radix(t.trim_start_matches("0x"), 16).ok();
            let start = hex(parts.next()?)?;
            let size = hex(parts.next()?)?;
            let name = parts.next()?.trim().to_string();
            (!name.is_empty()).then_some(JitSymbol { start, size, name })
        })
        .collect()
}

/// The JIT symbol covering `address` in symbols sorted by start.
pub fn find_jit(symbols: &[JitSymbol], address: u64) -> Option<&JitSymbol> {
    crate::model::address::covering(symbols, address, |s| s.start..s.start.saturating_add(s.size))
}

/// The valid frames of a stack: its first `count`, up to the first zero (the end of a frame-pointer
/// chain).
fn frames(stack: &[u64; MAX_FRAMES], count: u32) -> &[u64] {
    let stack = &stack[..(count as usize).min(MAX_FRAMES)];
    let end = stack.iter().position(|&a| a == 0).unwrap_or(stack.len());
    &stack[..end]
}

/// Lowest address code can be mapped at: the kernel's default `vm.mmap_min_addr`.
const LOWEST_CODE: u64 = 0x1_0000;
/// Highest user-space address with 5-level page tables.
const HIGHEST_USER: u64 = 0x00ff_ffff_ffff_ffff;

/// A user stack up to its first frame that cannot be code: a walk that ran past the outermost
/// frame reads whatever lies above it (at a program's first instruction, `argc`; a string).
fn code_frames(frames: &[u64]) -> &[u64] {
    let end = frames
        .iter()
        .position(|a| !(LOWEST_CODE..=HIGHEST_USER).contains(a))
        .unwrap_or(frames.len());
    &frames[..end]
}

/// The frames of an unwound user stack (`past_copy`: it went on past the stack's copy) that are
/// code, and whether it is cut short. It ends before its first frame that cannot be code
/// ([`code_frames`]) and before its first caller outside every mapping: a walk by frame pointer
/// through code without CFI that uses the register for data reads values such as
/// `0x10097cdd`, and such a stack is cut short, as one past the copy or lost in the return probes'
/// trampoline is.
fn unwound_callers<'f>(maps: &[Mapping], frames: &'f [u64], past_copy: bool) -> (&'f [u64], bool) {
    let code = code_frames(frames);
    let kept = mapped_callers(maps, code);
    let cut = past_copy || kept.len() < code.len() || lost_to_trampoline(maps, kept);
    (kept, cut)
}

/// A frame-pointer walk up to its first caller outside the process's code. The kernel's walk
/// (taken when the user stack could not be copied, as when the sample interrupts the fault that
/// grows the stack) follows the frame register, which code built without frame pointers uses for
/// data: past the first frame it reads values such as a pointer into a library's data.
fn mapped_callers<'f>(maps: &[Mapping], frames: &'f [u64]) -> &'f [u64] {
    let end = frames
        .iter()
        .skip(1)
        .position(|a| find(maps, *a).is_none())
        .map_or(frames.len(), |i| i + 1);
    &frames[..end]
}

#[cfg(test)]
#[path = "samples_tests.rs"]
mod tests;
