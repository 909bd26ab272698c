//! Kernel symbols' addresses from /proc/kallsyms ([`symbol`], which the samples' trap ranges use
//! too), and those the programs compare against, read at load time: the interrupt entry code,
//! which `--off-cpu` looks for in a waker's kernel stack to tell a wake-up from an interrupt (a
//! timer, an I/O completion) from one by the thread that happened to be running.
use std::ops::Range;

/// `__irqentry_text_start..__irqentry_text_end` of the running kernel; empty when /proc/kallsyms
/// shows no addresses (without CAP_SYSLOG, or under `kptr_restrict`) or lacks them.
pub fn irq_entry_text() -> Range<u64> {
    std::fs::File::open("/proc/kallsyms")
        .map(|file| irq_entry_in(std::io::BufReader::new(file)))
        .unwrap_or(0..0)
}

/// [`irq_entry_text`] of the lines of /proc/kallsyms, read only as far as the two symbols: the
/// interrupt entry text opens the kernel's `.text`, so they come within its first hundred lines
/// on x86-64, where the whole file (over 100,000 lines, formatted by the kernel as it is read)
/// takes tens of milliseconds.
fn irq_entry_in(kallsyms: impl std::io::BufRead) -> Range<u64> {
    let (mut start, mut end) = (None, None);
    for line in kallsyms.lines() {
        let Ok(line) = line else {
            break;
        };
        // `ADDRESS TYPE NAME`; a module's symbols have their `\t[MODULE]` in the name field.
        let mut fields = line.splitn(3, ' ');
        let (Some(address), Some(_), Some(name)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        let found = match name {
            "__irqentry_text_start" => &mut start,
            "__irqentry_text_end" => &mut end,
            _ => continue,
        };
        match u64::from_str_radix(address, 16) {
            // Hidden (0: without CAP_SYSLOG, or under `kptr_restrict`): nothing to compare against.
            Ok(0) | Err(_) => return 0..0,
            Ok(address) => *found = Some(address),
        }
        if let (Some(start), Some(end)) = (start, end) {
            return if end > start { start..end } else { 0..0 };
        }
    }
    0..0
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
        assert_eq!(
            irq_entry_in(text.as_bytes()),
            0xffffffff81000300..0xffffffff81000f70
        );
        // Hidden addresses (kptr_restrict) read as 0: nothing to compare against.
        let hidden: String = text
            .lines()
            .map(|line| format!("0000000000000000{}\n", &line[16..]))
            .collect();
        assert_eq!(irq_entry_in(hidden.as_bytes()), 0..0);
        assert_eq!(irq_entry_in(&b"ffffffff81000000 T _stext\n"[..]), 0..0);
        // A module's symbol of the same name is not the kernel's.
        let module = "ffffffffc0000300 t __irqentry_text_start\t[fake]\n\
                      ffffffffc0000f70 t __irqentry_text_end\t[fake]\n";
        assert_eq!(irq_entry_in(module.as_bytes()), 0..0);
    }

    /// Gives its text once; a second read fails the test.
    struct ReadOnce(Option<&'static [u8]>);

    impl std::io::Read for ReadOnce {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let text = self.0.take().expect("read past the two symbols");
            buf[..text.len()].copy_from_slice(text);
            Ok(text.len())
        }
    }

    #[test]
    fn reading_stops_at_the_second_symbol() {
        let once = |text| std::io::BufReader::new(ReadOnce(Some(text)));
        let text = b"ffffffff81000300 T __irqentry_text_start\n\
                     ffffffff81000f70 T __irqentry_text_end\n";
        assert_eq!(irq_entry_in(once(text)), 0xffffffff81000300..0xffffffff81000f70);
        // The end before the start: an empty range, found as soon.
        let text = b"ffffffff81000000 T __irqentry_text_end\n\
                     ffffffff81000300 T __irqentry_text_start\n";
        assert_eq!(irq_entry_in(once(text)), 0..0);
    }

    #[test]
    fn this_kernel_has_an_interrupt_entry_text() {
        // As root (the tests' user), kallsyms shows addresses.
        let text = irq_entry_text();
        assert!(!text.is_empty(), "{text:?}");
        let whole = std::fs::read_to_string("/proc/kallsyms").expect("/proc/kallsyms");
        let address = |name: &str| symbol(&whole, name).map(|(address, _)| address);
        assert_eq!(
            Some(text.clone()),
            address("__irqentry_text_start")
                .zip(address("__irqentry_text_end"))
                .map(|(s, e)| s..e)
        );
    }
}
