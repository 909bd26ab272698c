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
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()?
        .trim()
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

/// Loads the sampling program and starts one perf event per online CPU. Returns the CPU count.
pub fn attach(ebpf: &mut Ebpf, hz: u64) -> Result<usize> {
    let program: &mut PerfEvent = crate::bpf::program_mut(ebpf, "sample")?;
    program.load().map_err(|source| Error::Attach {
        what: "loading sample".into(),
        source,
    })?;
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
