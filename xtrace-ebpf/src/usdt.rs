//! USDT call sites: `usdt_hit` (a uprobe on the site's `nop`) finds its site in `USDT_SITES` by the
//! attach cookie, reads the site's arguments from the registers and user memory as its note says,
//! and writes a `UsdtEvent` (a `UsdtStrEvent` when some argument is read as a string), after the
//! thread's `ThreadEvent` on its first hit. Pairing begin/end probes into spans happens in user
//! space.
use core::ptr;

use aya_ebpf::{
    bindings::pt_regs,
    helpers::{bpf_get_attach_cookie, bpf_ktime_get_ns, bpf_probe_read_user, bpf_probe_read_user_buf},
    macros::uprobe,
    programs::ProbeContext,
    EbpfContext,
};
use xtrace_common::{
    event::{UsdtEvent, ARG_STR_LEN, KIND_USDT, KIND_USDT_STR, USDT_STRINGS_AT},
    ranges,
    usdt::{arg_kind, string_kind, UsdtArg, UsdtSite, MAX_USDT_ARGS, NO_REG},
};

use crate::{
    long_str::write_long_string,
    maps::{
        current_pid_tgid, current_thread_traced, long_strings, reserve, stopped, submit_flags, USDT_SITES,
    },
    regs::user_ip,
    uprobe::{header, thread_stack, NoStack},
};

/// What every program at a USDT site starts with: nothing while stopping or for an untraced
/// thread; else the time, the thread's ids, the site's index (the attach cookie) and the site.
/// A thread's first hit names it (a thread that only hits USDT probes may be gone, /proc and
/// all, by the time user space reads the hit); its stack keeps its ids from then on.
#[inline(always)]
pub(crate) fn at_site(ctx: &ProbeContext) -> Option<(u64, u64, u32, &'static UsdtSite)> {
    if stopped() {
        return None;
    }
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    if !current_thread_traced() {
        return None;
    }
    let pid_tgid = match thread_stack(now) {
        Ok(stack) => stack.pid_tgid,
        Err(NoStack::NoSlot) => current_pid_tgid()?,
        Err(NoStack::OutsideNamespace) => return None,
    };
    // SAFETY: the helper only reads the program context.
    let site_index = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    let site = USDT_SITES.get(site_index)?;
    Some((now, pid_tgid, site_index, site))
}

#[uprobe]
pub fn usdt_hit(ctx: ProbeContext) -> u32 {
    let Some((now, pid_tgid, site_index, site)) = at_site(&ctx) else {
        return 0;
    };
    if site.guard_slot != 0 && guarded(&ctx, site) {
        return 0;
    }
    if site.strings != 0 && reads_strings(&ctx, site) {
        if long_strings() {
            send_long_strings(&ctx, site, pid_tgid, now);
        }
        write_with_strings(&ctx, site, site_index, pid_tgid, now);
    } else {
        write_plain(&ctx, site, site_index, pid_tgid, now);
    }
    0
}

/// Whether the site's guard pointer points within its guarded range (see `UsdtSite::guard_slot`).
#[inline(always)]
fn guarded(ctx: &ProbeContext, site: &UsdtSite) -> bool {
    // The kernel sets the saved instruction pointer to the probed address before the programs run.
    let ip = user_ip(ctx.regs);
    let slot = ip.wrapping_add(site.guard_slot as u64);
    // SAFETY: a checked read of user memory.
    let Ok(target) = (unsafe { bpf_probe_read_user(slot as *const u64) }) else {
        return false;
    };
    let lo = ip.wrapping_add(site.guard_lo as u64);
    target.wrapping_sub(lo) < site.guard_hi.wrapping_sub(site.guard_lo) as u64
}

#[inline(always)]
fn write_plain(ctx: &ProbeContext, site: &UsdtSite, site_index: u32, pid_tgid: u64, now: u64) {
    let Some(mut entry) = reserve::<UsdtEvent>() else {
        return;
    };
    let event = entry.as_mut_ptr();
    // SAFETY: `event` points at a reserved record of UsdtEvent's size; every field is written
    // before it is submitted.
    unsafe { fill(ctx, &mut *event, site, site_index, pid_tgid, now, KIND_USDT) };
    entry.submit(submit_flags());
}

/// Sends a `LongStrEvent` before the hit for each string argument that asks for more than its
/// slot keeps (`str:N`, `UsdtArg::long`).
#[inline(always)]
fn send_long_strings(ctx: &ProbeContext, site: &UsdtSite, pid_tgid: u64, now: u64) {
    let regs = ctx.regs as *const pt_regs;
    let nargs = (site.strings as usize).min(MAX_USDT_ARGS);
    for i in 0..MAX_USDT_ARGS {
        if i >= nargs {
            break;
        }
        let arg = &site.args[i];
        if arg.long == 0 {
            continue;
        }
        let Some(pointer) = string_at(arg.string, read_arg(regs, arg)) else {
            continue;
        };
        let hit = (pid_tgid, site.probe_id, now);
        if !write_long_string::<false>(pointer as u64, usize::from(arg.long), hit, i as u16) {
            return;
        }
    }
}

/// A hit of a site that reads strings, written in place in a ring record that ends with the slot
/// of the site's last string argument (a range pop, whose strings are its domain and name, sends
/// 336 bytes, where a record with every slot would take 912). Reservations need a size known when verified, so the record
/// comes in a few sizes ([`send_with_strings`]). Nothing is built in a per-CPU scratch buffer
/// first: uprobe programs run with migration, not preemption, disabled, so on a preemptible kernel
/// another thread's hit on the same CPU could overwrite it.
#[inline(always)]
fn write_with_strings(ctx: &ProbeContext, site: &UsdtSite, site_index: u32, pid_tgid: u64, now: u64) {
    let hit = Hit {
        ctx,
        site,
        site_index,
        pid_tgid,
        now,
    };
    match site.strings {
        1 => send_with_strings::<1>(&hit),
        2 => send_with_strings::<2>(&hit),
        3 => send_with_strings::<3>(&hit),
        4 => send_with_strings::<4>(&hit),
        5 | 6 => send_with_strings::<6>(&hit),
        _ => send_with_strings::<MAX_USDT_ARGS>(&hit),
    }
}

/// What [`fill`] needs of one hit.
struct Hit<'a> {
    ctx: &'a ProbeContext,
    site: &'a UsdtSite,
    site_index: u32,
    pid_tgid: u64,
    now: u64,
}

/// A [`UsdtStrEvent`] cut after its first `SLOTS` string slots.
#[repr(C)]
struct StrRecord<const SLOTS: usize> {
    event: UsdtEvent,
    str_len: [u8; MAX_USDT_ARGS],
    _pad: [u8; 4],
    strings: [[u8; ARG_STR_LEN]; SLOTS],
}

const _: () = assert!(core::mem::offset_of!(StrRecord<1>, strings) == USDT_STRINGS_AT);

/// Sends the hit with its string arguments among the first `SLOTS` read into their slots.
#[inline(always)]
fn send_with_strings<const SLOTS: usize>(hit: &Hit) {
    let Some(mut entry) = reserve::<StrRecord<SLOTS>>() else {
        return;
    };
    let record = entry.as_mut_ptr();
    let site = hit.site;
    // SAFETY: `record` points at a reserved record of StrRecord<SLOTS>'s size. Every field but
    // the string slots is written below; a slot's bytes count only up to its `str_len` (0 for a
    // slot not read), so an unread slot may keep whatever the ring held.
    unsafe {
        fill(
            hit.ctx,
            &mut (*record).event,
            site,
            hit.site_index,
            hit.pid_tgid,
            hit.now,
            KIND_USDT_STR,
        );
        ptr::addr_of_mut!((*record).str_len).write([0; MAX_USDT_ARGS]);
        ptr::addr_of_mut!((*record)._pad).write([0; 4]);
        for i in 0..SLOTS {
            if i >= site.nargs as usize {
                continue;
            }
            let Some(pointer) = string_at(site.args[i].string, (*record).event.args[i]) else {
                continue;
            };
            let dst = &mut (*record).strings[i];
            (*record).str_len[i] = if site.args[i].string == string_kind::RAW {
                read_raw(pointer, dst)
            } else {
                crate::strings::read_c_string::<false>(pointer, dst)
            };
        }
    }
    entry.submit(submit_flags());
}

/// `ARG_STR_LEN` bytes at `pointer` as they are; when that fails (the string ends near the end
/// of its mapping), the bytes up to the end of its page. Returns the count read (0: unreadable).
#[inline(always)]
fn read_raw(pointer: *const u8, dst: &mut [u8; ARG_STR_LEN]) -> u8 {
    // SAFETY: the helper checks the user address; a fault yields an error, not a crash.
    if unsafe { bpf_probe_read_user_buf(pointer, dst) }.is_ok() {
        return ARG_STR_LEN as u8;
    }
    let room = 4096 - (pointer as usize & 4095);
    if room >= ARG_STR_LEN {
        return 0;
    }
    // SAFETY: as above, for the `room` bytes left in the page.
    match unsafe { bpf_probe_read_user_buf(pointer, &mut dst[..room]) } {
        Ok(()) => room as u8,
        Err(_) => 0,
    }
}

/// Where a string argument of kind `kind` (`string_kind`) with value `value` is read, if it is:
/// not a NULL (no domain, say: common, and reading it would cost a page fault), nor a name the
/// tool library has passed before (`ranges::INTERNED`).
#[inline(always)]
fn string_at(kind: u8, value: u64) -> Option<*const u8> {
    let address = match kind {
        string_kind::NONE => return None,
        string_kind::INTERNED if value & ranges::INTERNED != 0 => return None,
        string_kind::INTERNED => value & ranges::ADDRESS,
        _ => value,
    };
    (address != 0).then_some(address as *const u8)
}

/// Whether the hit reads some string argument; when none, it sends a plain `UsdtEvent`. Each
/// string argument in a register is looked at here and again when the record is filled (a load);
/// one in memory is taken to be read rather than fetched twice. A value is only compared here,
/// never kept, so the verifier's paths through `read_arg` join again after each argument. A
/// function of its own (a BPF subprogram): inlined, LLVM shares loads between it and `fill` that
/// read the context on one path and the site on another, which the verifier refuses.
#[inline(never)]
fn reads_strings(ctx: &ProbeContext, site: &UsdtSite) -> bool {
    let nargs = (site.nargs as usize).min(MAX_USDT_ARGS);
    let regs = ctx.regs as *const pt_regs;
    for i in 0..MAX_USDT_ARGS {
        if i >= nargs {
            break;
        }
        let arg = &site.args[i];
        if arg.string == string_kind::NONE {
            continue;
        }
        if arg.kind == arg_kind::MEM || string_at(arg.string, read_arg(regs, arg)).is_some() {
            return true;
        }
    }
    false
}

#[inline(always)]
fn fill(
    ctx: &ProbeContext,
    event: &mut UsdtEvent,
    site: &UsdtSite,
    site_index: u32,
    pid_tgid: u64,
    now: u64,
    kind: u32,
) {
    event.header = header(kind, pid_tgid, now);
    event.site = site_index;
    let nargs = (site.nargs as usize).min(MAX_USDT_ARGS);
    event.nargs = nargs as u32;
    let regs = ctx.regs as *const pt_regs;
    for i in 0..MAX_USDT_ARGS {
        event.args[i] = if i < nargs {
            read_arg(regs, &site.args[i])
        } else {
            0
        };
    }
}

/// The register at byte offset `offset` of `pt_regs` (0 when out of range). Each arm loads the
/// context at a constant offset: the verifier refuses context loads at computed offsets, and a
/// helper call per register costs more than the whole comparison chain.
#[inline(always)]
fn register(regs: *const pt_regs, offset: u16) -> u64 {
    macro_rules! load {
        ($field:ident) => {
            // SAFETY: `regs` is the program's context; volatile keeps each load at its constant
            // offset (merged, they would be one load at a computed offset).
            unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*regs).$field)) }
        };
    }
    match offset {
        0 => load!(r15),
        8 => load!(r14),
        16 => load!(r13),
        24 => load!(r12),
        32 => load!(rbp),
        40 => load!(rbx),
        48 => load!(r11),
        56 => load!(r10),
        64 => load!(r9),
        72 => load!(r8),
        80 => load!(rax),
        88 => load!(rcx),
        96 => load!(rdx),
        104 => load!(rsi),
        112 => load!(rdi),
        120 => load!(orig_rax),
        128 => load!(rip),
        136 => load!(cs),
        144 => load!(eflags),
        152 => load!(rsp),
        160 => load!(ss),
        _ => 0,
    }
}

/// One argument as its spec says, sign- or zero-extended from its size (0 when unreadable).
#[inline(always)]
fn read_arg(regs: *const pt_regs, arg: &UsdtArg) -> u64 {
    let raw = match arg.kind {
        arg_kind::CONST => arg.offset as u64,
        arg_kind::REG => register(regs, arg.reg),
        arg_kind::MEM => {
            let mut address = register(regs, arg.reg).wrapping_add(arg.offset as u64);
            if arg.index_reg != NO_REG {
                let index = register(regs, arg.index_reg);
                address = address.wrapping_add(index.wrapping_mul(u64::from(arg.scale)));
            }
            read_user(address, arg.size)
        }
        _ => 0,
    };
    extend(raw, arg.size, arg.signed != 0)
}

/// `size` bytes of user memory at `address` (0 when unreadable).
#[inline(always)]
fn read_user(address: u64, size: u8) -> u64 {
    // SAFETY: the helper checks the user address; a fault yields an error, not a crash.
    unsafe {
        match size {
            1 => bpf_probe_read_user(address as *const u8).map(u64::from),
            2 => bpf_probe_read_user(address as *const u16).map(u64::from),
            4 => bpf_probe_read_user(address as *const u32).map(u64::from),
            _ => bpf_probe_read_user(address as *const u64),
        }
    }
    .unwrap_or(0)
}

/// `raw` cut to `size` bytes, then sign- or zero-extended to 64 bits.
#[inline(always)]
fn extend(raw: u64, size: u8, signed: bool) -> u64 {
    let shift = match size {
        1 => 56,
        2 => 48,
        4 => 32,
        _ => return raw,
    };
    if signed {
        (((raw << shift) as i64) >> shift) as u64
    } else {
        (raw << shift) >> shift
    }
}
