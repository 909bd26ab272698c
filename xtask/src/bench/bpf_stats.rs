//! The kernel's BPF run-time statistics (`kernel.bpf_stats_enabled`) add two clock reads to every
//! run of every BPF program on the machine: on this VM ~7% of a traced thread's time at a span per
//! 1.8 µs. Left on (by `sysctl`, or by a tool that forgot it), they inflate every per-hit and
//! throughput figure. The bench turns them off while it runs and restores the setting after.
use std::fs;

const SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// Holds the statistics off; puts back what it found when dropped.
pub struct StatsOff {
    /// The setting found ("0", "1", or "unknown" where the sysctl cannot be read), and what the
    /// bench did with it: recorded in bench.json's machine facts.
    pub fact: String,
    restore: bool,
}

impl StatsOff {
    /// Turns the statistics off if they are on, saying so on stdout.
    pub fn take() -> Self {
        let found = fs::read_to_string(SYSCTL).map_or_else(|_| "unknown".into(), |s| s.trim().to_owned());
        let mut restore = false;
        let mut fact = found.clone();
        if found == "1" {
            match fs::write(SYSCTL, "0") {
                Ok(()) => {
                    restore = true;
                    fact = "1 (0 while the bench ran)".into();
                    println!(
                        "bench: kernel.bpf_stats_enabled was 1 (two clock reads added to every BPF \
                         program run); 0 while the bench runs, 1 again after"
                    );
                }
                Err(e) => {
                    fact = "1 (could not be turned off: figures include its cost)".into();
                    println!(
                        "bench: kernel.bpf_stats_enabled is 1 and could not be set to 0 ({e}); every \
                         per-hit and throughput figure includes its two clock reads per BPF program run"
                    );
                }
            }
        }
        Self { fact, restore }
    }
}

impl Drop for StatsOff {
    fn drop(&mut self) {
        if self.restore {
            if let Err(e) = fs::write(SYSCTL, "1") {
                eprintln!("bench: could not set kernel.bpf_stats_enabled back to 1: {e}");
            }
        }
    }
}
