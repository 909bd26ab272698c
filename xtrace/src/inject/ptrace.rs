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

/// Bytes PTRACE_PEEKDATA and PTRACE_POKEDATA read and write.
const WORD: u64 = 8;
/// `PTRACE_O_TRACESYSGOOD`: system-call stops report `SIGTRAP | 0x80`.
const SYSCALL_STOP: i32 = libc::SIGTRAP | 0x80;
/// `PTRACE_SYSCALL_INFO_ENTRY`.
const INFO_ENTRY: u8 = 1;
/// PTRACE_GET_SYSCALL_INFO (Linux 5.3, <linux/ptrace.h>), which the libc crate gives for glibc
/// only, not for the release's static (musl) build.
const PTRACE_GET_SYSCALL_INFO: u32 = 0x420e;
/// System calls whose callers may hold malloc's or the loader's lock: not a safe point.
const UNSAFE_CALLS: &[u64] = &[9, 10, 11, 12, 25, 28, 56, 57, 58, 59, 60, 231, 435, 15];

/// Where [`Tracee::reach_safe_point`] left the thread.
#[derive(Debug)]
pub enum SafePoint {
    /// At a safe system-call entry, with these registers.
    At(Box<libc::user_regs_struct>),
    /// At a system-call entry while this other thread held the loader's lock; stopped.
    LoaderBusy(u32),
    /// At none by the deadline; stopped.
    Deadline,
}

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
        // The thread's own file: under `proc_mem.force_override=ptrace` only its tracer may write
        // where the process may not, and it is this thread xtrace traces.
        let mem = File::options()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/task/{tid}/mem"))
            .map_err(|e| Error::Ptrace {
                pid,
                step: "open /proc/PID/task/TID/mem",
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
    /// `deadline`; none while another thread holds the loader's lock, whose owner's thread id
    /// is at `load_lock` ([`super::loader_lock`]). The thread, when it returns without its
    /// registers there, is stopped again, ready to detach.
    pub fn reach_safe_point(
        &mut self,
        deadline: Instant,
        avoid: &[Range<u64>],
        load_lock: Option<u64>,
    ) -> Result<SafePoint, String> {
        // The first stop is PTRACE_INTERRUPT's, or one for a signal that came first (delivered on).
        let Some(first) = self.wait(deadline + Duration::from_secs(1))? else {
            return Err("the thread did not stop".into());
        };
        let mut signal = delivery_signal(first);
        loop {
            let entry = self.next_syscall_stop(signal, deadline)?;
            signal = 0;
            let Some(entry) = entry else {
                self.interrupt_for_detach()?;
                return Ok(SafePoint::Deadline);
            };
            if !entry {
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
            if let Some(owner) = self.loader_held_by_another(load_lock) {
                return Ok(SafePoint::LoaderBusy(owner));
            }
            return Ok(SafePoint::At(Box::new(regs)));
        }
    }

    /// The thread other than this one that holds the loader's lock, if one does (None too when
    /// the lock is not known or cannot be read).
    fn loader_held_by_another(&self, load_lock: Option<u64>) -> Option<u32> {
        let owner = super::loader_lock::owner(load_lock?, |at, len| self.read_bytes(at, len).ok())?;
        (owner != 0 && owner != self.tid).then_some(owner)
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

    /// Resumes the thread, delivering `signal`, to its next system-call stop, passing on the
    /// signals it stops for on the way: whether the stop is at an entry; None when `deadline`
    /// passed first (the thread still running).
    fn next_syscall_stop(&self, mut signal: i32, deadline: Instant) -> Result<Option<bool>, String> {
        loop {
            self.resume_to_syscall(signal)?;
            let Some(status) = self.wait(deadline)? else {
                return Ok(None);
            };
            if status >> 16 != 0 || libc::WSTOPSIG(status) != SYSCALL_STOP {
                // A signal to deliver on, or an event stop (a group stop, our interrupt).
                signal = delivery_signal(status);
                continue;
            }
            return self.at_entry().map(Some);
        }
    }

    /// Lets the thread, sent into code of xtrace's, run to the entry of the `getpid` whose
    /// `syscall` instruction ends just before `at` (stage 0's hand-over, the trampoline's
    /// report), passing over the calls it makes before: its registers there.
    pub fn run_to_getpid(&self, at: u64) -> Result<libc::user_regs_struct, String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let entry = self.next_syscall_stop(0, deadline)?;
            if entry.ok_or("the thread did not get there within 5 s")? {
                let regs = self.registers()?;
                if regs.rip == at && regs.orig_rax == libc::SYS_getpid as u64 {
                    return Ok(regs);
                }
            }
        }
    }

    /// Lets the thread, stopped at a system call's entry, make it, and stops it at its exit.
    pub fn finish_call(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self
            .next_syscall_stop(0, deadline)?
            .ok_or("the system call did not return within 5 s")?
        {}
        Ok(())
    }

    pub fn read_bytes(&self, address: u64, len: usize) -> Result<Vec<u8>, String> {
        let mut bytes = vec![0; len];
        self.mem
            .read_exact_at(&mut bytes, address)
            .map_err(|e| e.to_string())?;
        Ok(bytes)
    }

    /// Writes `bytes` at `address`, in a mapping the thread may not write itself: through
    /// /proc/PID/task/TID/mem, or, where the kernel lets no one write there so
    /// (`proc_mem.force_override=never`: EIO), a word at a time with PTRACE_POKEDATA, which it
    /// still lets the tracer do.
    pub fn write_bytes(&self, address: u64, bytes: &[u8]) -> Result<(), String> {
        match self.mem.write_all_at(bytes, address) {
            Err(e) if e.raw_os_error() == Some(libc::EIO) => self.poke(address, bytes),
            written => written.map_err(|e| e.to_string()),
        }
    }

    /// Writes `bytes` at `address` with PTRACE_POKEDATA; the bytes around them in their first and
    /// last words are read and written back as they were (no other thread writes where xtrace
    /// writes: the padding after a library's code, or the mapping stage 0 made).
    fn poke(&self, address: u64, bytes: &[u8]) -> Result<(), String> {
        if bytes.is_empty() {
            return Ok(());
        }
        let start = address & !(WORD - 1);
        let end = (address + bytes.len() as u64).next_multiple_of(WORD);
        let mut words = Vec::with_capacity((end - start) as usize);
        words.extend_from_slice(&self.peek(start)?.to_ne_bytes());
        if end - start > WORD {
            words.resize((end - start - WORD) as usize, 0);
            words.extend_from_slice(&self.peek(end - WORD)?.to_ne_bytes());
        }
        let from = (address - start) as usize;
        words[from..from + bytes.len()].copy_from_slice(bytes);
        for (i, bytes) in words.chunks_exact(WORD as usize).enumerate() {
            let at = start + i as u64 * WORD;
            let mut word = [0; WORD as usize];
            word.copy_from_slice(bytes);
            let word = u64::from_ne_bytes(word);
            // SAFETY: PTRACE_POKEDATA of a stopped tracee: an address and the word, as data.
            if unsafe { libc::ptrace(libc::PTRACE_POKEDATA, self.tid as libc::pid_t, at, word) } != 0 {
                return Err(format!("PTRACE_POKEDATA: {}", last_error()));
            }
        }
        Ok(())
    }

    /// The word at `at`, with PTRACE_PEEKDATA.
    fn peek(&self, at: u64) -> Result<u64, String> {
        // PEEKDATA returns the word, so -1 is an error only when errno says one.
        // SAFETY: errno is this thread's.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: PTRACE_PEEKDATA of a stopped tracee: an address, no data.
        let word = unsafe { libc::ptrace(libc::PTRACE_PEEKDATA, self.tid as libc::pid_t, at, 0) };
        match word == -1 && std::io::Error::last_os_error().raw_os_error() != Some(0) {
            true => Err(format!("PTRACE_PEEKDATA: {}", last_error())),
            false => Ok(word as u64),
        }
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

    /// PTRACE_POKEDATA writes exactly the bytes asked, whatever their alignment, and leaves the
    /// rest of their words as they were.
    #[test]
    fn poked_bytes_land_exactly() {
        /// Killed and reaped however the test ends.
        struct Child(libc::pid_t);
        impl Drop for Child {
            fn drop(&mut self) {
                // SAFETY: the child is ours.
                unsafe {
                    libc::kill(self.0, libc::SIGKILL);
                    libc::waitpid(self.0, core::ptr::null_mut(), libc::__WALL);
                }
            }
        }
        // All ones: words that read as -1, which PTRACE_PEEKDATA also returns for an error.
        let buffer = vec![0xff_u8; 48];
        let at = buffer.as_ptr() as u64;
        // SAFETY: the child only waits for signals until it is killed.
        let guard = match unsafe { libc::fork() } {
            0 => loop {
                // SAFETY: no preconditions.
                unsafe { libc::pause() };
            },
            -1 => panic!("fork: {}", last_error()),
            pid => Child(pid),
        };
        let child = guard.0;
        let tracee = Tracee::seize(child as u32, child as u32).expect("seized");
        let mut status = 0;
        // SAFETY: waits for the seized child's PTRACE_INTERRUPT stop.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, libc::__WALL) }, child);
        let mut expected = buffer.clone();
        for (offset, len) in [(3, 2), (5, 19), (8, 8), (30, 1), (0, 48), (47, 1), (9, 0)] {
            let bytes: Vec<u8> = (0..len).map(|i| (offset + i) as u8).collect();
            tracee.poke(at + offset as u64, &bytes).expect("poked");
            expected[offset..offset + len].copy_from_slice(&bytes);
            assert_eq!(tracee.read_bytes(at, 48).unwrap(), expected, "{offset} {len}");
        }
        assert_eq!(tracee.peek(at + 8).unwrap().to_ne_bytes(), expected[8..16]);
    }
}
