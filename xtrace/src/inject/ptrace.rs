//! The ptrace side of `--inject`: seizing one thread, bringing it to a system-call entry (a safe
//! point: the thread holds no user-space lock a library load might need, unless its call is one
//! of memory management, which such code makes under malloc's lock and those are passed over),
//! sending it into stage 0 and following it to the hand-over, writing memory, and letting the
//! thread go.
//!
//! Until [`Tracee::set_registers`] the thread's registers are never changed, so a kill of xtrace
//! leaves at most its interrupted system call restarted or returning EINTR. Dropping a `Tracee`
//! detaches it with the registers it last set.
use std::{
    fs::File,
    ops::Range,
    os::unix::fs::FileExt,
    time::{Duration, Instant},
};

use super::Error;

/// `PTRACE_O_TRACESYSGOOD`: system-call stops report `SIGTRAP | 0x80`.
const SYSCALL_STOP: i32 = libc::SIGTRAP | 0x80;
/// `PTRACE_SYSCALL_INFO_ENTRY`.
const INFO_ENTRY: u8 = 1;
/// PTRACE_GET_SYSCALL_INFO (Linux 5.3, <linux/ptrace.h>), which the libc crate gives for glibc
/// only, not for the release's static (musl) build.
const PTRACE_GET_SYSCALL_INFO: u32 = 0x420e;
/// System calls whose callers may hold malloc's or the loader's lock: not a safe point.
const UNSAFE_CALLS: &[u64] = &[9, 10, 11, 12, 25, 28, 56, 57, 58, 59, 60, 231, 435, 15];

/// One seized thread.
pub struct Tracee {
    pub tid: u32,
    mem: File,
    detached: bool,
    /// A signal the thread stopped to receive and has not been given yet: given at the detach.
    pending: i32,
}

impl Tracee {
    /// Seizes thread `tid` of process `pid` and stops it.
    pub fn seize(pid: u32, tid: u32) -> Result<Tracee, Error> {
        let mem = File::options()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/mem"))
            .map_err(|e| Error::Ptrace {
                pid,
                step: "open /proc/PID/mem",
                reason: e.to_string(),
            })?;
        // SAFETY: PTRACE_SEIZE takes a tid, a null address and the option bits.
        let seized = unsafe {
            libc::ptrace(
                libc::PTRACE_SEIZE,
                tid as libc::pid_t,
                0,
                libc::PTRACE_O_TRACESYSGOOD,
            )
        };
        if seized != 0 {
            return Err(Error::Ptrace {
                pid,
                step: "PTRACE_SEIZE",
                reason: last_error(),
            });
        }
        let tracee = Tracee {
            tid,
            mem,
            detached: false,
            pending: 0,
        };
        // SAFETY: PTRACE_INTERRUPT of a seized thread takes no address or data.
        if unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, tid as libc::pid_t, 0, 0) } != 0 {
            return Err(Error::Ptrace {
                pid,
                step: "PTRACE_INTERRUPT",
                reason: last_error(),
            });
        }
        Ok(tracee)
    }

    /// Waits for the thread's next stop until `deadline`: its status, None at the deadline.
    fn wait(&self, deadline: Instant) -> Result<Option<i32>, String> {
        loop {
            let mut status = 0;
            // SAFETY: waits for this one thread without blocking; writes one int.
            let got =
                unsafe { libc::waitpid(self.tid as libc::pid_t, &mut status, libc::__WALL | libc::WNOHANG) };
            if got < 0 {
                return Err(last_error());
            }
            if got > 0 {
                if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                    return Err("the thread exited".into());
                }
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Resumes the thread to its next system-call stop, delivering `signal`.
    fn resume_to_syscall(&self, signal: i32) -> Result<(), String> {
        // SAFETY: PTRACE_SYSCALL of a stopped, seized thread; data is a signal number.
        match unsafe { libc::ptrace(libc::PTRACE_SYSCALL, self.tid as libc::pid_t, 0, signal) } {
            0 => Ok(()),
            _ => Err(last_error()),
        }
    }

    /// Whether the thread, stopped at a system-call stop, is at its entry.
    fn at_entry(&self) -> Result<bool, String> {
        let mut info = [0u8; 88];
        // SAFETY: PTRACE_GET_SYSCALL_INFO writes at most `info.len()` bytes into `info`.
        let got = unsafe {
            libc::ptrace(
                PTRACE_GET_SYSCALL_INFO as _,
                self.tid as libc::pid_t,
                info.len(),
                info.as_mut_ptr(),
            )
        };
        if got < 0 {
            return Err(last_error());
        }
        Ok(info[0] == INFO_ENTRY)
    }

    /// Brings the stopped thread to the entry of a system call it makes by itself (the one it was
    /// interrupted in, restarted, or its next), passing over [`UNSAFE_CALLS`], calls made from
    /// the code in `avoid` (the dynamic loader's: it makes its calls holding its lock, in the
    /// middle of loading a library) and signals (which it gets as it would have), until
    /// `deadline`. Returns its registers there, None at the deadline (the thread stopped again,
    /// ready to detach).
    pub fn reach_safe_point(
        &mut self,
        deadline: Instant,
        avoid: &[Range<u64>],
    ) -> Result<Option<libc::user_regs_struct>, String> {
        // The first stop is PTRACE_INTERRUPT's, or one for a signal that came first (delivered on).
        let Some(first) = self.wait(deadline + Duration::from_secs(1))? else {
            return Err("the thread did not stop".into());
        };
        let mut signal = delivery_signal(first);
        loop {
            self.resume_to_syscall(signal)?;
            signal = 0;
            let Some(status) = self.wait(deadline)? else {
                self.interrupt_for_detach()?;
                return Ok(None);
            };
            if status >> 16 != 0 || libc::WSTOPSIG(status) != SYSCALL_STOP {
                // A signal to deliver on, or an event stop (a group stop, our interrupt).
                signal = delivery_signal(status);
                continue;
            }
            if !self.at_entry()? {
                continue;
            }
            let regs = self.registers()?;
            let call = regs.rip - 2;
            if UNSAFE_CALLS.contains(&regs.orig_rax)
                || avoid.iter().any(|code| code.contains(&call))
                || self.read_bytes(call, 2)? != [0x0f, 0x05]
            {
                continue;
            }
            return Ok(Some(regs));
        }
    }

    /// Stops the running thread again after a missed deadline, so that it can be detached.
    fn interrupt_for_detach(&mut self) -> Result<(), String> {
        // SAFETY: as in `seize`.
        if unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, self.tid as libc::pid_t, 0, 0) } != 0 {
            return Err(last_error());
        }
        if let Some(status) = self.wait(Instant::now() + Duration::from_secs(1))? {
            self.pending = delivery_signal(status);
        }
        Ok(())
    }

    pub fn registers(&self) -> Result<libc::user_regs_struct, String> {
        // SAFETY: an all-zero user_regs_struct is a valid value of this plain struct.
        let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        // SAFETY: PTRACE_GETREGS of a stopped thread writes one user_regs_struct.
        match unsafe { libc::ptrace(libc::PTRACE_GETREGS, self.tid as libc::pid_t, 0, &mut regs) } {
            0 => Ok(regs),
            _ => Err(last_error()),
        }
    }

    pub fn set_registers(&self, regs: &libc::user_regs_struct) -> Result<(), String> {
        // SAFETY: PTRACE_SETREGS of a stopped thread reads one user_regs_struct.
        match unsafe { libc::ptrace(libc::PTRACE_SETREGS, self.tid as libc::pid_t, 0, regs) } {
            0 => Ok(()),
            _ => Err(last_error()),
        }
    }

    /// Resumes the thread to its next system-call stop, passing on the signals it stops for on
    /// the way, by `deadline` (else the error `late`): whether the stop is at an entry.
    fn next_syscall_stop(&self, deadline: Instant, late: &str) -> Result<bool, String> {
        let mut signal = 0;
        loop {
            self.resume_to_syscall(signal)?;
            let status = self.wait(deadline)?.ok_or_else(|| late.to_owned())?;
            if status >> 16 != 0 || libc::WSTOPSIG(status) != SYSCALL_STOP {
                signal = delivery_signal(status);
                continue;
            }
            return self.at_entry();
        }
    }

    /// Lets the thread, sent into stage 0, run to the entry of its hand-over call (a `getpid`
    /// whose `syscall` instruction ends just before `handover`): its registers there, `rdi` what
    /// stage 0's `mmap` returned.
    pub fn run_to_handover(&self, handover: u64) -> Result<libc::user_regs_struct, String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if self.next_syscall_stop(deadline, "the thread did not reach the hand-over within 5 s")? {
                let regs = self.registers()?;
                if regs.rip == handover && regs.orig_rax == libc::SYS_getpid as u64 {
                    return Ok(regs);
                }
            }
        }
    }

    /// Lets the thread, stopped at a system call's entry, make it, and stops it at its exit.
    pub fn finish_call(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.next_syscall_stop(deadline, "the system call did not return within 5 s")? {}
        Ok(())
    }

    pub fn read_bytes(&self, address: u64, len: usize) -> Result<Vec<u8>, String> {
        let mut bytes = vec![0; len];
        self.mem
            .read_exact_at(&mut bytes, address)
            .map_err(|e| e.to_string())?;
        Ok(bytes)
    }

    /// Writes `bytes` at `address`, in a mapping the thread may not write itself.
    pub fn write_bytes(&self, address: u64, bytes: &[u8]) -> Result<(), String> {
        self.mem.write_all_at(bytes, address).map_err(|e| e.to_string())
    }

    /// Lets the thread go with the registers last set.
    pub fn detach(mut self) -> Result<(), String> {
        self.detached = true;
        // SAFETY: PTRACE_DETACH of a stopped, seized thread; data is a signal number.
        match unsafe { libc::ptrace(libc::PTRACE_DETACH, self.tid as libc::pid_t, 0, self.pending) } {
            0 => Ok(()),
            _ => Err(last_error()),
        }
    }
}

impl Drop for Tracee {
    fn drop(&mut self) {
        if !self.detached {
            // SAFETY: as in `detach`; a thread that is not stopped is detached by the kernel when
            // xtrace exits.
            unsafe { libc::ptrace(libc::PTRACE_DETACH, self.tid as libc::pid_t, 0, self.pending) };
        }
    }
}

/// The signal a stop with `status` holds for the thread: that of a signal-delivery stop, none for
/// a system-call stop (`SIGTRAP | 0x80`) or an event stop (a group stop, PTRACE_INTERRUPT's).
fn delivery_signal(status: i32) -> i32 {
    let signal = libc::WSTOPSIG(status);
    if status >> 16 != 0 || signal == SYSCALL_STOP {
        0
    } else {
        signal
    }
}

fn last_error() -> String {
    std::io::Error::last_os_error().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_signal_delivery_stop_holds_a_signal() {
        // Statuses as waitpid gives them: 0x7f, the signal in bits 8-15, an event in 16-23.
        let stop = |signal: i32, event: i32| 0x7f | (signal << 8) | (event << 16);
        assert_eq!(delivery_signal(stop(libc::SIGUSR1, 0)), libc::SIGUSR1);
        assert_eq!(delivery_signal(stop(SYSCALL_STOP, 0)), 0);
        assert_eq!(delivery_signal(stop(libc::SIGTRAP, libc::PTRACE_EVENT_STOP)), 0);
    }
}
