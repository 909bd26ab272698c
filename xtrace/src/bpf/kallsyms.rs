//! Kernel symbols' addresses from /proc/kallsyms ([`symbol`], which the samples' trap ranges use
//! too), and those the programs compare against, read at load time: the interrupt entry code,
//! which `--off-cpu` looks for in a waker's kernel stack to tell a wake-up from an interrupt (a
//! timer, an I/O completion) from one by the thread that happened to be running.
use std::ops::Range;

/// `__irqentry_text_start..__irqentry_text_end` of the running kernel; empty when /proc/kallsyms
/// shows no addresses (without CAP_SYSLOG, or under `kptr_restrict`) or lacks them.
pub fn irq_entry_text() -> Range<u64> {
    std::fs::read_to_string("/proc/kallsyms")
        .map(|text| irq_entry_in(&text))
        .unwrap_or(0..0)
}

/// [`irq_entry_text`] of the text of /proc/kallsyms.
fn irq_entry_in(kallsyms: &str) -> Range<u64> {
    let address = |name: &str| symbol(kallsyms, name).map(|(address, _)| address);
    match (address("__irqentry_text_start"), address("__irqentry_text_end")) {
        (Some(start), Some(end)) if end > start => start..end,
        _ => 0..0,
    }
}

/// The address of the kernel's own symbol `name` in the text of /proc/kallsyms (lines `ADDRESS
/// TYPE NAME`; a module's symbols, which end in `[MODULE]`, are not looked at), and where the
/// text after its line starts; None when it is missing or its address hidden (0: without
/// CAP_SYSLOG, or under `kptr_restrict`). Found by substring: it runs over ~120,000 lines.
pub fn symbol(kallsyms: &str, name: &str) -> Option<(u64, usize)> {
    let at = kallsyms.find(&format!(" {name}\n"))?;
    let line_start = kallsyms[..at].rfind('\n').map_or(0, |i| i + 1);
    let address = u64::from_str_radix(kallsyms[line_start..].split(' ').next()?, 16).ok()?;
    (address != 0).then_some((address, at + name.len() + 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interrupt_entry_text_is_read_from_its_two_symbols() {
        let text = "ffffffff81000000 T _stext\n\
                    ffffffff81000300 T __irqentry_text_start\n\
                    ffffffff81000d40 T asm_common_interrupt\n\
                    ffffffff81000f70 T __irqentry_text_end\n";
        assert_eq!(irq_entry_in(text), 0xffffffff81000300..0xffffffff81000f70);
        // Hidden addresses (kptr_restrict) read as 0: nothing to compare against.
        let hidden: String = text
            .lines()
            .map(|line| format!("0000000000000000{}\n", &line[16..]))
            .collect();
        assert_eq!(irq_entry_in(&hidden), 0..0);
        assert_eq!(irq_entry_in("ffffffff81000000 T _stext\n"), 0..0);
    }
}
