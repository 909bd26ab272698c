//! The kernel's BPF programs as /proc/kallsyms lists them while they are loaded
//! (`bpf_prog_<tag>_<name>`, module `[bpf]`), to name kernel frames inside them: a sample taken
//! while a uprobe's program runs (xtrace's own, `span_enter`) has one. Kernel frames are named at
//! the end of the capture, once xtrace's programs are unloaded and gone from kallsyms, where the
//! nearest symbol below would be the last of the kernel's own image (`__stop_runtime_ptr_*`, not
//! even code). So the list is read once, at the first sample in the kernel, while they run.

/// A JIT image is at most this long (a BPF program of a million instructions is not xtrace's);
/// the next symbol ends it where that comes first.
const IMAGE_MAX: u64 = 64 << 10;

#[derive(Debug, Default)]
pub struct BpfSymbols {
    /// (start, end, name), by start.
    programs: Vec<(u64, u64, String)>,
}

impl BpfSymbols {
    pub fn read() -> BpfSymbols {
        BpfSymbols::parse(&std::fs::read_to_string("/proc/kallsyms").unwrap_or_default())
    }

    /// [`BpfSymbols::read`] on the text of /proc/kallsyms: each `[bpf]` symbol runs to the next
    /// symbol of any kind (the kernel's own included: on some architectures BPF code lies just
    /// below the kernel image), at most [`IMAGE_MAX`]. Empty where kallsyms shows no addresses.
    pub fn parse(kallsyms: &str) -> BpfSymbols {
        let mut symbols: Vec<(u64, Option<&str>)> = kallsyms
            .lines()
            .filter_map(|line| {
                let (symbol, module) = line.split_once('\t').unwrap_or((line, ""));
                let mut fields = symbol.split(' ');
                let address = u64::from_str_radix(fields.next()?, 16).ok().filter(|&a| a != 0)?;
                let name = fields.nth(1)?;
                Some((address, (module == "[bpf]").then_some(name)))
            })
            .collect();
        symbols.sort_unstable_by_key(|s| s.0);
        let programs = symbols
            .iter()
            .enumerate()
            .filter_map(|(i, &(start, name))| {
                let name = name?;
                let next = symbols[i + 1..].iter().map(|s| s.0).find(|&a| a > start);
                let end = next.map_or(start + IMAGE_MAX, |n| n.min(start + IMAGE_MAX));
                Some((start, end, name.to_string()))
            })
            .collect();
        BpfSymbols { programs }
    }

    /// The program `address` is in.
    pub fn find(&self, address: u64) -> Option<&str> {
        crate::model::address::covering(&self.programs, address, |p| p.0..p.1).map(|p| p.2.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_run_to_the_next_symbol_or_their_cap() {
        let kallsyms = "\
ffffffff81000000 T _stext
ffffffff83b26508 R __start_runtime_ptr_USER_PTR_MAX
ffffffff83b26734 R __stop_runtime_ptr_USER_PTR_MAX
ffffffffa0001000 t bpf_prog_6deef7357e7b4530_span_enter\t[bpf]
ffffffffa0001800 t bpf_prog_0123456789abcdef_span_ret\t[bpf]
ffffffffc0201000 t ftrace_trampoline\t[__builtin__ftrace]
ffffffffc0400000 t bpf_prog_fedcba9876543210_sample\t[bpf]
";
        let bpf = BpfSymbols::parse(kallsyms);
        assert_eq!(
            bpf.find(0xffffffffa0001000),
            Some("bpf_prog_6deef7357e7b4530_span_enter")
        );
        assert_eq!(
            bpf.find(0xffffffffa00017ff),
            Some("bpf_prog_6deef7357e7b4530_span_enter")
        );
        assert_eq!(
            bpf.find(0xffffffffa0001800),
            Some("bpf_prog_0123456789abcdef_span_ret")
        );
        assert_eq!(bpf.find(0xffffffffa0011800), None, "past the cap");
        assert_eq!(bpf.find(0xffffffffc0201000), None, "a module's symbol");
        assert_eq!(
            bpf.find(0xffffffffc0400010),
            Some("bpf_prog_fedcba9876543210_sample")
        );
        assert_eq!(bpf.find(0xffffffff83b26740), None, "the kernel's own image");
        // Hidden addresses (kptr_restrict) are all zero: nothing is listed.
        let hidden = "0000000000000000 t bpf_prog_6deef7357e7b4530_span_enter\t[bpf]\n";
        assert!(BpfSymbols::parse(hidden).programs.is_empty());
        // The kernel's own symbols end a program too (BPF code placed below the kernel image).
        let below = "\
ffffffff80000000 t bpf_prog_6deef7357e7b4530_span_enter\t[bpf]
ffffffff80000800 T _stext
";
        let bpf = BpfSymbols::parse(below);
        assert_eq!(
            bpf.find(0xffffffff800007ff),
            Some("bpf_prog_6deef7357e7b4530_span_enter")
        );
        assert_eq!(bpf.find(0xffffffff80000800), None);
    }
}
