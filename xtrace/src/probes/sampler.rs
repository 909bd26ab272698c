//! CPU sampling: the `sample` program on a software cpu-clock perf event per online CPU at `-F HZ`
//! (frequency mode, so the kernel keeps the rate as load varies). Which processes are sampled is
//! the kernel program's `SAMPLE_PIDS` filter; the events are fd-based and go with the object.
use aya::{
    programs::perf_event::{PerfEvent, PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
    util::online_cpus,
    Ebpf,
};

use crate::error::{Error, Result};

/// The default frequency when no probe is asked for, as perf's and bpftrace's 99 Hz: off the beat
/// of periodic work that runs at round rates.
pub const DEFAULT_HZ: u64 = 99;

/// The kernel's limit on sampling rates (`kernel.perf_event_max_sample_rate`), if readable.
pub fn max_rate() -> Option<u64> {
    crate::procfs::kernel_setting("perf_event_max_sample_rate")?
        .parse()
        .ok()
}

/// Refuses a frequency the kernel would not keep.
pub fn check_rate(hz: u64) -> Result<()> {
    match max_rate() {
        Some(max) if hz > max => Err(Error::FrequencyTooHigh { hz, max }),
        _ => Ok(()),
    }
}

/// Refuses a ring buffer of `ring_bytes` too small for one CPU sample with `user_stack` bytes of
/// user stack: every sample would be lost (`lost.ring_full`).
pub fn check_ring(ring_bytes: u32, user_stack: u32) -> Result<()> {
    // The record (its fixed part and the stack copy, padded to 8) and its 8-byte ring header.
    let record = std::mem::size_of::<xtrace_common::event::SampleEvent>() as u64 + u64::from(user_stack);
    let needed = record.div_ceil(8) * 8 + 8;
    if needed <= u64::from(ring_bytes) {
        return Ok(());
    }
    Err(Error::RingTooSmallForSamples {
        ring: size(u64::from(ring_bytes)),
        needed,
        stack: size(u64::from(user_stack)),
        enough: size(needed.next_power_of_two()),
    })
}

/// `16384` → `16K`, as the size flags take it.
fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

/// The instructions the verifier processed to load the sampling program (`verified_insns`, Linux
/// 5.16+), once it is loaded: the Python walk is most of them, and its bound is tested.
pub fn verified_insns(ebpf: &mut Ebpf) -> Option<u32> {
    let program: &mut PerfEvent = crate::bpf::program_mut(ebpf, "sample").ok()?;
    program.info().ok()?.verified_instruction_count()
}

/// Loads the sampling program (unless it is loaded) and starts one perf event per online CPU.
/// Returns the CPU count.
pub fn attach(ebpf: &mut Ebpf, hz: u64) -> Result<usize> {
    let program: &mut PerfEvent = crate::bpf::program_mut(ebpf, "sample")?;
    // Verified beside off_cpu_return already (bpf::verify), when both are wanted.
    if program.fd().is_err() {
        program.load().map_err(|source| Error::Attach {
            what: "loading sample".into(),
            source,
        })?;
    }
    let cpus = online_cpus().map_err(|(what, e)| Error::io(what, e))?;
    for &cpu in &cpus {
        program
            .attach(
                PerfEventConfig::Software(SoftwareEvent::CpuClock),
                PerfEventScope::AllProcessesOneCpu { cpu },
                SamplePolicy::Frequency(hz),
                false,
            )
            .map_err(|source| Error::Attach {
                what: format!("sample to the cpu-clock event of CPU {cpu} at {hz} Hz"),
                source,
            })?;
    }
    Ok(cpus.len())
}

/// Why kernel frames will show bare addresses, when they will: `/proc/kallsyms` lists every
/// address as 0 to a reader the kernel does not trust (`kernel.kptr_restrict`: with 0, readers
/// that have CAP_SYSLOG or when `kernel.perf_event_paranoid` is 1 or lower; with 1, CAP_SYSLOG
/// only; with 2, none). The kernel decides when the file is opened, with the opener's
/// credentials: this process's, as blazesym's when it names the frames.
pub fn kernel_names_hidden() -> Option<String> {
    let file = std::fs::File::open("/proc/kallsyms").ok()?;
    if !addresses_hidden(std::io::BufReader::new(file))? {
        return None;
    }
    let value = |name| crate::procfs::kernel_setting(name).unwrap_or_else(|| "?".to_string());
    Some(hidden_why(&value("kptr_restrict"), &value("perf_event_paranoid")))
}

/// Whether kallsyms lists its addresses as 0, judged by its first symbol that is not absolute:
/// before Linux 6.15 x86-64 kallsyms starts with per-CPU symbols (`0000000000000000 A
/// fixed_percpu_data`), whose 0 is their real offset. None when the file holds no such symbol.
fn addresses_hidden(kallsyms: impl std::io::BufRead) -> Option<bool> {
    for line in kallsyms.lines() {
        let line = line.ok()?;
        let mut fields = line.split_ascii_whitespace();
        let (Some(address), Some(kind)) = (fields.next(), fields.next()) else {
            continue;
        };
        if kind.eq_ignore_ascii_case("a") {
            continue;
        }
        return Some(u64::from_str_radix(address, 16) == Ok(0));
    }
    None
}

/// The warning for kernel frames that kallsyms will not name, with what would let it.
fn hidden_why(kptr_restrict: &str, paranoid: &str) -> String {
    let remedy = match kptr_restrict {
        "0" => "run as root, grant CAP_SYSLOG, or set kernel.perf_event_paranoid to 1",
        "1" => "run as root or grant CAP_SYSLOG",
        _ => "set kernel.kptr_restrict to 1 or 0 and run as root",
    };
    format!(
        "kernel frames will show bare addresses: /proc/kallsyms hides addresses from this user \
         (kernel.kptr_restrict={kptr_restrict}, kernel.perf_event_paranoid={paranoid}); to name \
         them, {remedy}"
    )
}

#[cfg(test)]
mod tests {
    use super::{addresses_hidden, check_ring, hidden_why};

    /// Absolute (per-CPU) symbols at 0 open kallsyms on x86-64 before 6.15: not hidden.
    #[test]
    fn per_cpu_symbols_at_zero_do_not_mean_hidden_addresses() {
        let shown = "0000000000000000 A fixed_percpu_data\n0000000000000000 A __per_cpu_start\n\
                     ffffffff81000000 T _stext\n";
        assert_eq!(addresses_hidden(shown.as_bytes()), Some(false));
        let hidden = "0000000000000000 A fixed_percpu_data\n0000000000000000 T _stext\n";
        assert_eq!(addresses_hidden(hidden.as_bytes()), Some(true));
        assert_eq!(
            addresses_hidden("0000000000000000 T _text\n".as_bytes()),
            Some(true)
        );
        assert_eq!(addresses_hidden("".as_bytes()), None);
    }

    /// A sample is its fixed part (2,624 bytes) and up to --user-stack bytes of stack, plus the
    /// ring's 8-byte header: 4K holds one with 1K of stack, not with 2K.
    #[test]
    fn a_ring_must_hold_one_sample() {
        assert!(check_ring(4096, 1024).is_ok());
        assert!(check_ring(16 << 20, 16384).is_ok());
        assert_eq!(
            check_ring(4096, 16384).unwrap_err().to_string(),
            "--buffer-size 4K cannot hold a CPU sample with its stack copy, up to 19016 bytes with \
             --user-stack 16K: give --buffer-size 32K or more, or a smaller --user-stack"
        );
        assert!(check_ring(4096, 2048)
            .unwrap_err()
            .to_string()
            .contains("--buffer-size 8K or more"));
        assert!(check_ring(32768, 16384).is_ok());
    }

    #[test]
    fn hidden_kernel_names_say_what_would_show_them() {
        assert!(hidden_why("0", "2").ends_with("grant CAP_SYSLOG, or set kernel.perf_event_paranoid to 1"));
        assert!(hidden_why("1", "2").ends_with("run as root or grant CAP_SYSLOG"));
        assert!(hidden_why("2", "-1").contains("(kernel.kptr_restrict=2, kernel.perf_event_paranoid=-1)"));
    }
}
