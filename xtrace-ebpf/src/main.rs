//! xtrace kernel programs: one object, one module per probe family. Needs Linux 5.15 (ring buffer,
//! BPF attach cookies on uprobes).
#![no_std]
#![no_main]
#![feature(asm_experimental_arch)]

mod floor;
mod follow;
mod goroutine;
mod gpu;
mod lifecycle;
mod long_str;
mod maps;
mod offcpu;
mod python;
mod regs;
mod sample;
mod stacks;
mod strings;
mod task_storage;
mod uprobe;
mod usdt;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // SAFETY: the verifier rejects any program that could reach a panic, so this is never executed.
    unsafe { core::hint::unreachable_unchecked() }
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
