//! Kernel addresses the programs compare against, from /proc/kallsyms at load time: the interrupt
//! entry code, which `--off-cpu` looks for in a waker's kernel stack to tell a wake-up from an
//! interrupt (a timer, an I/O completion) from one by the thread that happened to be running.
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
    let address = |name: &str| {
        let line = kallsyms
            .lines()
            .find(|line| line.split(' ').nth(2) == Some(name))?;
        u64::from_str_radix(line.split(' ').next()?, 16).ok()
    };
    match (address("__irqentry_text_start"), address("__irqentry_text_end")) {
        (Some(start), Some(end)) if start != 0 && end > start => start..end,
        _ => 0..0,
    }
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
